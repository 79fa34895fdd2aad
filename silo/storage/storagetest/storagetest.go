// Package storagetest is the contract every storage provider meets, as a
// test suite: each provider's tests run it against a fresh store. It
// checks the ETag rules, isolation between grains and state names,
// concurrent writers (exactly one of several writers holding one ETag
// wins), states at and over the size limit, persistence across a reopen,
// and the reminder table's upsert, removal and range reads.
//
// RunStreamLog is the stream log's contract: offsets and times as appends
// assign them (on a FakeClock the test sets), appends atomic and
// contiguous under concurrent appenders, readers that never see a gap,
// trimming by age and by size that never moves the next offset, OffsetAt,
// forward-only cursors, the calls every log refuses, persistence across a
// reopen and ErrClosed after closing. BenchmarkStreamAppends measures
// appends by many producers at once.
package storagetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
)

// opTimeout bounds each operation of the suite.
const opTimeout = 30 * time.Second

// Factory opens the provider under test.
type Factory struct {
	// Open returns a fresh, empty provider that refuses states over
	// maxStateSize bytes (0: the provider's default). The test closes it
	// through t.Cleanup.
	Open func(t *testing.T, maxStateSize int) storage.Provider
	// Reopen, when set, closes p and opens the same store again, for the
	// persistence check.
	Reopen func(t *testing.T, p storage.Provider) storage.Provider
}

// RunProvider runs the state contract against f's provider.
func RunProvider(t *testing.T, f Factory) {
	t.Run("ReadMissing", func(t *testing.T) { readMissing(t, f.Open(t, 0)) })
	t.Run("WriteRead", func(t *testing.T) { writeRead(t, f.Open(t, 0)) })
	t.Run("StaleETag", func(t *testing.T) { staleETag(t, f.Open(t, 0)) })
	t.Run("Clear", func(t *testing.T) { clearState(t, f.Open(t, 0)) })
	t.Run("Isolation", func(t *testing.T) { isolation(t, f.Open(t, 0)) })
	t.Run("ConcurrentWriters", func(t *testing.T) { concurrentWriters(t, f.Open(t, 0)) })
	t.Run("ConcurrentCounter", func(t *testing.T) { concurrentCounter(t, f.Open(t, 0)) })
	t.Run("SizeLimit", func(t *testing.T) { sizeLimit(t, f.Open(t, 256<<10), 256<<10) })
	t.Run("DefaultSizeLimit", func(t *testing.T) { sizeLimit(t, f.Open(t, 0), storage.DefaultMaxStateSize) })
	t.Run("EmptyState", func(t *testing.T) { emptyState(t, f.Open(t, 0)) })
	t.Run("Cancelled", func(t *testing.T) { cancelled(t, f.Open(t, 0)) })
	if f.Reopen != nil {
		t.Run("Reopen", func(t *testing.T) { reopen(t, f) })
	}
}

var seq atomic.Uint64

// newID returns a grain ID no other test uses.
func newID(t *testing.T) grain.ID {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return grain.NewID("storagetest.Grain", hex.EncodeToString(b[:])+"-"+string(rune('a'+seq.Add(1)%26)))
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

func mustRead(t *testing.T, p storage.Provider, id grain.ID, name string) storage.Record {
	t.Helper()
	r, err := p.ReadState(ctxOf(t), id, name)
	if err != nil {
		t.Fatalf("ReadState(%s, %q): %v", id, name, err)
	}
	return r
}

func mustWrite(t *testing.T, p storage.Provider, id grain.ID, name string, data []byte, etag string) string {
	t.Helper()
	e, err := p.WriteState(ctxOf(t), id, name, data, etag)
	if err != nil {
		t.Fatalf("WriteState(%s, %q, etag %q): %v", id, name, etag, err)
	}
	if e == "" || e == etag {
		t.Fatalf("WriteState(%s, %q, etag %q) returned ETag %q: want a new, non-empty one", id, name, etag, e)
	}
	return e
}

func wantMismatch(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, storage.ErrETagMismatch) {
		t.Fatalf("%s: err = %v, want ErrETagMismatch", what, err)
	}
}

func wantRecord(t *testing.T, r storage.Record, data []byte, etag string) {
	t.Helper()
	if !r.Exists || !bytes.Equal(r.Data, data) || r.ETag != etag {
		t.Fatalf("record = {exists %v, %d bytes, etag %q}, want {exists true, %d bytes, etag %q}", r.Exists, len(r.Data), r.ETag, len(data), etag)
	}
}

