package streaming

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/silo/storage"
)

// stream is the activation of one stream's grain. Its turns change the
// subscriptions and queue events; its delivery goroutines take events off
// the queues. mu guards what both touch: the subscribers, their queues and
// what the turns report of them.
type stream struct {
	granaryv1.UnimplementedStreamGrain
	s     *Streams
	id    streams.ID
	p     ProviderConfig
	self  grain.ID
	state *grain.State[*granaryv1.StreamSubscriptionsState]
	epoch uint64
	seq   uint64
	typ   string // the events' message type, once known

	// A durable stream's log and partition (durable.go); last is the
	// highest offset this activation appended. mu guards pending,
	// appending and last.
	durable   bool
	key       string // recordKey
	log       storage.StreamLog
	part      storage.StreamPartition
	pending   []*appendWait
	appending bool
	last      uint64
	saving    bool // a goroutine saves cursors (saveLoop)

	mu      sync.Mutex
	subs    []*subscriber // explicit in subscription order, then implicit
	closing bool
	dirty   bool          // a parking not stored yet
	idle    chan struct{} // closed when no delivery runs while closing
	running int
}

// subscriber is one subscription's delivery state.
type subscriber struct {
	info    *granaryv1.StreamSubscriptionInfo // what Subscriptions reports; guarded by mu
	target  grain.ID
	queue   []*granaryv1.StreamEvent // waiting, oldest first; the head may be in flight
	running bool                     // a goroutine delivers the queue
	removed bool                     // unsubscribed: the goroutine stops
	// A durable stream's: pos is the offset of the next event to deliver,
	// and live says the subscriber takes appended events from its buffer
	// rather than from the log.
	pos  uint64
	live bool
	// saved is the position of the cursor saved last.
	saved uint64
}

func (t *stream) OnActivate(ctx grain.Context) error {
	id, p, err := t.s.parseStreamKey(ctx.ID().Key)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "granary: %v", err)
	}
	t.id, t.p, t.self = id, p, ctx.ID()
	if t.durable = p.Kind == KindDurable; t.durable {
		t.key = recordKey(id)
		t.log, t.part = p.Log, partitionOf(id.Provider, t.key, p.Partitions)
	}
	t.epoch = uint64(t.s.cfg.Clock.Now().UnixNano())
	t.state = t.s.spec.Of(ctx)
	st := t.state.Value()
	t.typ = st.GetType()
	parked := map[string]*granaryv1.StreamSubscriptionInfo{}
	for _, info := range st.GetSubscriptions() {
		if info.GetImplicit() {
			parked[info.GetId()] = info // kept only while parked
			continue
		}
		t.add(info)
	}
	for _, im := range t.s.cfg.Implicit(id.Namespace) {
		g := grain.ID{Type: im.Type, Key: id.Key}
		sid := implicitID(g, im.Handler.HandlerName())
		info := parked[sid]
		if info == nil {
			info = &granaryv1.StreamSubscriptionInfo{Id: sid, Grain: g.String(), Handler: im.Handler.HandlerName(), Implicit: true}
		}
		t.add(info)
		if t.typ == "" {
			t.typ = im.Handler.MessageType()
		}
	}
	if t.durable {
		if err := t.resume(ctx); err != nil {
			return err
		}
	}
	t.s.track(t, true)
	return nil
}

// status reports the stream to operators. Any goroutine.
func (t *stream) status() StreamStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := StreamStatus{ID: t.id, Type: t.typ, Last: streams.Token{Epoch: t.epoch, Sequence: t.seq}}
	if t.durable {
		st.Last = streams.Token{Sequence: t.last}
	}
	for _, sub := range t.subs {
		i := sub.info
		ss := SubscriptionStatus{
			ID: i.GetId(), Grain: i.GetGrain(), Handler: i.GetHandler(), Implicit: i.GetImplicit(),
			Parked: i.GetParked(), ParkedReason: i.GetParkedReason(),
			Handled: streams.Token{Epoch: i.GetHandled().GetEpoch(), Sequence: i.GetHandled().GetSequence()},
			Lag:     len(sub.queue),
		}
		if t.durable && !sub.live && t.last >= sub.pos {
			ss.Lag = int(t.last - sub.pos + 1) // log offsets: an upper bound
		}
		if i.GetParked() {
			ss.ParkedAt = time.Unix(0, i.GetParkedUnixNanos())
		}
		st.Subscriptions = append(st.Subscriptions, ss)
	}
	return st
}

