package grain

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// An ObserverHandler is the generated dispatch function of one method of
// an observer service: it asserts impl to the observer interface and req
// to the method's request type, and calls the method. Generated code
// only.
type ObserverHandler func(impl any, ctx context.Context, req proto.Message) (proto.Message, error)

// An ObserverHost makes observers: objects outside the cluster that
// grains call through references, as they call grains. A client is one.
// An observer lives as long as the host that made it stays connected, or
// until DeleteObserver; calls to it after that fail with NotFound (or
// Unavailable while the cluster cannot tell), so a grain can drop
// subscribers that are gone. Calls to one observer run one at a time, in
// the order they arrive. The generated CreateX function of an observer
// service X calls CreateObserver.
type ObserverHost interface {
	Caller
	// CreateObserver makes impl, which implements the observer service
	// desc, callable by grains, and returns its ID: pass it to grains
	// (ID.String in a request field, ParseID on the other side).
	CreateObserver(desc *ServiceDesc, impl any) (ID, error)
	// DeleteObserver ends the observer id.
	DeleteObserver(id ID)
}

// ObserverManager keeps the subscribers of a grain: observer references
// that subscribed and renew their subscription within the expiry, as
// Orleans' ObserverManager does. A subscriber that does not renew in
// time is dropped, and so is one whose call fails with NotFound (its
// client is gone), so a grain never calls a dead client for long. One
// that fails with Unavailable is kept: its client may be moving to
// another gateway, and will renew. Subscribers are kept in the order they first subscribed. Use it
// from the grain's own turns only: it is not safe for concurrent use, as
// grain state never needs to be.
type ObserverManager[R interface{ ID() ID }] struct {
	expiry time.Duration
	now    func() time.Time
	subs   map[ID]*subscription[R]
	order  []ID
}

type subscription[R any] struct {
	ref     R
	expires time.Time
}

// NewObserverManager returns a manager whose subscriptions last expiry
// past their last renewal. now tells the time (nil: time.Now); pass the
// runtime's clock in tests.
func NewObserverManager[R interface{ ID() ID }](expiry time.Duration, now func() time.Time) *ObserverManager[R] {
	if now == nil {
		now = time.Now
	}
	return &ObserverManager[R]{expiry: expiry, now: now, subs: map[ID]*subscription[R]{}}
}

// Subscribe adds ref, or renews its subscription.
func (m *ObserverManager[R]) Subscribe(ref R) {
	id := ref.ID()
	if s := m.subs[id]; s != nil {
		s.ref, s.expires = ref, m.now().Add(m.expiry)
		return
	}
	m.subs[id] = &subscription[R]{ref: ref, expires: m.now().Add(m.expiry)}
	m.order = append(m.order, id)
}

// Unsubscribe drops the subscriber id, if it is one.
func (m *ObserverManager[R]) Unsubscribe(id ID) {
	if m.subs[id] == nil {
		return
	}
	delete(m.subs, id)
	for i, o := range m.order {
		if o == id {
			m.order = append(m.order[:i], m.order[i+1:]...)
			break
		}
	}
}

// Len returns the number of subscribers whose subscription has not
// expired.
func (m *ObserverManager[R]) Len() int {
	m.expire()
	return len(m.order)
}

// Subscribers returns the live subscribers, in subscription order.
func (m *ObserverManager[R]) Subscribers() []R {
	m.expire()
	out := make([]R, 0, len(m.order))
	for _, id := range m.order {
		out = append(out, m.subs[id].ref)
	}
	return out
}

// Notify calls fn for every live subscriber, in subscription order, and
// drops those whose call fails with NotFound: their observer is gone. It
// returns the first error other than NotFound and Unavailable, after
// calling every subscriber. For a one-way observer method fn's error only says whether
// the call was sent; a gone observer is then dropped at its expiry.
func (m *ObserverManager[R]) Notify(ctx context.Context, fn func(ctx context.Context, ref R) error) error {
	var first error
	for _, ref := range m.Subscribers() {
		err := fn(ctx, ref)
		switch Code(err) {
		case codes.OK, codes.Unavailable: // Unavailable: kept; it renews once its client has moved
		case codes.NotFound:
			m.Unsubscribe(ref.ID())
		default:
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// expire drops the subscriptions that were not renewed in time.
func (m *ObserverManager[R]) expire() {
	now := m.now()
	kept := m.order[:0]
	for _, id := range m.order {
		if now.After(m.subs[id].expires) {
			delete(m.subs, id)
			continue
		}
		kept = append(kept, id)
	}
	clear(m.order[len(kept):])
	m.order = kept
}
