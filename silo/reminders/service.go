package reminders

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
)

// fireBatch bounds how many ticks one turn of the loop fires, so that a
// crowd of ticks due at once does not hold up the loop's other work.
const fireBatch = 1024

// errStopped is returned by settle when the service stopped.
var errStopped = errors.New("reminders: service stopped")

// Service fires the reminders of the ranges its silo owns. See the package
// documentation for its contract. Its exported methods may be called from
// any goroutine.
type Service struct {
	cfg   Config
	clock clockwork.Clock
	log   *zap.Logger

	ctx      context.Context // cancelled by Stop: ends the loop and its reads
	cancel   context.CancelFunc
	loopDone chan struct{}  // closed when the loop has returned
	readers  sync.WaitGroup // table reads in flight; Add by the loop only

	mu      sync.Mutex
	inbox   []func() // work for the loop, in order; mu held
	started bool     // mu held
	stopped bool     // mu held
	wake    chan struct{}

	statsMu sync.Mutex
	stats   Stats // statsMu held

	// Owned by the loop goroutine: only it reads or writes them, and only
	// functions that run on it (the loop's methods and the inbox's
	// closures) may be called with them.
	sched       *schedule
	ranges      []storage.HashRange // the positions owned, in normal form
	loadRanges  []storage.HashRange // owned positions to read from the table next
	loadGrains  map[grain.ID]uint64 // grains to read from the table, by hash
	grainQueue  []grain.ID          // loadGrains in order; may hold stale IDs
	retryRanges []storage.HashRange // positions whose read failed
	retryGrains map[grain.ID]uint64 // grains whose read failed
	retryAt     time.Time           // when to read the retries; zero when none
	reading     bool                // a table read is out
	loadSeq     uint64              // counts the range loads applied
	nextRefresh time.Time
	timer       clockwork.Timer // the one timer: next tick, refresh or retry
	armedAt     time.Time       // when timer fires; zero when it has fired
	idle        []chan struct{} // settle calls waiting for the loop to go idle
}

// New returns a Service configured by cfg, not started.
func New(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{
		cfg:         cfg,
		clock:       cfg.Clock,
		log:         cfg.Logger,
		ctx:         ctx,
		cancel:      cancel,
		loopDone:    make(chan struct{}),
		wake:        make(chan struct{}, 1),
		stats:       Stats{Tardiness: newHistogram(tardinessBounds)},
		sched:       newSchedule(),
		loadGrains:  make(map[grain.ID]uint64),
		retryGrains: make(map[grain.ID]uint64),
	}, nil
}

// Start starts the service's goroutine. A second Start, or one after Stop,
// does nothing. Any goroutine.
func (s *Service) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return
	}
	s.started = true
	go s.run()
}

// Stop stops the service: it cancels the table reads in flight, stops the
// timer and the goroutines, and waits for them. No Fire is called once it
// returns. Ticks whose Fire was called are not waited for; their done may
// come after Stop, and does nothing. Stop may be called more than once.
// Any goroutine.
func (s *Service) Stop() {
	s.mu.Lock()
	s.stopped = true
	started := s.started
	s.inbox = nil
	s.mu.Unlock()
	s.cancel()
	if started {
		<-s.loopDone
	}
	s.readers.Wait()
}

// SetRanges sets the ring positions the silo owns, as after a membership
// change. The reminders no longer owned stop ticking at once (a tick
// already running is not rescheduled); those newly owned are read from the
// table, and the read is retried every RetryInterval until it succeeds or
// the ranges change again. Any goroutine; it does not block.
func (s *Service) SetRanges(r []storage.HashRange) {
	rs := normalize(r)
	s.post(func() { s.setRanges(rs) })
}

// Changed tells the service that grain id's reminders changed in the table:
// when hash, the grain's ring position, is owned, the service reads them
// and reconciles: it adds the new ones, takes the new schedule of the
// changed ones, and drops the removed ones. Any goroutine; it does not
// block: the read is queued.
func (s *Service) Changed(id grain.ID, hash uint64) {
	s.post(func() { s.changed(id, hash) })
}