// implicitID is the ID of grain g's implicit subscription through handler
// h: the same in every activation of the stream, so that a parked one
// stays parked.
func implicitID(g grain.ID, h string) string { return "implicit:" + g.String() + ":" + h }

func (t *stream) add(info *granaryv1.StreamSubscriptionInfo) *subscriber {
	g, _ := grain.ParseID(info.GetGrain())
	sub := &subscriber{info: info, target: g, live: !t.durable}
	t.subs = append(t.subs, sub)
	return sub
}

// OnDeactivate lets the deliveries in flight finish, until the
// deactivation's deadline; what is still queued then is dropped, as the
// memory provider promises no more.
func (t *stream) OnDeactivate(ctx grain.Context, _ grain.DeactivationReason) error {
	defer t.s.track(t, false)
	t.mu.Lock()
	t.closing = true
	t.idle = make(chan struct{})
	if t.running == 0 {
		close(t.idle)
	}
	idle := t.idle
	t.mu.Unlock()
	ctx.Blocking(func() {
		select {
		case <-idle:
		case <-ctx.Done():
		case <-t.s.ctx.Done():
		}
	})
	t.mu.Lock()
	for _, sub := range t.subs {
		if t.durable {
			clear(sub.queue) // the log keeps them
			sub.queue = nil
		} else {
			t.drop(sub, len(sub.queue))
		}
	}
	dirty := t.dirty
	t.mu.Unlock()
	if t.durable {
		ctx.Blocking(func() { t.saveCursors(ctx) })
	}
	if dirty {
		return t.save(ctx)
	}
	return nil
}

// checkType fixes the stream's message type at its first publish or
// subscription, and refuses any other later. mu held.
func (t *stream) checkType(typ, what string) error {
	switch {
	case typ == "":
		return status.Errorf(codes.InvalidArgument, "granary: stream %s: %s names no message type", t.id, what)
	case t.typ == "":
		t.typ = typ
	case t.typ != typ:
		return status.Errorf(codes.InvalidArgument, "granary: stream %s carries %s; %s is of %s", t.id, t.typ, what, typ)
	}
	return nil
}

func (t *stream) Publish(ctx grain.Context, req *granaryv1.StreamPublish) (*granaryv1.StreamPublished, error) {
	t.mu.Lock()
	if err := t.checkType(req.GetType(), "the event"); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	payloads := req.GetBatch()
	switch {
	case len(payloads) == 0:
		payloads = [][]byte{req.GetPayload()}
	case len(req.GetPayload()) != 0:
		t.mu.Unlock()
		return nil, status.Errorf(codes.InvalidArgument, "granary: stream %s: a publish carries an event or a batch, not both", t.id)
	}
	if t.durable {
		return t.publishDurable(ctx, payloads, len(req.GetBatch()) != 0) // unlocks mu
	}
	out := &granaryv1.StreamPublished{}
	for _, p := range payloads {
		t.seq++
		tok := &granaryv1.StreamToken{Epoch: t.epoch, Sequence: t.seq}
		t.offerMemory(&granaryv1.StreamEvent{Token: tok, Payload: p})
		if out.Token == nil {
			out.Token = tok
		}
		if len(req.GetBatch()) != 0 {
			out.Tokens = append(out.Tokens, tok)
		}
	}
	t.s.published.Add(uint64(len(payloads)))
	t.mu.Unlock()
	return out, nil
}

// offerMemory queues a memory stream's event for every subscriber; one
// whose buffer is full, or that is parked, misses it. mu held.
func (t *stream) offerMemory(ev *granaryv1.StreamEvent) {
	tok := ev.GetToken()
	for _, sub := range t.subs {
		if sub.info.GetParked() {
			t.s.dropped.Add(1)
			continue
		}
		if len(sub.queue) >= t.p.Buffer {
			t.s.dropped.Add(1)
			t.s.cfg.Log.Debug("stream subscriber's buffer is full: event dropped",
				zap.Stringer("stream", t.id), zap.String("subscription", sub.info.GetId()), zap.Stringer("token", streams.Token{Epoch: tok.Epoch, Sequence: tok.Sequence}))
			continue
		}
		sub.queue = append(sub.queue, ev)
		t.start(sub)
	}
}