func readMissing(t *testing.T, p storage.Provider) {
	r := mustRead(t, p, newID(t), "s")
	if r.Exists || r.ETag != "" || r.Data != nil {
		t.Fatalf("missing record read as %+v, want Record{}", r)
	}
}

func writeRead(t *testing.T, p storage.Provider) {
	id := newID(t)
	e1 := mustWrite(t, p, id, "s", []byte("one"), "")
	wantRecord(t, mustRead(t, p, id, "s"), []byte("one"), e1)
	e2 := mustWrite(t, p, id, "s", []byte("two"), e1)
	wantRecord(t, mustRead(t, p, id, "s"), []byte("two"), e2)
}

func staleETag(t *testing.T, p storage.Provider) {
	id := newID(t)
	ctx := ctxOf(t)
	if _, err := p.WriteState(ctx, id, "s", []byte("x"), "1"); !errors.Is(err, storage.ErrETagMismatch) {
		t.Fatalf("write with an ETag to a missing record: err = %v, want ErrETagMismatch", err)
	}
	e1 := mustWrite(t, p, id, "s", []byte("one"), "")
	_, err := p.WriteState(ctx, id, "s", []byte("dup"), "")
	wantMismatch(t, err, `write with "" over an existing record`)
	e2 := mustWrite(t, p, id, "s", []byte("two"), e1)
	_, err = p.WriteState(ctx, id, "s", []byte("stale"), e1)
	wantMismatch(t, err, "write with the previous ETag")
	_, err = p.WriteState(ctx, id, "s", []byte("bogus"), "not-an-etag")
	wantMismatch(t, err, "write with a malformed ETag")
	_, err = p.ClearState(ctx, id, "s", e1)
	wantMismatch(t, err, "clear with the previous ETag")
	wantRecord(t, mustRead(t, p, id, "s"), []byte("two"), e2)
}

func clearState(t *testing.T, p storage.Provider) {
	id := newID(t)
	ctx := ctxOf(t)
	if e, err := p.ClearState(ctx, id, "s", ""); err != nil || e != "" {
		t.Fatalf(`clear of a record that never existed = %q, %v; want "", nil`, e, err)
	}
	e1 := mustWrite(t, p, id, "s", []byte("one"), "")
	e2, err := p.ClearState(ctx, id, "s", e1)
	if err != nil {
		t.Fatalf("ClearState: %v", err)
	}
	if e2 == "" || e2 == e1 {
		t.Fatalf("ClearState returned ETag %q after %q: want a new one", e2, e1)
	}
	r := mustRead(t, p, id, "s")
	if r.Exists || r.Data != nil || r.ETag != e2 {
		t.Fatalf("cleared record read as {exists %v, %d bytes, etag %q}; want {false, nil, %q}", r.Exists, len(r.Data), r.ETag, e2)
	}
	// A writer that read before the clear, or never read, is refused.
	_, err = p.WriteState(ctx, id, "s", []byte("stale"), e1)
	wantMismatch(t, err, "write with an ETag from before the clear")
	_, err = p.WriteState(ctx, id, "s", []byte("blind"), "")
	wantMismatch(t, err, `write with "" over a cleared record`)
	e3 := mustWrite(t, p, id, "s", []byte("again"), e2)
	if e3 == e1 {
		t.Fatalf("ETag %q reused after a clear", e3)
	}
	wantRecord(t, mustRead(t, p, id, "s"), []byte("again"), e3)
	// Clearing twice with the same ETag is refused.
	e4, err := p.ClearState(ctx, id, "s", e3)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.ClearState(ctx, id, "s", e3)
	wantMismatch(t, err, "second clear with the same ETag")
	if e5, err := p.ClearState(ctx, id, "s", e4); err != nil || e5 == e4 {
		t.Fatalf("clear of a cleared record with its ETag = %q, %v; want a new ETag", e5, err)
	}
}

func isolation(t *testing.T, p storage.Provider) {
	a, b := newID(t), newID(t)
	other := grain.NewID("storagetest.Other", a.Key)
	ea := mustWrite(t, p, a, "s", []byte("a"), "")
	mustWrite(t, p, a, "t", []byte("a-t"), "")
	mustWrite(t, p, b, "s", []byte("b"), "")
	mustWrite(t, p, other, "s", []byte("other"), "")
	wantRecord(t, mustRead(t, p, a, "s"), []byte("a"), ea)
	if r := mustRead(t, p, a, "u"); r.Exists {
		t.Fatal("a state name never written reads as existing")
	}
	if _, err := p.ClearState(ctxOf(t), b, "s", mustRead(t, p, b, "s").ETag); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, mustRead(t, p, a, "s"), []byte("a"), ea)
	if r := mustRead(t, p, other, "s"); !bytes.Equal(r.Data, []byte("other")) {
		t.Fatalf("another type's grain with the same key reads %q", r.Data)
	}
}

