package protoactor

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/granaryio/granary/bench/scenario"
	benchpb "github.com/granaryio/granary/proto/bench"
)

// subscriberKind is the cluster kind of the stream subscribers.
const subscriberKind = "Subscriber"

// subscriberKindOf is the cluster kind whose grains count the events they
// handle into tally, each into the counter of its identity.
func subscriberKindOf(tally *scenario.Tally) *cluster.Kind {
	return cluster.NewKind(subscriberKind, actor.PropsFromProducer(func() actor.Actor { return &subscriber{tally: tally} }))
}

// subscriber is a pub-sub subscriber: a cluster grain, subscribed by its
// cluster identity, that counts the events delivered to it. protoactor
// delivers a batch of events as the events, one message each, then the
// batch itself, which it answers on the grain's behalf.
type subscriber struct {
	tally  *scenario.Tally
	events *scenario.Counter
}

// Receive handles one message.
func (s *subscriber) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *cluster.ClusterInit:
		s.events = s.tally.Counter(msg.Identity.Identity)
	case *benchpb.Event:
		s.events.Count()
	}
}

// publisher publishes to the topic with the cluster's Publisher, one
// event at a time, each a batch of one.
type publisher struct {
	p     cluster.Publisher
	topic string
	io.Closer
}

// Publish publishes event n and returns when the topic actor has answered:
// it has handed the event to the delivery actor of each member with
// subscribers.
func (p publisher) Publish(ctx context.Context, n int64) error {
	_, err := p.p.Publish(ctx, p.topic, &benchpb.Event{N: n})
	return err
}

// Stream starts a member hosting the subscriber kind, or with remote a
// publisher member and a subscribers' member, and subscribes the tally's
// subscribers to a topic whose actor is on the publisher's member.
func (System) Stream(ctx context.Context, tally *scenario.Tally, remote bool) (scenario.Publisher, error) {
	agent := test.NewInMemAgent()
	var pub, sub *cluster.Cluster
	var ms members
	if !remote {
		c, err := startMember(agent, subscriberKindOf(tally))
		if err != nil {
			return nil, err
		}
		pub, sub, ms = c, c, members{c}
	} else {
		var err error
		if pub, err = startMember(agent); err != nil {
			return nil, err
		}
		if sub, err = startMember(agent, subscriberKindOf(tally)); err != nil {
			_ = shutdown(pub)
			return nil, err
		}
		ms = members{sub, pub}
	}
	p := publisher{p: pub.Publisher(), Closer: ms}
	if err := subscribe(ctx, &p, pub, sub, tally); err != nil {
		_ = ms.Close()
		return nil, err
	}
	return p, nil
}

// topicTries bounds the topic names tried for one on the publisher's
// member.
const topicTries = 64

// subscribe names p's topic and subscribes the tally's subscribers to it
// through sub. Topics are placed by hash over the members that host the
// topic kind, which is every member: the topic is the first of "events0",
// "events1", ... whose actor protoactor places on the publisher's member,
// so that, as on Granary, the topic is beside its publisher. With two
// members, it first waits until each sees the other.
func subscribe(ctx context.Context, p *publisher, pub, sub *cluster.Cluster, tally *scenario.Tally) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	if pub != sub {
		for !pub.MemberList.ContainsMemberID(sub.ActorSystem.ID) || !sub.MemberList.ContainsMemberID(pub.ActorSystem.ID) {
			if err := pause(ctx); err != nil {
				return fmt.Errorf("protoactor: the members never saw each other: %w", err)
			}
		}
	}
	for i := range topicTries {
		topic := "events" + strconv.Itoa(i)
		if pid := pub.Get(topic, cluster.TopicActorKind); pid != nil && pid.Address == pub.ActorSystem.Address() {
			p.topic = topic
			break
		}
	}
	if p.topic == "" {
		return fmt.Errorf("protoactor: none of %d topics was placed on the publisher's member", topicTries)
	}
	for i := range tally.Subscribers() {
		id := cluster.NewClusterIdentity(tally.Name(i), subscriberKind)
		if _, err := sub.SubscribeByClusterIdentity(p.topic, id); err != nil {
			return fmt.Errorf("protoactor: subscribing %s to %s: %w", id, p.topic, err)
		}
	}
	return nil
}
