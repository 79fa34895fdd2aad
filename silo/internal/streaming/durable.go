package streaming

import (
	"context"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	"github.com/granaryio/granary/internal/hashmix"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/silo/storage"
)

// A durable stream appends each event to its log partition before the
// publish returns, and delivers from there: each subscription has a
// cursor in the log, saved after its subscriber handled the events up to
// it, so an event whose publish returned reaches every subscriber at least
// once whatever dies. A subscriber that keeps up gets the events from its
// buffer as they are appended; one that fell behind (its buffer full, the
// stream activated again, unparked) reads from the log, from its cursor,
// until it has caught up.

// partitionOf is the log partition of stream key (namespace/key).
func partitionOf(provider, streamKey string, partitions int) storage.StreamPartition {
	return storage.StreamPartition{Provider: provider, N: uint32(hashmix.Mix64(hashmix.FNV1a(streamKey)) % uint64(partitions))}
}

// recordKey is the stream's name in its log records: what follows the
// provider, which the partition names.
func recordKey(id streams.ID) string { return id.Namespace + "/" + id.Key }

// appendWait is a publish waiting for its append: one event, or a batch.
type appendWait struct {
	recs []storage.StreamRecord
	done chan struct{}
	err  error // set before done closes
}

// resume gives each subscription its position in the log: the next event
// after its cursor, or, for one that has none yet (an implicit
// subscription the stream never had), the next event appended. Then it
// starts the deliveries that catch up. OnActivate.
func (t *stream) resume(ctx grain.Context) error {
	var err error
	ctx.Blocking(func() {
		var next uint64
		if _, next, err = t.log.Bounds(ctx, t.part); err != nil {
			return
		}
		for _, sub := range t.subs {
			var c uint64
			var ok bool
			if c, ok, err = t.log.Cursor(ctx, t.part, sub.info.GetId()); err != nil {
				return
			}
			if !ok {
				c = next - 1
				if err = t.log.SaveCursor(ctx, t.part, sub.info.GetId(), c); err != nil {
					return
				}
			}
			sub.pos, sub.saved = c+1, c+1
		}
	})
	if err != nil {
		return storeError(t, "resuming its subscriptions", err)
	}
	t.mu.Lock()
	for _, sub := range t.subs {
		t.start(sub)
	}
	t.mu.Unlock()
	return nil
}

// storeError reports a failure of the log as Unavailable, unless it is
// the caller's own.
func storeError(t *stream, what string, err error) error {
	if c := status.Code(err); c == codes.Canceled || c == codes.DeadlineExceeded {
		return err
	}
	switch err {
	case context.Canceled, context.DeadlineExceeded:
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Unavailable, "granary: stream %s: %s: %v", t.id, what, err)
}

// firstPosition is where a new subscription starts: the next event
// appended, or with a rewind, the event of the token or the first at or
// after the time. Subscribe, in Blocking.
func (t *stream) firstPosition(ctx context.Context, req *granaryv1.StreamSubscribe) (uint64, error) {
	oldest, next, err := t.log.Bounds(ctx, t.part)
	if err != nil {
		return 0, err
	}
	pos := next
	switch {
	case req.GetFrom() != nil:
		pos = req.GetFrom().GetSequence()
	case req.GetFromUnixNanos() != 0:
		if pos, err = t.log.OffsetAt(ctx, t.part, timeOf(req.GetFromUnixNanos())); err != nil {
			return 0, err
		}
	}
	return min(max(pos, oldest, 1), next), nil
}