// concurrentWriters: writers that all read one ETag race to write; exactly
// one wins, and the record holds its data.
func concurrentWriters(t *testing.T, p storage.Provider) {
	const writers = 16
	id := newID(t)
	base := mustWrite(t, p, id, "s", []byte("base"), "")
	for round := range 4 {
		var (
			wg     sync.WaitGroup
			wins   atomic.Int32
			winner atomic.Int32
			etags  [writers]string
			errs   [writers]error
		)
		start := make(chan struct{})
		for w := range writers {
			wg.Go(func() {
				<-start
				etags[w], errs[w] = p.WriteState(ctxOf(t), id, "s", []byte{byte(round), byte(w)}, base)
				if errs[w] == nil {
					wins.Add(1)
					winner.Store(int32(w))
				}
			})
		}
		close(start)
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d of %d writers holding one ETag won, want exactly 1 (errors: %v)", round, n, writers, errs)
		}
		for w, err := range errs {
			if err != nil && !errors.Is(err, storage.ErrETagMismatch) {
				t.Fatalf("round %d: writer %d: %v, want ErrETagMismatch", round, w, err)
			}
		}
		w := winner.Load()
		wantRecord(t, mustRead(t, p, id, "s"), []byte{byte(round), byte(w)}, etags[w])
		base = etags[w]
	}
}

// concurrentCounter: writers increment a counter with read-modify-write,
// retrying on a mismatch; no increment is lost.
func concurrentCounter(t *testing.T, p storage.Provider) {
	const writers, each = 8, 10
	id := newID(t)
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			ctx := ctxOf(t)
			for done := 0; done < each; {
				r, err := p.ReadState(ctx, id, "n")
				if err != nil {
					errc <- err
					return
				}
				n := 0
				if len(r.Data) == 1 {
					n = int(r.Data[0])
				}
				_, err = p.WriteState(ctx, id, "n", []byte{byte(n + 1)}, r.ETag)
				switch {
				case err == nil:
					done++
				case !errors.Is(err, storage.ErrETagMismatch):
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if r := mustRead(t, p, id, "n"); len(r.Data) != 1 || int(r.Data[0]) != writers*each {
		t.Fatalf("counter = %v after %d acknowledged increments", r.Data, writers*each)
	}
}

func sizeLimit(t *testing.T, p storage.Provider, limit int) {
	id := newID(t)
	big := make([]byte, limit)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	e := mustWrite(t, p, id, "s", big, "")
	wantRecord(t, mustRead(t, p, id, "s"), big, e)
	over := append(slices.Clone(big), 1)
	_, err := p.WriteState(ctxOf(t), id, "s", over, e)
	if !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("write of %d bytes over a limit of %d: err = %v, want ErrTooLarge", len(over), limit, err)
	}
	wantRecord(t, mustRead(t, p, id, "s"), big, e)
}

func emptyState(t *testing.T, p storage.Provider) {
	id := newID(t)
	e := mustWrite(t, p, id, "s", nil, "")
	r := mustRead(t, p, id, "s")
	if !r.Exists || len(r.Data) != 0 || r.ETag != e {
		t.Fatalf("an empty state read as %+v; want it to exist, empty, at %q", r, e)
	}
}

func cancelled(t *testing.T, p storage.Provider) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	id := newID(t)
	if _, err := p.WriteState(ctx, id, "s", []byte("x"), ""); err == nil {
		t.Fatal("WriteState with a cancelled context succeeded")
	}
	if _, err := p.ReadState(ctx, id, "s"); err == nil {
		t.Fatal("ReadState with a cancelled context succeeded")
	}
}