// Owned returns how many reminders are scheduled here. Any goroutine.
func (s *Service) Owned() int {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	return s.stats.Owned
}

// Stats returns the service's counters. Any goroutine.
func (s *Service) Stats() Stats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	st := s.stats
	st.Tardiness = st.Tardiness.clone()
	return st
}

// post queues f to run on the loop goroutine, in order, and wakes the loop.
// After Stop it drops f. Any goroutine.
func (s *Service) post(f func()) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.inbox = append(s.inbox, f)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// settle waits until the loop has run the work queued before it, fired
// the ticks due, and has no table read out or waiting (reads waiting for
// their retry excepted). For tests. Any goroutine but the loop's.
func (s *Service) settle(ctx context.Context) error {
	c := make(chan struct{})
	s.post(func() { s.idle = append(s.idle, c) })
	select {
	case <-c:
		return nil
	case <-s.loopDone:
		return errStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the loop: the service's goroutine, which owns the schedule and
// the timer. It returns when Stop cancels s.ctx.
func (s *Service) run() {
	defer close(s.loopDone)
	s.nextRefresh = s.clock.Now().Add(s.cfg.RefreshInterval)
	s.timer = s.clock.NewTimer(s.cfg.RefreshInterval)
	s.armedAt = s.nextRefresh
	defer s.timer.Stop()
	for {
		s.runInbox()
		now := s.clock.Now()
		s.maybeRetry(now)
		s.maybeRefresh(now)
		more := s.fireDue()
		s.maybeRead()
		s.publish()
		if !more {
			s.maybeSettled()
		}
		s.arm()
		if more {
			if s.ctx.Err() != nil {
				return
			}
			continue
		}
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		case <-s.timer.Chan():
			s.armedAt = time.Time{}
		}
	}
}

// runInbox runs the work posted so far. Loop only.
func (s *Service) runInbox() {
	s.mu.Lock()
	work := s.inbox
	s.inbox = nil
	s.mu.Unlock()
	for _, f := range work {
		f()
	}
}

// fireDue fires the ticks due, at most fireBatch of them, and reports
// whether more are due. Loop only.
func (s *Service) fireDue() (more bool) {
	for range fireBatch {
		now := s.clock.Now()
		r := s.sched.popDue(now)
		if r == nil {
			return false
		}
		st := grain.TickStatus{FirstTick: r.e.FirstTick, Period: r.e.Period, CurrentTick: r.tick}
		s.statsMu.Lock()
		s.stats.Ticks++
		s.stats.Tardiness.observe(max(now.Sub(r.tick), 0))
		s.statsMu.Unlock()
		s.cfg.Fire(r.e, st, s.doneFunc(r))
	}
	due, ok := s.sched.next()
	return ok && !due.After(s.clock.Now())
}

// doneFunc returns the done of r's running tick. Loop only; the function
// returned may be called from any goroutine, once.
func (s *Service) doneFunc(r *reminder) func(error) {
	var called atomic.Bool
	id, name := r.e.Grain, r.e.Name
	return func(err error) {
		if !called.CompareAndSwap(false, true) {
			panic(fmt.Sprintf("reminders: done called twice for a tick of %s reminder %q", id, name))
		}
		at := s.clock.Now()
		s.post(func() { s.tickDone(r, at, err) })
	}
}

// tickDone ends r's running tick, whose grain call ended at at with err.
// Loop only.
func (s *Service) tickDone(r *reminder, at time.Time, err error) {
	if err != nil {
		s.log.Debug("reminders: tick failed", zap.Stringer("grain", r.e.Grain), zap.String("reminder", r.e.Name), zap.Error(err))
	}
	skipped := s.sched.done(r, at)
	s.statsMu.Lock()
	if err != nil {
		s.stats.Failures++
	}
	s.stats.Skipped += skipped
	s.statsMu.Unlock()
}

// setRanges makes rs, in normal form, the positions owned. Loop only.
func (s *Service) setRanges(rs []storage.HashRange) {
	old := s.ranges
	s.ranges = rs
	s.sched.each(func(r *reminder) {
		if !contains(rs, r.e.Hash) {
			s.sched.remove(r)
		}
	})
	// Read what is newly owned, and what is still owned and waited for a
	// read or a retry; the retry is now.
	s.loadRanges = union(intersect(union(s.loadRanges, s.retryRanges), rs), subtract(rs, old))
	s.retryRanges = nil
	for id, h := range s.retryGrains {
		if !contains(rs, h) {
			delete(s.retryGrains, id)
		}
	}
	if len(s.retryGrains) == 0 {
		s.retryAt = time.Time{}
	}
}

// changed queues a read of grain id's reminders, if hash is owned and no
// range read that will see the change is waiting. Loop only.
func (s *Service) changed(id grain.ID, hash uint64) {
	if !contains(s.ranges, hash) || contains(s.loadRanges, hash) {
		return
	}
	delete(s.retryGrains, id)
	if _, queued := s.loadGrains[id]; !queued {
		s.grainQueue = append(s.grainQueue, id)
	}
	s.loadGrains[id] = hash
}

// maybeRetry queues the failed reads again once their retry is due. Loop
// only.
func (s *Service) maybeRetry(now time.Time) {
	if s.retryAt.IsZero() || now.Before(s.retryAt) {
		return
	}
	s.retryAt = time.Time{}
	s.loadRanges = union(s.loadRanges, intersect(s.retryRanges, s.ranges))
	s.retryRanges = nil
	grains := s.retryGrains
	s.retryGrains = make(map[grain.ID]uint64)
	for id, h := range grains {
		s.changed(id, h)
	}
}

// maybeRefresh queues a read of all the owned ranges once a refresh is
// due. It covers the failed reads, which it ends. Loop only.
func (s *Service) maybeRefresh(now time.Time) {
	if now.Before(s.nextRefresh) {
		return
	}
	s.nextRefresh = now.Add(s.cfg.RefreshInterval)
	s.loadRanges = s.ranges
	s.retryRanges = nil
	clear(s.retryGrains)
	s.retryAt = time.Time{}
}

// maybeRead starts the next table read, unless one is out: reads go one at
// a time, so their results are applied in the order they were made, and a
// read cannot undo a later one. A range read goes first; the grain reads
// it covers are dropped, since it starts after their notices. Loop only.
func (s *Service) maybeRead() {
	if s.reading {
		return
	}
	if rs := s.loadRanges; len(rs) > 0 {
		s.loadRanges = nil
		for id, h := range s.loadGrains {
			if contains(rs, h) {
				delete(s.loadGrains, id)
			}
		}
		if len(s.loadGrains) == 0 {
			s.grainQueue = s.grainQueue[:0]
		}
		s.read(func(ctx context.Context) func() {
			es, err := s.cfg.Table.RangeReminders(ctx, slices.Clone(rs))
			return func() { s.rangeLoaded(rs, es, err) }
		})
		return
	}
	for len(s.grainQueue) > 0 {
		id := s.grainQueue[0]
		s.grainQueue = s.grainQueue[1:]
		h, ok := s.loadGrains[id]
		if !ok {
			continue // a stale entry: read meanwhile, or covered by a range read
		}
		delete(s.loadGrains, id)
		if !contains(s.ranges, h) {
			continue
		}
		s.read(func(ctx context.Context) func() {
			es, err := s.cfg.Table.GrainReminders(ctx, id)
			return func() { s.grainLoaded(id, h, es, err) }
		})
		return
	}
}

// read runs do on a goroutine of its own and applies the result it returns
// on the loop. Loop only.
func (s *Service) read(do func(ctx context.Context) (apply func())) {
	s.reading = true
	s.readers.Add(1)
	go func() {
		defer s.readers.Done()
		apply := do(s.ctx)
		s.post(func() {
			s.reading = false
			apply()
		})
	}()
}

// counted counts a table read that ended with err, and reports whether to
// go on with its result: false when Stop cancelled it. Loop only.
func (s *Service) counted(err error) bool {
	if err != nil && s.ctx.Err() != nil {
		return false
	}
	s.statsMu.Lock()
	s.stats.Loads++
	if err != nil {
		s.stats.LoadFailures++
	}
	s.statsMu.Unlock()
	return true
}

// armRetry arms the retry of the failed reads, unless it is armed. Loop
// only.
func (s *Service) armRetry() {
	if s.retryAt.IsZero() {
		s.retryAt = s.clock.Now().Add(s.cfg.RetryInterval)
	}
}

// rangeLoaded applies a read of the ranges rs that returned es, or failed
// with err: it reconciles the reminders in rs that are still owned with
// es. Loop only.
func (s *Service) rangeLoaded(rs []storage.HashRange, es []storage.ReminderEntry, err error) {
	if !s.counted(err) {
		return
	}
	if err != nil {
		s.log.Warn("reminders: reading the owned ranges failed; retrying",
			zap.Int("ranges", len(rs)), zap.Duration("retryInterval", s.cfg.RetryInterval), zap.Error(err))
		s.retryRanges = union(s.retryRanges, intersect(rs, s.ranges))
		s.armRetry()
		return
	}
	scope := intersect(rs, s.ranges)
	if len(scope) == 0 {
		return
	}
	now := s.clock.Now()
	s.loadSeq++
	seq := s.loadSeq
	for _, e := range es {
		if !contains(scope, e.Hash) {
			continue
		}
		if !s.upsert(e, now, false) {
			continue
		}
		s.sched.get(e.Grain, e.Name).seen = seq
	}
	s.sched.each(func(r *reminder) {
		if r.seen != seq && contains(scope, r.e.Hash) {
			s.sched.remove(r)
		}
	})
}

// grainLoaded applies a read of grain id's reminders that returned es, or
// failed with err: it reconciles the grain's reminders with es. Loop only.
func (s *Service) grainLoaded(id grain.ID, hash uint64, es []storage.ReminderEntry, err error) {
	if !s.counted(err) {
		return
	}
	if err != nil {
		s.log.Warn("reminders: reading a grain's reminders failed; retrying",
			zap.Stringer("grain", id), zap.Duration("retryInterval", s.cfg.RetryInterval), zap.Error(err))
		s.retryGrains[id] = hash
		s.armRetry()
		return
	}
	now := s.clock.Now()
	keep := make(map[string]bool, len(es))
	for _, e := range es {
		if e.Grain == id && contains(s.ranges, e.Hash) && s.upsert(e, now, true) {
			keep[e.Name] = true
		}
	}
	s.sched.eachOf(id, func(r *reminder) {
		if !keep[r.e.Name] {
			s.sched.remove(r)
		}
	})
}

// upsert schedules e, and logs it when it cannot be. Loop only.
func (s *Service) upsert(e storage.ReminderEntry, now time.Time, fresh bool) bool {
	if s.sched.upsert(e, now, fresh) {
		return true
	}
	s.log.Warn("reminders: ignoring a reminder whose period is not positive",
		zap.Stringer("grain", e.Grain), zap.String("reminder", e.Name), zap.Duration("period", e.Period))
	return false
}

// publish copies what Owned reports. Loop only.
func (s *Service) publish() {
	s.statsMu.Lock()
	s.stats.Owned = s.sched.owned
	s.statsMu.Unlock()
}

// maybeSettled wakes the settle calls once no work or read is waiting.
// Loop only.
func (s *Service) maybeSettled() {
	if len(s.idle) == 0 || s.reading || len(s.loadRanges) > 0 || len(s.loadGrains) > 0 {
		return
	}
	s.mu.Lock()
	pending := len(s.inbox) > 0
	s.mu.Unlock()
	if pending {
		return // the loop goes round again: wake is set
	}
	for _, c := range s.idle {
		close(c)
	}
	s.idle = nil
}

// arm sets the timer to the earliest of the next tick, the next refresh and
// the retry. Loop only.
func (s *Service) arm() {
	at := s.nextRefresh
	if due, ok := s.sched.next(); ok && due.Before(at) {
		at = due
	}
	if !s.retryAt.IsZero() && s.retryAt.Before(at) {
		at = s.retryAt
	}
	if at.Equal(s.armedAt) {
		return
	}
	s.armedAt = at
	s.timer.Reset(s.clock.Until(at))
}
