package reminders

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
)

// defaultTestTimeout bounds every wait in the tests. Tests never sleep to
// synchronise; they wait on channels with this bound and fail when it ends.
const defaultTestTimeout = 20 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// epoch is the fake clock's start in every test.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// errTable is the error of the reads fakeTable is told to fail.
var errTable = errors.New("fake table: unavailable")

// fakeTable is an in-memory ReminderTable whose reads can fail on demand
// and block until released. Any goroutine.
type fakeTable struct {
	mu         sync.Mutex
	rows       map[key]storage.ReminderEntry
	version    uint64
	failRange  int           // fail this many RangeReminders calls
	failGrain  int           // fail this many GrainReminders calls
	block      chan struct{} // when set, reads wait for it to close (or ctx)
	rangeReads int
	grainReads int
}

type key struct {
	grain grain.ID
	name  string
}

func newFakeTable() *fakeTable { return &fakeTable{rows: make(map[key]storage.ReminderEntry)} }

func (t *fakeTable) UpsertReminder(_ context.Context, r storage.ReminderEntry) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.version++
	r.ETag = strconv.FormatUint(t.version, 10)
	t.rows[key{r.Grain, r.Name}] = r
	return r.ETag, nil
}

func (t *fakeTable) RemoveReminder(_ context.Context, id grain.ID, name, etag string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := key{id, name}
	if r, ok := t.rows[k]; ok && etag != "" && r.ETag != etag {
		return storage.ErrETagMismatch
	}
	delete(t.rows, k)
	return nil
}

func (t *fakeTable) GrainReminders(ctx context.Context, id grain.ID) ([]storage.ReminderEntry, error) {
	if err := t.wait(ctx); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.grainReads++
	if t.failGrain > 0 {
		t.failGrain--
		return nil, errTable
	}
	var out []storage.ReminderEntry
	for k, r := range t.rows {
		if k.grain == id {
			out = append(out, r)
		}
	}
	return out, nil
}

func (t *fakeTable) RangeReminders(ctx context.Context, ranges []storage.HashRange) ([]storage.ReminderEntry, error) {
	if err := t.wait(ctx); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rangeReads++
	if t.failRange > 0 {
		t.failRange--
		return nil, errTable
	}
	var out []storage.ReminderEntry
	for _, r := range t.rows {
		if slices.ContainsFunc(ranges, func(hr storage.HashRange) bool { return hr.Contains(r.Hash) }) {
			out = append(out, r)
		}
	}
	return out, nil
}

func (t *fakeTable) wait(ctx context.Context) error {
	t.mu.Lock()
	block := t.block
	t.mu.Unlock()
	if block == nil {
		return nil
	}
	select {
	case <-block:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// put stores r and returns it with its ETag.
func (t *fakeTable) put(r storage.ReminderEntry) storage.ReminderEntry {
	r.ETag, _ = t.UpsertReminder(context.Background(), r)
	return r
}

func (t *fakeTable) del(id grain.ID, name string) {
	_ = t.RemoveReminder(context.Background(), id, name, "")
}

func (t *fakeTable) reads() (rangeReads, grainReads int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rangeReads, t.grainReads
}

func (t *fakeTable) set(f func(t *fakeTable)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(t)
}

// fired is one call of Config.Fire.
type fired struct {
	e    storage.ReminderEntry
	st   grain.TickStatus
	done func(error)
}

// harness runs a Service over a fakeTable and a fake clock, and records
// its ticks.
type harness struct {
	t     *testing.T
	clock *clockwork.FakeClock
	table *fakeTable
	svc   *Service
	fires chan fired
	// autoDone makes Fire call done(nil) before it returns.
	autoDone bool
}

const (
	testRefresh = time.Hour
	testRetry   = 5 * time.Second
)

// newHarness starts a Service with RefreshInterval testRefresh and
// RetryInterval testRetry, changed by mutate, and stops it when the test
// ends.
func newHarness(t *testing.T, autoDone bool, mutate func(*Config)) *harness {
	t.Helper()
	h := &harness{
		t:        t,
		clock:    clockwork.NewFakeClockAt(epoch),
		table:    newFakeTable(),
		fires:    make(chan fired, 1024),
		autoDone: autoDone,
	}
	cfg := Config{
		Table:           h.table,
		Clock:           h.clock,
		RefreshInterval: testRefresh,
		RetryInterval:   testRetry,
		Fire: func(e storage.ReminderEntry, st grain.TickStatus, done func(error)) {
			if h.autoDone {
				done(nil)
			}
			select {
			case h.fires <- fired{e, st, done}:
			default:
				t.Errorf("too many ticks: %s %q at %v", e.Grain, e.Name, st.CurrentTick)
			}
		},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.svc = svc
	svc.Start()
	t.Cleanup(svc.Stop)
	return h
}

// settle waits until the service has done the work queued and fired the
// ticks due.
func (h *harness) settle() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := h.svc.settle(ctx); err != nil {
		h.t.Fatalf("waiting for the service to settle: %v", err)
	}
}

// advance moves the clock on by d and settles.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	h.settle()
}

// next returns the next tick fired, failing the test when there is none
// after settling.
func (h *harness) next() fired {
	h.t.Helper()
	h.settle()
	select {
	case f := <-h.fires:
		return f
	default:
		h.t.Fatalf("no tick fired at %v", h.clock.Now())
		return fired{}
	}
}

// noTick fails the test if a tick was fired.
func (h *harness) noTick() {
	h.t.Helper()
	h.settle()
	select {
	case f := <-h.fires:
		h.t.Fatalf("unexpected tick of %s %q due %v, at %v", f.e.Grain, f.e.Name, f.st.CurrentTick, h.clock.Now())
	default:
	}
}

// expectTick takes the next tick and checks it is reminder e's, due at due.
func (h *harness) expectTick(e storage.ReminderEntry, due time.Time) fired {
	h.t.Helper()
	f := h.next()
	want := grain.TickStatus{FirstTick: e.FirstTick, Period: e.Period, CurrentTick: due}
	if f.e.Grain != e.Grain || f.e.Name != e.Name || f.st != want {
		h.t.Fatalf("tick of %s %q with %+v, want %s %q with %+v", f.e.Grain, f.e.Name, f.st, e.Grain, e.Name, want)
	}
	return f
}

// waitOwned settles and checks Owned.
func (h *harness) wantOwned(n int) {
	h.t.Helper()
	h.settle()
	if got := h.svc.Owned(); got != n {
		h.t.Fatalf("Owned() = %d, want %d", got, n)
	}
}

// all is the whole ring.
var all = []storage.HashRange{{Lo: 0, Hi: ^uint64(0)}}

// entry returns a reminder of grain "test.G/<k>" at ring position hash.
func entry(k string, name string, hash uint64, first time.Time, period time.Duration) storage.ReminderEntry {
	return storage.ReminderEntry{Grain: grain.NewID("test.G", k), Name: name, Hash: hash, FirstTick: first, Period: period}
}