func reopen(t *testing.T, f Factory) {
	p := f.Open(t, 0)
	id := newID(t)
	e1 := mustWrite(t, p, id, "s", []byte("kept"), "")
	e2 := mustWrite(t, p, id, "cleared", []byte("gone"), "")
	e3, err := p.ClearState(ctxOf(t), id, "cleared", e2)
	if err != nil {
		t.Fatal(err)
	}
	p = f.Reopen(t, p)
	wantRecord(t, mustRead(t, p, id, "s"), []byte("kept"), e1)
	if r := mustRead(t, p, id, "cleared"); r.Exists || r.ETag != e3 {
		t.Fatalf("cleared record after reopen: %+v, want a tombstone at %q", r, e3)
	}
	_, err = p.WriteState(ctxOf(t), id, "cleared", []byte("stale"), e2)
	wantMismatch(t, err, "write with a pre-clear ETag after reopen")
}

// RunReminderTable runs the reminder table contract against a fresh table
// from open.
func RunReminderTable(t *testing.T, open func(t *testing.T) storage.ReminderTable) {
	t.Run("UpsertRead", func(t *testing.T) { reminderUpsert(t, open(t)) })
	t.Run("Remove", func(t *testing.T) { reminderRemove(t, open(t)) })
	t.Run("Ranges", func(t *testing.T) { reminderRanges(t, open(t)) })
}

func entry(id grain.ID, name string, hash uint64) storage.ReminderEntry {
	return storage.ReminderEntry{
		Grain: id, Name: name, Hash: hash,
		FirstTick: time.Date(2026, 11, 25, 9, 0, 0, 123456789, time.UTC),
		Period:    90 * time.Second,
	}
}

func sameEntry(t *testing.T, got, want storage.ReminderEntry) {
	t.Helper()
	if got.Grain != want.Grain || got.Name != want.Name || got.Hash != want.Hash ||
		!got.FirstTick.Equal(want.FirstTick) || got.Period != want.Period {
		t.Fatalf("reminder = %+v, want %+v", got, want)
	}
	if got.ETag == "" {
		t.Fatalf("reminder %s/%s read without an ETag", got.Grain, got.Name)
	}
}