// start starts sub's delivery goroutine unless one runs. mu held.
func (t *stream) start(sub *subscriber) {
	if sub.running || t.closing {
		return
	}
	sub.running = true
	t.running++
	go t.deliver(sub, t.typ)
}

func (t *stream) Subscribe(ctx grain.Context, req *granaryv1.StreamSubscribe) (*granaryv1.StreamSubscriptionInfo, error) {
	g, err := grain.ParseID(req.GetGrain())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "granary: stream %s: subscriber %q: %v", t.id, req.GetGrain(), err)
	}
	if h, ok := t.s.cfg.Handler(g.Type, req.GetHandler()); ok {
		if h == nil {
			return nil, status.Errorf(codes.FailedPrecondition, "granary: grain type %s registers no stream handler %q (streams.WithHandlers)", g.Type, req.GetHandler())
		}
		if h.MessageType() != req.GetType() {
			return nil, status.Errorf(codes.InvalidArgument, "granary: stream handler %q of %s takes %s, not %s", req.GetHandler(), g.Type, h.MessageType(), req.GetType())
		}
	}
	t.mu.Lock()
	prev := t.typ
	if err := t.checkType(req.GetType(), "the subscription's handler"); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	info := &granaryv1.StreamSubscriptionInfo{Id: uuid.NewString(), Grain: g.String(), Handler: req.GetHandler()}
	rewind := req.GetFrom() != nil || req.GetFromUnixNanos() != 0
	if rewind && !t.durable {
		t.typ = prev
		t.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "granary: stream %s: the memory provider keeps no events to rewind to", t.id)
	}
	t.mu.Unlock()
	var pos uint64
	if t.durable {
		// The cursor first: a subscription is stored only with it.
		var err error
		ctx.Blocking(func() {
			if pos, err = t.firstPosition(ctx, req); err == nil {
				err = t.log.SaveCursor(ctx, t.part, info.GetId(), pos-1)
			}
		})
		if err != nil {
			t.mu.Lock()
			t.typ = prev
			t.mu.Unlock()
			return nil, storeError(t, "starting a subscription's cursor", err)
		}
	}
	t.mu.Lock()
	sub := t.add(info)
	sub.pos, sub.saved = pos, pos
	t.mu.Unlock()
	if err := t.save(ctx); err != nil {
		t.mu.Lock()
		t.remove(sub)
		t.typ = prev
		t.mu.Unlock()
		return nil, err
	}
	if t.durable {
		t.mu.Lock()
		t.start(sub) // from the log: it may rewind
		t.mu.Unlock()
	}
	return t.snapshot(sub), nil
}

// save writes the explicit subscriptions, and the implicit ones that are
// parked, to the grain's state.
func (t *stream) save(ctx grain.Context) error {
	t.mu.Lock()
	t.dirty = false
	st := &granaryv1.StreamSubscriptionsState{Type: t.typ}
	for _, sub := range t.subs {
		if !sub.info.GetImplicit() || sub.info.GetParked() {
			st.Subscriptions = append(st.Subscriptions, proto.CloneOf(sub.info))
		}
	}
	t.mu.Unlock()
	t.state.Set(st)
	if err := t.state.Write(ctx); err != nil {
		t.mu.Lock()
		t.dirty = true // a parking in it is still to be stored
		t.mu.Unlock()
		return err
	}
	return nil
}

// remove drops sub from the subscribers; its goroutine, if any, stops
// after its delivery in flight. mu held.
func (t *stream) remove(sub *subscriber) {
	t.subs = slices.DeleteFunc(t.subs, func(x *subscriber) bool { return x == sub })
	sub.removed = true
	t.drop(sub, len(sub.queue))
}

// drop forgets the first n events of sub's queue as not delivered. mu held.
func (t *stream) drop(sub *subscriber, n int) {
	t.s.dropped.Add(uint64(n))
	clear(sub.queue[:n])
	sub.queue = sub.queue[n:]
}

