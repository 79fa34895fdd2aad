package silo

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/granaryio/granary/grain/streams"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/silo/internal/streaming"
)

// This file answers operators about streams (package grain/streams): the
// streams active on this silo with their subscriptions, how many events
// wait for each subscriber and which are parked; the streams' counters;
// and unparking a subscription. The admin server (silo/admin) and the
// metrics (silo/metrics) serve it. As with introspect.go, none of it is on
// a call's path: Streams takes each active stream's lock once, briefly,
// and StreamStats reads atomic counters.

// StreamStatus is what an operator sees of one stream active on this silo.
type StreamStatus struct {
	ID streams.ID
	// Type is the full name of the events' message type, "" until the
	// stream has had an event or a subscription.
	Type string
	// Last is the token of the last event published to the stream's
	// activation; zero when none was.
	Last streams.Token
	// Subscriptions are the stream's subscriptions, explicit ones in the
	// order they were made, then implicit ones.
	Subscriptions []SubscriptionStatus
}

// Lag is how many events wait for the stream's subscribers, summed over
// its subscriptions.
func (st StreamStatus) Lag() int {
	n := 0
	for _, sub := range st.Subscriptions {
		n += sub.Lag
	}
	return n
}

// Parked counts the stream's parked subscriptions.
func (st StreamStatus) Parked() int {
	n := 0
	for _, sub := range st.Subscriptions {
		if sub.Parked {
			n++
		}
	}
	return n
}

// SubscriptionStatus is what an operator sees of one subscription.
type SubscriptionStatus struct {
	// ID names the subscription within its stream: what UnparkStream
	// takes.
	ID string
	// Grain is the subscriber, TYPE/KEY, and Handler the name of its
	// type's stream handler that takes the events.
	Grain   string
	Handler string
	// Implicit: the subscription follows from the subscriber type's
	// registration (streams.Implicit).
	Implicit bool
	// Parked: delivery to the subscriber failed past the provider's
	// retries at ParkedAt, because of ParkedReason (the last failure),
	// and stopped until the subscription is unparked.
	Parked       bool
	ParkedReason string
	ParkedAt     time.Time
	// Handled is the token of the last event the subscriber handled;
	// zero when it handled none in this activation of the stream.
	Handled streams.Token
	// Lag is how many events wait for the subscriber: in its buffer, or
	// for a durable stream's subscriber that reads from the log, the log
	// offsets it has still to read (an upper bound).
	Lag int
}

// StreamStats counts what the streams active on this silo did since it
// started.
type StreamStats struct {
	// Published counts the events published to streams active here.
	Published uint64
	// Delivered counts the events subscribers handled, once per
	// subscriber.
	Delivered uint64
	// Dropped counts the events not delivered to a subscriber, once per
	// subscriber: its buffer was full, it was parked, or its stream
	// deactivated first.
	Dropped uint64
	// Retried counts deliveries tried again after a failure.
	Retried uint64
	// Parked counts the subscriptions parked, and Unparked those
	// unparked.
	Parked, Unparked uint64
}

// Streams returns the streams active on this silo, sorted by name, with
// their subscriptions: nil when Config.Streams is nil. It takes each
// stream's lock once, so call it from an operator's request or a scrape,
// not per call. Any goroutine.
func (s *Silo) Streams() []StreamStatus {
	if s.streams == nil {
		return nil
	}
	active := s.streams.Active()
	out := make([]StreamStatus, len(active))
	for i, st := range active {
		out[i] = StreamStatus{ID: st.ID, Type: st.Type, Last: st.Last, Subscriptions: make([]SubscriptionStatus, len(st.Subscriptions))}
		for j, sub := range st.Subscriptions {
			out[i].Subscriptions[j] = subscriptionStatus(sub)
		}
	}
	return out
}

// subscriptionStatus copies the stream runtime's view of a subscription,
// field by field, so that fields it gains do not break this one.
func subscriptionStatus(sub streaming.SubscriptionStatus) SubscriptionStatus {
	return SubscriptionStatus{
		ID: sub.ID, Grain: sub.Grain, Handler: sub.Handler, Implicit: sub.Implicit,
		Parked: sub.Parked, ParkedReason: sub.ParkedReason, ParkedAt: sub.ParkedAt,
		Handled: sub.Handled, Lag: sub.Lag,
	}
}

// StreamStats returns the streams' counters on this silo, and ok false
// when Config.Streams is nil. Any goroutine.
func (s *Silo) StreamStats() (st StreamStats, ok bool) {
	if s.streams == nil {
		return st, false
	}
	c := s.streams.Stats()
	return StreamStats{
		Published: c.Published, Delivered: c.Delivered, Dropped: c.Dropped,
		Retried: c.Retried, Parked: c.Parked, Unparked: c.Unparked,
	}, true
}

// UnparkStream resumes delivery to subscription of stream
// ("provider/namespace/key"), wherever in the cluster the stream is
// active: it calls the stream grain's Unpark as this silo, which activates
// the stream if it is not active. A memory stream's subscriber gets the
// events published from then on (those published while it was parked
// were dropped); a durable stream's resumes from its cursor, and gets
// those too. It returns the subscription as it is now, with Lag zero: the
// stream's answer does not tell it. Unparking a subscription that is not
// parked changes nothing.
//
// Errors: FailedPrecondition when Config.Streams is nil, Unavailable
// before Start has returned, InvalidArgument for a malformed stream name
// or an empty subscription, NotFound for a provider that is not
// configured or a subscription the stream does not have; else the call's
// own. Any goroutine.
func (s *Silo) UnparkStream(ctx context.Context, stream, subscription string) (SubscriptionStatus, error) {
	if s.streams == nil {
		return SubscriptionStatus{}, status.Error(codes.FailedPrecondition, "granary: this silo runs no streams (Config.Streams is nil)")
	}
	if !s.up.Load() {
		return SubscriptionStatus{}, status.Error(codes.Unavailable, s.Ready().Error())
	}
	id, err := streams.ParseID(stream)
	if err != nil {
		return SubscriptionStatus{}, status.Errorf(codes.InvalidArgument, "granary: %v", err)
	}
	if _, ok := s.cfg.Streams.Providers[id.Provider]; !ok {
		return SubscriptionStatus{}, status.Errorf(codes.NotFound, "granary: stream %s: no stream provider %q is configured", id, id.Provider)
	}
	if subscription == "" {
		return SubscriptionStatus{}, status.Errorf(codes.InvalidArgument, "granary: stream %s: empty subscription ID", id)
	}
	// An empty Grain matches the subscription whoever the subscriber is.
	info, err := granaryv1.NewStreamRef(s, id.String()).Unpark(ctx, &granaryv1.StreamSubscriptionRef{Id: subscription})
	if err != nil {
		return SubscriptionStatus{}, err
	}
	out := SubscriptionStatus{
		ID: info.GetId(), Grain: info.GetGrain(), Handler: info.GetHandler(), Implicit: info.GetImplicit(),
		Parked: info.GetParked(), ParkedReason: info.GetParkedReason(),
		Handled: streams.Token{Epoch: info.GetHandled().GetEpoch(), Sequence: info.GetHandled().GetSequence()},
	}
	if out.Parked {
		out.ParkedAt = time.Unix(0, info.GetParkedUnixNanos())
	}
	return out, nil
}