func reminderUpsert(t *testing.T, tab storage.ReminderTable) {
	ctx := ctxOf(t)
	id := newID(t)
	if rs, err := tab.GrainReminders(ctx, id); err != nil || len(rs) != 0 {
		t.Fatalf("GrainReminders of a new grain = %v, %v; want none", rs, err)
	}
	b := entry(id, "b", 42)
	a := entry(id, "a", 42)
	eb, err := tab.UpsertReminder(ctx, b)
	if err != nil || eb == "" {
		t.Fatalf("UpsertReminder = %q, %v", eb, err)
	}
	if _, err := tab.UpsertReminder(ctx, a); err != nil {
		t.Fatal(err)
	}
	b.Period = 5 * time.Minute
	b.FirstTick = b.FirstTick.Add(time.Hour)
	eb2, err := tab.UpsertReminder(ctx, b)
	if err != nil || eb2 == eb || eb2 == "" {
		t.Fatalf("second UpsertReminder = %q, %v; want a new ETag (was %q)", eb2, err, eb)
	}
	rs, err := tab.GrainReminders(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("GrainReminders = %d entries, want 2", len(rs))
	}
	sameEntry(t, rs[0], a)
	sameEntry(t, rs[1], b)
	if rs[1].ETag != eb2 {
		t.Fatalf("ETag read %q, upsert returned %q", rs[1].ETag, eb2)
	}
	if other, err := tab.GrainReminders(ctx, newID(t)); err != nil || len(other) != 0 {
		t.Fatalf("another grain's reminders = %v, %v", other, err)
	}
	// An ID that would not read back is refused, not stored where it
	// would spoil every read of its range.
	for _, bad := range []grain.ID{{Type: "storagetest.Grain"}, {Type: "a/b", Key: "k"}, {Key: "k"}} {
		if _, err := tab.UpsertReminder(ctx, entry(bad, "r", 42)); !errors.Is(err, storage.ErrInvalid) {
			t.Fatalf("UpsertReminder of grain %q: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := tab.RangeReminders(ctx, []storage.HashRange{hr(0, math.MaxUint64)}); err != nil {
		t.Fatalf("RangeReminders after the refused upserts: %v", err)
	}
}

func reminderRemove(t *testing.T, tab storage.ReminderTable) {
	ctx := ctxOf(t)
	id := newID(t)
	if err := tab.RemoveReminder(ctx, id, "none", ""); err != nil {
		t.Fatalf("removing a missing reminder: %v", err)
	}
	e1, err := tab.UpsertReminder(ctx, entry(id, "r", 7))
	if err != nil {
		t.Fatal(err)
	}
	e2, err := tab.UpsertReminder(ctx, entry(id, "r", 7))
	if err != nil {
		t.Fatal(err)
	}
	err = tab.RemoveReminder(ctx, id, "r", e1)
	wantMismatch(t, err, "RemoveReminder with a stale ETag")
	if err := tab.RemoveReminder(ctx, id, "r", e2); err != nil {
		t.Fatal(err)
	}
	if rs, _ := tab.GrainReminders(ctx, id); len(rs) != 0 {
		t.Fatalf("after removal: %v", rs)
	}
	if _, err := tab.UpsertReminder(ctx, entry(id, "s", 7)); err != nil {
		t.Fatal(err)
	}
	if err := tab.RemoveReminder(ctx, id, "s", ""); err != nil {
		t.Fatalf("unconditional removal: %v", err)
	}
	if rs, _ := tab.GrainReminders(ctx, id); len(rs) != 0 {
		t.Fatalf("after unconditional removal: %v", rs)
	}
}

func hr(lo, hi uint64) storage.HashRange { return storage.HashRange{Lo: lo, Hi: hi} }

func reminderRanges(t *testing.T, tab storage.ReminderTable) {
	ctx := ctxOf(t)
	hashes := []uint64{0, 1, 1 << 62, 1<<63 - 1, 1 << 63, 1<<63 + 1, math.MaxUint64 - 1, math.MaxUint64}
	// The table may hold other tests' rows: only this test's grains count.
	mine := map[grain.ID]uint64{}
	for _, h := range hashes {
		id := newID(t)
		mine[id] = h
		if _, err := tab.UpsertReminder(ctx, entry(id, "r", h)); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		ranges []storage.HashRange
	}{
		{"all", []storage.HashRange{hr(0, math.MaxUint64)}},
		{"none", nil},
		{"bottom", []storage.HashRange{hr(0, 0)}},
		{"top", []storage.HashRange{hr(math.MaxUint64, math.MaxUint64)}},
		{"wrapped", []storage.HashRange{hr(1<<63+1, math.MaxUint64), hr(0, 1)}},
		{"middle", []storage.HashRange{hr(1<<63-1, 1<<63)}},
		{"several", []storage.HashRange{hr(1, 1<<62), hr(math.MaxUint64-1, math.MaxUint64-1)}},
	}
	for _, tc := range cases {
		got, err := tab.RangeReminders(ctx, tc.ranges)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var gotMine []uint64
		for _, e := range got {
			if h, ok := mine[e.Grain]; ok {
				if e.Hash != h {
					t.Fatalf("%s: %s read with hash %d, stored %d", tc.name, e.Grain, e.Hash, h)
				}
				gotMine = append(gotMine, h)
			}
		}
		var want []uint64
		for _, h := range hashes {
			for _, r := range tc.ranges {
				if r.Contains(h) {
					want = append(want, h)
					break
				}
			}
		}
		slices.Sort(gotMine)
		if !slices.Equal(gotMine, want) {
			t.Fatalf("%s: RangeReminders(%v) hashes %v, want %v", tc.name, tc.ranges, gotMine, want)
		}
	}
}

// Store is a provider that keeps reminders too, as those of this module do.
type Store interface {
	storage.Provider
	storage.ReminderTable
}

// WantClosed checks that every operation of s, a closed store, fails with
// an error wrapping storage.ErrClosed. id and etag are a record it held.
func WantClosed(t *testing.T, s Store, id grain.ID, etag string) {
	t.Helper()
	ctx := ctxOf(t)
	ops := map[string]func() error{
		"ReadState":  func() error { _, err := s.ReadState(ctx, id, "s"); return err },
		"WriteState": func() error { _, err := s.WriteState(ctx, id, "s", []byte("y"), etag); return err },
		"ClearState": func() error { _, err := s.ClearState(ctx, id, "s", etag); return err },
		"UpsertReminder": func() error {
			_, err := s.UpsertReminder(ctx, storage.ReminderEntry{Grain: id, Name: "r"})
			return err
		},
		"RemoveReminder": func() error { return s.RemoveReminder(ctx, id, "r", "") },
		"GrainReminders": func() error { _, err := s.GrainReminders(ctx, id); return err },
		"RangeReminders": func() error { _, err := s.RangeReminders(ctx, []storage.HashRange{hr(0, math.MaxUint64)}); return err },
	}
	for _, name := range slices.Sorted(maps.Keys(ops)) {
		if err := ops[name](); !errors.Is(err, storage.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}