// publishDurable appends the events of one publish (one, or a batch) and
// waits until they are durable. The appends of publishes that come
// meanwhile go together, in the order they came, in the next batch
// (appendLoop). A batch's reply lists each event's token.
func (t *stream) publishDurable(ctx grain.Context, payloads [][]byte, batch bool) (*granaryv1.StreamPublished, error) {
	w := &appendWait{recs: make([]storage.StreamRecord, len(payloads)), done: make(chan struct{})}
	for i, p := range payloads {
		w.recs[i] = storage.StreamRecord{Stream: t.key, Type: t.typ, Payload: p}
	}
	t.pending = append(t.pending, w)
	if !t.appending {
		t.appending = true
		go t.appendLoop()
	}
	t.mu.Unlock()
	ctx.Blocking(func() {
		select {
		case <-w.done:
		case <-ctx.Done():
		}
	})
	select {
	case <-w.done:
	default:
		// The caller gave up: the event may still be appended, and then
		// delivered, as a publish whose outcome is unknown may be.
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if w.err != nil {
		return nil, storeError(t, "appending to its log", w.err)
	}
	t.s.published.Add(uint64(len(w.recs)))
	out := &granaryv1.StreamPublished{Token: &granaryv1.StreamToken{Sequence: w.recs[0].Offset}}
	if batch {
		for _, r := range w.recs {
			out.Tokens = append(out.Tokens, &granaryv1.StreamToken{Sequence: r.Offset})
		}
	}
	return out, nil
}

// appendLoop appends the waiting publishes, a batch at a time, and hands
// each appended event to the subscribers that keep up. One goroutine while
// publishes wait.
func (t *stream) appendLoop() {
	for {
		t.mu.Lock()
		batch := t.pending
		t.pending = nil
		if len(batch) == 0 {
			t.appending = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		var recs []storage.StreamRecord
		for _, w := range batch {
			recs = append(recs, w.recs...)
		}
		ctx, cancel := context.WithTimeout(t.s.ctx, t.p.DeliverFor)
		err := t.log.Append(ctx, t.part, recs)
		cancel()
		t.mu.Lock()
		if err == nil {
			i := 0
			for _, w := range batch {
				for j := range w.recs {
					w.recs[j].Offset = recs[i].Offset
					t.offer(&granaryv1.StreamEvent{Token: &granaryv1.StreamToken{Sequence: recs[i].Offset}, Payload: recs[i].Payload})
					i++
				}
			}
		}
		t.mu.Unlock()
		for _, w := range batch {
			w.err = err
			close(w.done)
		}
	}
}

// offer queues an appended event for the subscribers that keep up; one
// whose buffer is full falls back to the log, which has the event. mu
// held.
func (t *stream) offer(ev *granaryv1.StreamEvent) {
	off := ev.GetToken().GetSequence()
	t.last = max(t.last, off)
	for _, sub := range t.subs {
		switch {
		case sub.info.GetParked() || !sub.live || off < sub.pos:
			// Parked or reading the log: the log has it. Below pos: read
			// from the log already.
		case len(sub.queue) >= t.p.Buffer:
			sub.live = false
		default:
			sub.queue = append(sub.queue, ev)
			t.start(sub)
		}
	}
}

// readLog reads the next events of the stream for sub from the log, from
// position pos: up to a batch of them, and next, the position past the
// records read when none of them was the stream's. An event of another
// type than typ, the stream's, was published while the stream had no
// subscription to fix its type; no handler of the stream can take it, so
// it is skipped, logged and counted as dropped.
func (t *stream) readLog(pos uint64, typ string) (evs []*granaryv1.StreamEvent, next uint64, err error) {
	ctx, cancel := context.WithTimeout(t.s.ctx, t.p.DeliverFor)
	defer cancel()
	recs, err := t.log.Read(ctx, t.part, pos, 4*t.p.Batch)
	if err != nil {
		return nil, pos, err
	}
	next = pos
	key := t.key
	for _, r := range recs {
		next = r.Offset + 1
		if r.Stream != key {
			continue
		}
		if r.Type != typ {
			t.s.dropped.Add(1)
			t.s.cfg.Log.Warn("stream: an event of another type than the stream's is skipped",
				zap.Stringer("stream", t.id), zap.Uint64("offset", r.Offset), zap.String("type", r.Type), zap.String("stream_type", typ))
			continue
		}
		evs = append(evs, &granaryv1.StreamEvent{Token: &granaryv1.StreamToken{Sequence: r.Offset}, Payload: r.Payload})
		if len(evs) == t.p.Batch {
			break
		}
	}
	return evs, next, nil
}

// CursorInterval is how often a durable stream saves the cursors of the
// subscribers that handled events since. Saving after every delivery
// would cost a commit each; between saves, a restart delivers the events
// since the last save again, as at-least-once allows.
const CursorInterval = 100 * time.Millisecond

// markHandled notes that a subscriber's cursor moved, and starts the
// saver. mu held.
func (t *stream) markHandled() {
	if !t.saving && t.s.ctx.Err() == nil {
		t.saving = true
		go t.saveLoop()
	}
}

// saveLoop saves the cursors that moved every CursorInterval, until none
// moved in one.
func (t *stream) saveLoop() {
	for {
		t.wait(CursorInterval)
		ctx, cancel := context.WithTimeout(t.s.ctx, t.p.DeliverFor)
		n := t.saveCursors(ctx)
		cancel()
		t.mu.Lock()
		if n == 0 || t.s.ctx.Err() != nil {
			t.saving = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
	}
}

// saveCursors saves, together, the cursors of the subscribers that
// handled events since their last save, and says how many there were. A
// failure is logged, and tried again at the next save.
func (t *stream) saveCursors(ctx context.Context) int {
	type save struct {
		sub *subscriber
		pos uint64
	}
	var saves []save
	t.mu.Lock()
	for _, sub := range t.subs {
		if sub.pos > sub.saved && sub.pos > 0 {
			saves = append(saves, save{sub, sub.pos})
		}
	}
	t.mu.Unlock()
	errs := make([]error, len(saves))
	var wg sync.WaitGroup
	for i, sv := range saves {
		wg.Go(func() { errs[i] = t.log.SaveCursor(ctx, t.part, sv.sub.info.GetId(), sv.pos-1) })
	}
	wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, sv := range saves {
		if errs[i] != nil {
			if t.s.ctx.Err() == nil {
				t.s.cfg.Log.Warn("stream: saving a subscription's cursor failed; its events since the last saved may be delivered again",
					zap.Stringer("stream", t.id), zap.String("subscription", sv.sub.info.GetId()), zap.Uint64("offset", sv.pos-1), zap.Error(errs[i]))
			}
			continue
		}
		sv.sub.saved = max(sv.sub.saved, sv.pos)
	}
	return len(saves)
}

func (t *stream) Pending(ctx grain.Context, req *granaryv1.StreamPending) (*granaryv1.StreamPendingReply, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, sub := range t.subs {
		if t.durable && !sub.info.GetParked() && sub.pos <= req.GetUpTo() {
			return &granaryv1.StreamPendingReply{}, nil
		}
	}
	return &granaryv1.StreamPendingReply{CaughtUp: true}, nil
}

// sweeperCursor is the cursor, in each partition, of the partition's
// sweeper: the events before it are known handled, or parked.
const sweeperCursor = "granary.sweeper"

// sweepPartition asks each stream with events in part past the sweeper's
// cursor whether its subscribers caught up, which activates the streams
// whose activation was lost, and moves the cursor past the events of
// streams that did. The owner of the partition, periodically.
func (s *Streams) sweepPartition(ctx context.Context, name string, p ProviderConfig, part storage.StreamPartition) error {
	c, _, err := p.Log.Cursor(ctx, part, sweeperCursor)
	if err != nil {
		return err
	}
	recs, err := p.Log.Read(ctx, part, c+1, sweepWindow)
	if err != nil || len(recs) == 0 {
		return err
	}
	type span struct{ first, last uint64 }
	spans := map[string]*span{}
	var order []string
	for _, r := range recs {
		if sp := spans[r.Stream]; sp != nil {
			sp.last = r.Offset
			continue
		}
		spans[r.Stream] = &span{first: r.Offset, last: r.Offset}
		order = append(order, r.Stream)
	}
	upTo := recs[len(recs)-1].Offset
	for _, key := range order {
		sp := spans[key]
		r, err := granaryv1.NewStreamRef(s.cfg.Caller, name+"/"+key).Pending(ctx, &granaryv1.StreamPending{UpTo: sp.last})
		switch {
		case status.Code(err) == codes.InvalidArgument:
			// Not a stream's name: nobody subscribes to it.
		case err != nil || !r.GetCaughtUp():
			upTo = min(upTo, sp.first-1)
		}
	}
	if upTo > c {
		return p.Log.SaveCursor(ctx, part, sweeperCursor, upTo)
	}
	return nil
}

// sweepWindow bounds the records a sweep reads from one partition.
const sweepWindow = 4096

// partitionOwnerID is the grain ID whose directory owner sweeps and trims
// partition n of provider name.
func partitionOwnerID(name string, n uint32) grain.ID {
	return grain.ID{Type: "granary.v1.StreamPartition", Key: name + "/" + strconv.FormatUint(uint64(n), 10)}
}

func timeOf(unixNanos int64) time.Time { return time.Unix(0, unixNanos) }