func (t *stream) find(id, g string) *subscriber {
	for _, sub := range t.subs {
		if sub.info.GetId() == id && (g == "" || sub.info.GetGrain() == g) {
			return sub
		}
	}
	return nil
}

func (t *stream) Unsubscribe(ctx grain.Context, req *granaryv1.StreamSubscriptionRef) (*granaryv1.StreamUnsubscribed, error) {
	t.mu.Lock()
	sub := t.find(req.GetId(), req.GetGrain())
	switch {
	case sub == nil:
		t.mu.Unlock()
		return &granaryv1.StreamUnsubscribed{}, nil
	case sub.info.GetImplicit():
		t.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "granary: stream %s: %s is an implicit subscription, which follows from its type's registration and cannot be unsubscribed", t.id, req.GetId())
	}
	t.remove(sub)
	t.mu.Unlock()
	if err := t.save(ctx); err != nil {
		return nil, err
	}
	if t.durable {
		var err error
		ctx.Blocking(func() { err = t.log.DeleteCursor(ctx, t.part, sub.info.GetId()) })
		if err != nil {
			t.s.cfg.Log.Warn("stream: deleting an ended subscription's cursor failed", zap.Stringer("stream", t.id), zap.String("subscription", sub.info.GetId()), zap.Error(err))
		}
	}
	return &granaryv1.StreamUnsubscribed{Existed: true}, nil
}

// snapshot copies what Subscriptions reports of sub.
func (t *stream) snapshot(sub *subscriber) *granaryv1.StreamSubscriptionInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	return proto.CloneOf(sub.info)
}

func (t *stream) Subscriptions(ctx grain.Context, req *granaryv1.StreamSubscriptionsRequest) (*granaryv1.StreamSubscriptionList, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := &granaryv1.StreamSubscriptionList{Type: t.typ}
	for _, sub := range t.subs {
		if req.GetGrain() == "" || sub.info.GetGrain() == req.GetGrain() {
			out.Subscriptions = append(out.Subscriptions, proto.CloneOf(sub.info))
		}
	}
	return out, nil
}

func (t *stream) Unpark(ctx grain.Context, req *granaryv1.StreamSubscriptionRef) (*granaryv1.StreamSubscriptionInfo, error) {
	t.mu.Lock()
	sub := t.find(req.GetId(), req.GetGrain())
	if sub == nil {
		t.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "granary: stream %s has no subscription %q of %s", t.id, req.GetId(), req.GetGrain())
	}
	was := sub.info.GetParked()
	sub.info.Parked, sub.info.ParkedReason, sub.info.ParkedUnixNanos = false, "", 0
	t.mu.Unlock()
	if was {
		if err := t.save(ctx); err != nil {
			t.mu.Lock()
			sub.info.Parked = true
			t.mu.Unlock()
			return nil, err
		}
		t.s.unparked.Add(1)
		if t.durable {
			t.mu.Lock()
			sub.live = false // catch up from its cursor
			t.start(sub)
			t.mu.Unlock()
		}
		t.s.cfg.Log.Info("stream subscription unparked", zap.Stringer("stream", t.id), zap.String("subscription", req.GetId()), zap.String("grain", req.GetGrain()))
	}
	return t.snapshot(sub), nil
}

// deliver sends sub's events, a batch at a time, until none wait, the
// subscription is parked or removed, or the stream closes: from its
// buffer, and for a durable stream's subscriber that fell behind, from the
// log. One goroutine a subscriber with events waiting.
func (t *stream) deliver(sub *subscriber, typ string) {
	failures := 0
	for {
		t.mu.Lock()
		var evs []*granaryv1.StreamEvent
		fromQueue := len(sub.queue) > 0
		switch {
		case sub.removed || sub.info.GetParked() || t.s.ctx.Err() != nil:
		case fromQueue:
			evs = slices.Clone(sub.queue[:min(len(sub.queue), t.p.Batch)])
		case t.durable && !sub.live:
			pos := sub.pos
			t.mu.Unlock()
			var next uint64
			var err error
			if evs, next, err = t.readLog(pos, typ); err != nil {
				t.s.cfg.Log.Warn("stream: reading the log failed", zap.Stringer("stream", t.id), zap.Error(err))
				t.wait(t.backoff(1))
				continue
			}
			t.mu.Lock()
			if len(evs) == 0 {
				sub.pos = max(sub.pos, next)
				if t.last < sub.pos {
					sub.live = true // every event appended here was read
				}
				t.mu.Unlock()
				continue
			}
		}
		if len(evs) == 0 {
			sub.running = false
			t.running--
			if t.closing && t.running == 0 {
				close(t.idle)
			}
			t.mu.Unlock()
			return
		}
		// A request of its own each time: the callee may hold it past a
		// timed-out call.
		req := &granaryv1.StreamDelivery{
			Provider: t.id.Provider, Namespace: t.id.Namespace, Key: t.id.Key,
			Subscription: sub.info.GetId(), Handler: sub.info.GetHandler(), Type: typ,
			Events: evs,
		}
		t.mu.Unlock()

		handled, err := t.send(sub.target, req)
		t.mu.Lock()
		if handled > 0 {
			t.s.delivered.Add(uint64(handled))
			sub.info.Handled = req.Events[handled-1].GetToken()
			if fromQueue {
				clear(sub.queue[:handled])
				sub.queue = sub.queue[handled:]
			}
			if t.durable {
				sub.pos = sub.info.Handled.GetSequence() + 1
				t.markHandled()
			}
			failures = 0
		}
		if err == nil {
			t.mu.Unlock()
			continue
		}
		failures++
		if failures <= t.p.Retries {
			t.mu.Unlock()
			t.s.retried.Add(1)
			t.wait(t.backoff(failures)) // if the silo closes, the loop's check ends it
			continue
		}
		// Past its retries: park. A memory stream keeps nothing for it; a
		// durable one keeps its cursor, from which it resumes.
		sub.info.Parked = true
		sub.info.ParkedReason = err.Error()
		sub.info.ParkedUnixNanos = t.s.cfg.Clock.Now().UnixNano()
		if t.durable {
			clear(sub.queue)
			sub.queue = sub.queue[:0]
			sub.live = false
		} else {
			t.drop(sub, len(sub.queue))
		}
		t.dirty = true // stored at the next change, or at deactivation
		t.mu.Unlock()
		t.s.parked.Add(1)
		t.s.cfg.Log.Warn("stream subscription parked: its deliveries kept failing",
			zap.Stringer("stream", t.id), zap.String("subscription", sub.info.GetId()),
			zap.String("grain", sub.target.String()), zap.Int("tries", failures), zap.Error(err))
	}
}

// send makes one delivery to target and says how many of its events the
// subscriber handled, and why it stopped short. A call that fails leaves
// unknown how far the subscriber got, so it counts as none handled: the
// events are delivered again, and a handler may see one twice (the token
// tells).
func (t *stream) send(target grain.ID, req *granaryv1.StreamDelivery) (handled int, err error) {
	// The runtime's timeout, not a context's: no timer and no child of a
	// context that every delivery goroutine shares. A closing silo fails
	// the call itself.
	out, err := t.s.cfg.Caller.Invoke(context.Background(), target, t.s.cfg.Deliver, req, grain.WithTimeout(t.p.DeliverFor))
	if err != nil {
		return 0, err
	}
	r, ok := out.(*granaryv1.StreamDelivered)
	if !ok {
		return 0, status.Errorf(codes.Internal, "granary: a stream delivery answered with %T", out)
	}
	handled = min(int(r.GetHandled()), len(req.Events))
	if handled < len(req.Events) {
		c := codes.Code(r.GetCode())
		if c == codes.OK {
			c = codes.Unknown
		}
		return handled, status.Error(c, r.GetMessage())
	}
	return handled, nil
}

// backoff is the wait before the n-th try again.
func (t *stream) backoff(n int) time.Duration {
	d := t.p.RetryMin
	for i := 1; i < n && d < t.p.RetryMax; i++ {
		d *= 2
	}
	return min(d, t.p.RetryMax)
}

// wait waits d on the silo's clock, or until the silo closes.
func (t *stream) wait(d time.Duration) {
	tm := t.s.cfg.Clock.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.Chan():
	case <-t.s.ctx.Done():
	}
}
