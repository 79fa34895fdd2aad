package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/silo/storage"
)

// StreamLogFactory opens the stream log under test.
type StreamLogFactory struct {
	// Open returns a fresh, empty log that takes its appends' times from
	// clock and refuses records over maxSize bytes (0: the provider's
	// default). The test closes it through t.Cleanup.
	Open func(t *testing.T, clock storage.Clock, maxSize int) storage.StreamLog
	// Reopen, when set, closes l and opens the same log again, with the
	// same clock, for the persistence check.
	Reopen func(t *testing.T, l storage.StreamLog) storage.StreamLog
	// Close, when set, closes l, for the check that a closed log refuses
	// every operation with storage.ErrClosed.
	Close func(t *testing.T, l storage.StreamLog)
}

// RunStreamLog runs the stream log contract against f's log: offsets and
// times as Append assigns them, atomic and contiguous appends under
// concurrent appenders, readers never seeing a gap, Read's bounds,
// trimming by age and size, OffsetAt, cursors, the refused calls, and
// persistence and closing when f can test them.
func RunStreamLog(t *testing.T, f StreamLogFactory) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, l storage.StreamLog, clock *FakeClock)
	}{
		{"NewLogIsEmpty", streamNewLogIsEmpty},
		{"OffsetsConsecutiveFromOne", streamOffsetsFromOne},
		{"TimesFromClockNeverDecrease", streamTimes},
		{"ConcurrentAppendsStayContiguous", streamConcurrentAppends},
		{"ReadersSeeNoGaps", streamReadersSeeNoGaps},
		{"ReadFromAndMax", streamReadFromMax},
		{"ReadsAreCopies", streamReadsAreCopies},
		{"PartitionsAreIndependent", streamPartitionsIndependent},
		{"TrimByAge", streamTrimByAge},
		{"TrimBySize", streamTrimBySize},
		{"TrimByAgeThenSize", streamTrimByAgeThenSize},
		{"OffsetAt", streamOffsetAt},
		{"CursorsOnlyMoveForward", streamCursorsForward},
		{"CursorsPerPartitionAndSubscription", streamCursorsIsolated},
		{"Invalid", streamInvalid},
		{"Cancelled", streamCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewFakeClock(t0)
			tc.run(t, f.Open(t, clock, 0), clock)
		})
	}
	t.Run("SizeLimit", func(t *testing.T) {
		const limit = 4 << 10
		streamSizeLimit(t, f.Open(t, NewFakeClock(t0), limit), limit)
	})
	if f.Reopen != nil {
		t.Run("Reopen", func(t *testing.T) { streamReopen(t, f) })
	}
	if f.Close != nil {
		t.Run("Closed", func(t *testing.T) {
			l := f.Open(t, NewFakeClock(t0), 0)
			p := part("durable", 0)
			mustAppend(t, l, p, rec("s/1", "x"))
			if err := l.SaveCursor(ctxOf(t), p, "sub", 1); err != nil {
				t.Fatal(err)
			}
			f.Close(t, l)
			WantStreamLogClosed(t, l, p)
		})
	}
}

// t0 is the suite's start of time: with nanoseconds, which every log must
// keep.
var t0 = time.Date(2026, 11, 25, 9, 0, 0, 123456789, time.UTC)

// FakeClock is a storage.Clock that tells the time it is set to.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock returns a clock at now.
func NewFakeClock(now time.Time) *FakeClock { return &FakeClock{now: now} }

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set sets the clock's time, which may go back.
func (c *FakeClock) Set(now time.Time) {
	c.mu.Lock()
	c.now = now
	c.mu.Unlock()
}

// Advance moves the clock's time on by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func part(provider string, n uint32) storage.StreamPartition {
	return storage.StreamPartition{Provider: provider, N: n}
}

func rec(stream, payload string) storage.StreamRecord {
	return storage.StreamRecord{Stream: stream, Type: "storagetest.v1.Event", Payload: []byte(payload)}
}

// mustAppend appends recs and returns them as Append set them.
func mustAppend(t *testing.T, l storage.StreamLog, p storage.StreamPartition, recs ...storage.StreamRecord) []storage.StreamRecord {
	t.Helper()
	if err := l.Append(ctxOf(t), p, recs); err != nil {
		t.Fatalf("Append(%s, %d records): %v", p, len(recs), err)
	}
	return recs
}

func mustReadLog(t *testing.T, l storage.StreamLog, p storage.StreamPartition, from uint64, max int) []storage.StreamRecord {
	t.Helper()
	recs, err := l.Read(ctxOf(t), p, from, max)
	if err != nil {
		t.Fatalf("Read(%s, from %d, max %d): %v", p, from, max, err)
	}
	return recs
}

func wantBounds(t *testing.T, l storage.StreamLog, p storage.StreamPartition, oldest, next uint64) {
	t.Helper()
	o, n, err := l.Bounds(ctxOf(t), p)
	if err != nil || o != oldest || n != next {
		t.Fatalf("Bounds(%s) = %d, %d, %v; want %d, %d", p, o, n, err, oldest, next)
	}
}

// offsets returns the offsets of recs.
func offsets(recs []storage.StreamRecord) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out
}

// span returns the offsets from, from+1, ..., to.
func span(from, to uint64) []uint64 {
	var out []uint64
	for o := from; o <= to; o++ {
		out = append(out, o)
	}
	return out
}

func wantOffsets(t *testing.T, what string, recs []storage.StreamRecord, want []uint64) {
	t.Helper()
	if got := offsets(recs); !slices.Equal(got, want) {
		t.Fatalf("%s: offsets %v, want %v", what, got, want)
	}
}

// sameRecord fails t unless got, read back, is want as Append set it.
func sameRecord(t *testing.T, got, want storage.StreamRecord) {
	t.Helper()
	if got.Offset != want.Offset || got.Stream != want.Stream || got.Type != want.Type ||
		!got.Time.Equal(want.Time) || !bytes.Equal(got.Payload, want.Payload) {
		t.Fatalf("read record {%d %q %q %v %q}, want {%d %q %q %v %q}",
			got.Offset, got.Stream, got.Type, got.Time, got.Payload,
			want.Offset, want.Stream, want.Type, want.Time, want.Payload)
	}
}

func streamNewLogIsEmpty(t *testing.T, l storage.StreamLog, _ *FakeClock) {
	p := part("durable", 7)
	wantBounds(t, l, p, 0, 1)
	if recs := mustReadLog(t, l, p, 0, 10); len(recs) != 0 {
		t.Fatalf("Read of a new log = %d records", len(recs))
	}
	if o, err := l.OffsetAt(ctxOf(t), p, t0); err != nil || o != 1 {
		t.Fatalf("OffsetAt of a new log = %d, %v; want 1", o, err)
	}
	if n, err := l.Trim(ctxOf(t), p, t0.Add(time.Hour), 1); err != nil || n != 0 {
		t.Fatalf("Trim of a new log = %d, %v; want 0", n, err)
	}
	// An append of nothing assigns nothing.
	mustAppend(t, l, p)
	wantBounds(t, l, p, 0, 1)
}

func streamOffsetsFromOne(t *testing.T, l storage.StreamLog, _ *FakeClock) {
	p := part("durable", 0)
	a := mustAppend(t, l, p, rec("ns/a", "one"))
	wantOffsets(t, "first append", a, []uint64{1})
	wantBounds(t, l, p, 1, 2)
	b := mustAppend(t, l, p, rec("ns/b", "two"), rec("ns/a", ""), rec("ns/c", "four"))
	wantOffsets(t, "second append", b, []uint64{2, 3, 4})
	c := mustAppend(t, l, p, rec("ns/a", "five"))
	wantOffsets(t, "third append", c, []uint64{5})
	wantBounds(t, l, p, 1, 6)
	all := slices.Concat(a, b, c)
	got := mustReadLog(t, l, p, 1, 100)
	if len(got) != len(all) {
		t.Fatalf("Read = %d records, want %d", len(got), len(all))
	}
	for i := range all {
		sameRecord(t, got[i], all[i])
	}
}

func streamTimes(t *testing.T, l storage.StreamLog, clock *FakeClock) {
	p := part("durable", 0)
	a := mustAppend(t, l, p, rec("s/1", "a"), rec("s/2", "b"))
	for _, r := range a {
		if !r.Time.Equal(t0) {
			t.Fatalf("record appended at %v has Time %v", t0, r.Time)
		}
	}
	t1 := t0.Add(time.Second + 1)
	clock.Set(t1)
	b := mustAppend(t, l, p, rec("s/1", "c"))
	if !b[0].Time.Equal(t1) {
		t.Fatalf("record appended at %v has Time %v", t1, b[0].Time)
	}
	// The clock goes back: the log's times do not.
	clock.Set(t0.Add(-time.Hour))
	c := mustAppend(t, l, p, rec("s/1", "d"))
	if !c[0].Time.Equal(t1) {
		t.Fatalf("record appended after the clock went back to %v has Time %v, want the previous append's %v", clock.Now(), c[0].Time, t1)
	}
	got := mustReadLog(t, l, p, 0, 10)
	for i, want := range slices.Concat(a, b, c) {
		sameRecord(t, got[i], want)
	}
}

// streamConcurrentAppends: appenders append batches of one to three
// records at once; every batch lands contiguous, each appender's batches
// in its order, and the offsets Append set are those read back.
func streamConcurrentAppends(t *testing.T, l storage.StreamLog, _ *FakeClock) {
	const appenders, each = 8, 200
	p := part("durable", 3)
	var (
		wg      sync.WaitGroup
		written [appenders][][]storage.StreamRecord
	)
	errc := make(chan error, appenders)
	start := make(chan struct{})
	for a := range appenders {
		wg.Go(func() {
			<-start
			ctx := ctxOf(t)
			for i := range each {
				batch := make([]storage.StreamRecord, 1+(a+i)%3)
				for j := range batch {
					batch[j] = rec(fmt.Sprintf("s/%d", a), fmt.Sprintf("%d/%d/%d", a, i, j))
				}
				if err := ctx.Err(); err != nil {
					errc <- err
					return
				}
				if err := l.Append(ctx, p, batch); err != nil {
					errc <- fmt.Errorf("appender %d, append %d: %w", a, i, err)
					return
				}
				written[a] = append(written[a], batch)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	total := 0
	for a := range appenders {
		for _, batch := range written[a] {
			total += len(batch)
		}
	}
	var got []storage.StreamRecord
	for from := uint64(1); ; {
		recs := mustReadLog(t, l, p, from, 333)
		if len(recs) == 0 {
			break
		}
		got = append(got, recs...)
		from = recs[len(recs)-1].Offset + 1
	}
	wantOffsets(t, "the whole log", got, span(1, uint64(total)))
	wantBounds(t, l, p, 1, uint64(total)+1)
	for a := range appenders {
		last := uint64(0)
		for i, batch := range written[a] {
			first := batch[0].Offset
			if first <= last {
				t.Fatalf("appender %d: append %d starts at offset %d, not after its previous append's %d", a, i, first, last)
			}
			for j, r := range batch {
				if r.Offset != first+uint64(j) {
					t.Fatalf("appender %d: append %d's records have offsets %v: not contiguous", a, i, offsets(batch))
				}
				sameRecord(t, got[r.Offset-1], r)
			}
			last = batch[len(batch)-1].Offset
		}
	}
}

// streamReadersSeeNoGaps: a reader following the log while appenders add
// to it sees every offset, in order: no record appears behind one it has
// read.
func streamReadersSeeNoGaps(t *testing.T, l storage.StreamLog, _ *FakeClock) {
	const appenders, each = 4, 100
	p := part("durable", 1)
	var wg sync.WaitGroup
	errc := make(chan error, appenders+1)
	done := make(chan struct{})
	for a := range appenders {
		wg.Go(func() {
			ctx := ctxOf(t)
			for i := range each {
				if err := l.Append(ctx, p, []storage.StreamRecord{rec("s", fmt.Sprint(a, i))}); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	var seen uint64
	var readers sync.WaitGroup
	readers.Go(func() {
		ctx := ctxOf(t)
		for {
			// Whether the appenders were done before this read: if so,
			// this read must reach the end.
			finished := false
			select {
			case <-done:
				finished = true
			default:
			}
			recs, err := l.Read(ctx, p, seen+1, 7)
			if err != nil {
				errc <- err
				return
			}
			for _, r := range recs {
				if r.Offset != seen+1 {
					errc <- fmt.Errorf("reader at offset %d read offset %d next", seen, r.Offset)
					return
				}
				seen = r.Offset
			}
			if finished && len(recs) == 0 {
				return
			}
			if err := ctx.Err(); err != nil {
				errc <- err
				return
			}
		}
	})
	wg.Wait()
	close(done)
	readers.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if seen != appenders*each {
		t.Fatalf("the reader saw offsets up to %d, want %d", seen, appenders*each)
	}
}

func streamReadFromMax(t *testing.T, l storage.StreamLog, _ *FakeClock) {
	p := part("durable", 0)
	var recs []storage.StreamRecord
	for i := range 10 {
		recs = append(recs, rec("s", fmt.Sprint(i)))
	}
	mustAppend(t, l, p, recs...)
	for _, tc := range []struct {
		from uint64
		max  int
		want []uint64
	}{
		{0, 100, span(1, 10)},
		{1, 3, span(1, 3)},
		{3, 2, span(3, 4)},
		{9, 5, span(9, 10)},
		{10, 1, span(10, 10)},
		{11, 5, nil},
		{1 << 62, 5, nil},
		{^uint64(0), 5, nil},
	} {
		got := mustReadLog(t, l, p, tc.from, tc.max)
		wantOffsets(t, fmt.Sprintf("Read(from %d, max %d)", tc.from, tc.max), got, tc.want)
		for _, r := range got {
			sameRecord(t, r, recs[r.Offset-1])
		}
	}
	// After a trim, a read from below the oldest kept starts there.
	if n, err := l.Trim(ctxOf(t), p, time.Time{}, 4); err != nil || n != 6 {
		t.Fatalf("Trim to 4 bytes = %d, %v; want 6 removed", n, err)
	}
	wantOffsets(t, "Read(from 1) after the trim", mustReadLog(t, l, p, 1, 2), span(7, 8))
	wantOffsets(t, "Read(from 0) after the trim", mustReadLog(t, l, p, 0, 100), span(7, 10))
	wantOffsets(t, "Read(from 8) after the trim", mustReadLog(t, l, p, 8, 100), span(8, 10))
}

// streamReadsAreCopies: neither the appender's slices nor a reader's are
// the log's.
func streamReadsAreCopies(t *testing.T, l storage.StreamLog, _ *FakeClock) {
	p := part("durable", 0)
	r := rec("s", "original")
	in := []storage.StreamRecord{r}
	mustAppend(t, l, p, in...)
	copy(in[0].Payload, "XXXXXXXX")
	got := mustReadLog(t, l, p, 1, 1)
	if string(got[0].Payload) != "original" {
		t.Fatalf("after the appender changed its payload, the log reads %q", got[0].Payload)
	}
	got[0].Payload[0] = 'Y'
	if again := mustReadLog(t, l, p, 1, 1); string(again[0].Payload) != "original" {
		t.Fatalf("after a reader changed its copy, the log reads %q", again[0].Payload)
	}
}

func streamPartitionsIndependent(t *testing.T, l storage.StreamLog, _ *FakeClock) {
	a0, a1, b0 := part("a", 0), part("a", 1), part("b", 0)
	// A provider whose name extends another's must not share its logs.
	a10 := part("a1", 0)
	mustAppend(t, l, a0, rec("s", "a0-1"), rec("s", "a0-2"), rec("s", "a0-3"))
	wantOffsets(t, "a/1's first append", mustAppend(t, l, a1, rec("s", "a1-1")), []uint64{1})
	wantOffsets(t, "b/0's first append", mustAppend(t, l, b0, rec("s", "b0-1"), rec("s", "b0-2")), []uint64{1, 2})
	wantOffsets(t, "a1/0's first append", mustAppend(t, l, a10, rec("s", "a10-1")), []uint64{1})
	wantOffsets(t, "a/0's second append", mustAppend(t, l, a0, rec("s", "a0-4")), []uint64{4})
	wantBounds(t, l, a0, 1, 5)
	wantBounds(t, l, a1, 1, 2)
	wantBounds(t, l, b0, 1, 3)
	wantBounds(t, l, a10, 1, 2)
	wantBounds(t, l, part("a", 2), 0, 1)
	for p, want := range map[storage.StreamPartition]string{a0: "a0-1", a1: "a1-1", b0: "b0-1", a10: "a10-1"} {
		if got := mustReadLog(t, l, p, 1, 1); len(got) != 1 || string(got[0].Payload) != want {
			t.Fatalf("Read(%s, 1) = %v, want its own first record %q", p, got, want)
		}
	}
	if n, err := l.Trim(ctxOf(t), a0, time.Time{}, 1); err != nil || n != 4 {
		t.Fatalf("Trim(a/0) = %d, %v; want 4", n, err)
	}
	wantBounds(t, l, a0, 0, 5)
	wantBounds(t, l, a1, 1, 2)
	wantBounds(t, l, b0, 1, 3)
}

func streamTrimByAge(t *testing.T, l storage.StreamLog, clock *FakeClock) {
	p := part("durable", 0)
	t1, t2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	mustAppend(t, l, p, rec("s", "1"), rec("s", "2"), rec("s", "3"))
	clock.Set(t1)
	mustAppend(t, l, p, rec("s", "4"), rec("s", "5"))
	clock.Set(t2)
	mustAppend(t, l, p, rec("s", "6"), rec("s", "7"))
	trim := func(olderThan time.Time, want int) {
		t.Helper()
		if n, err := l.Trim(ctxOf(t), p, olderThan, 0); err != nil || n != want {
			t.Fatalf("Trim(older than %v) = %d, %v; want %d removed", olderThan, n, err, want)
		}
	}
	trim(time.Time{}, 0) // no limit at all
	trim(t0, 0)          // none is before t0
	wantBounds(t, l, p, 1, 8)
	trim(t1, 3) // those at t1 stay
	wantBounds(t, l, p, 4, 8)
	trim(t1, 0)
	trim(t2.Add(-1), 2)
	wantBounds(t, l, p, 6, 8)
	wantOffsets(t, "Read(from 1) after trimming", mustReadLog(t, l, p, 1, 10), span(6, 7))
	trim(t2.Add(1), 2) // everything
	wantBounds(t, l, p, 0, 8)
	if got := mustReadLog(t, l, p, 0, 10); len(got) != 0 {
		t.Fatalf("Read of a log trimmed empty = offsets %v", offsets(got))
	}
	// Offsets go on from where they were.
	wantOffsets(t, "append after trimming everything", mustAppend(t, l, p, rec("s", "8")), []uint64{8})
	wantBounds(t, l, p, 8, 9)
}

func streamTrimBySize(t *testing.T, l storage.StreamLog, _ *FakeClock) {
	p := part("durable", 0)
	ten := "0123456789"
	for range 5 {
		mustAppend(t, l, p, rec("a-long-stream-name", ten)) // the stream and type do not count
	}
	mustAppend(t, l, p, rec("s", "")) // 6: no payload
	trim := func(maxBytes int64, want int) {
		t.Helper()
		if n, err := l.Trim(ctxOf(t), p, time.Time{}, maxBytes); err != nil || n != want {
			t.Fatalf("Trim(%d bytes) = %d, %v; want %d removed", maxBytes, n, err, want)
		}
	}
	trim(0, 0) // no limit
	trim(50, 0)
	trim(49, 1)
	wantBounds(t, l, p, 2, 7)
	trim(25, 2) // 40 bytes, then 30, then 20
	wantBounds(t, l, p, 4, 7)
	trim(20, 0)
	trim(1, 2) // 20, 10, then 0: the empty record stays
	wantBounds(t, l, p, 6, 7)
	wantOffsets(t, "Read after trimming to 1 byte", mustReadLog(t, l, p, 0, 10), []uint64{6})
	// Payload bytes are counted as they are appended and trimmed.
	mustAppend(t, l, p, rec("s", ten), rec("s", ten)) // 7, 8
	trim(15, 2)                                       // 6 has no bytes, but is older than 7
	wantBounds(t, l, p, 8, 9)
	trim(10, 0)
	trim(9, 1)
	wantBounds(t, l, p, 0, 9)
	wantOffsets(t, "the next append", mustAppend(t, l, p, rec("s", ten)), []uint64{9})
}

func streamTrimByAgeThenSize(t *testing.T, l storage.StreamLog, clock *FakeClock) {
	p := part("durable", 0)
	mustAppend(t, l, p, rec("s", "aaaa"), rec("s", "bbbb")) // 1, 2 at t0
	clock.Set(t0.Add(time.Minute))
	mustAppend(t, l, p, rec("s", "cccc"), rec("s", "dddd"), rec("s", "eeee")) // 3, 4, 5 at t0+1m
	// Age removes 1 and 2, then size removes 3 to leave 8 bytes.
	if n, err := l.Trim(ctxOf(t), p, t0.Add(time.Second), 8); err != nil || n != 3 {
		t.Fatalf("Trim(older than t0+1s, 8 bytes) = %d, %v; want 3", n, err)
	}
	wantBounds(t, l, p, 4, 6)
}

func streamOffsetAt(t *testing.T, l storage.StreamLog, clock *FakeClock) {
	p := part("durable", 0)
	t1, t2 := t0.Add(time.Second), t0.Add(time.Hour)
	mustAppend(t, l, p, rec("s", "1"), rec("s", "2")) // t0
	clock.Set(t1)
	mustAppend(t, l, p, rec("s", "3")) // t1
	clock.Set(t2)
	mustAppend(t, l, p, rec("s", "4")) // t2
	mustAppend(t, l, p, rec("s", "5")) // t2 too
	at := func(at time.Time, want uint64) {
		t.Helper()
		if o, err := l.OffsetAt(ctxOf(t), p, at); err != nil || o != want {
			t.Fatalf("OffsetAt(%v) = %d, %v; want %d", at, o, err, want)
		}
	}
	at(time.Time{}, 1)
	at(t0.Add(-time.Hour), 1)
	at(t0, 1)
	at(t0.Add(1), 3)
	at(t1, 3)
	at(t1.Add(1), 4)
	at(t2, 4)
	at(t2.Add(1), 6)
	at(t2.Add(100*365*24*time.Hour), 6)
	if n, err := l.Trim(ctxOf(t), p, t1, 0); err != nil || n != 2 {
		t.Fatalf("Trim = %d, %v; want 2", n, err)
	}
	at(t0, 3) // the first kept
	at(t1, 3)
	at(t2.Add(1), 6)
	if n, err := l.Trim(ctxOf(t), p, t2.Add(1), 0); err != nil || n != 3 {
		t.Fatalf("Trim = %d, %v; want 3", n, err)
	}
	at(t0, 6) // an empty log: the next offset
}

func wantCursor(t *testing.T, l storage.StreamLog, p storage.StreamPartition, sub string, offset uint64, ok bool) {
	t.Helper()
	o, found, err := l.Cursor(ctxOf(t), p, sub)
	if err != nil || o != offset || found != ok {
		t.Fatalf("Cursor(%s, %q) = %d, %v, %v; want %d, %v", p, sub, o, found, err, offset, ok)
	}
}

func mustSaveCursor(t *testing.T, l storage.StreamLog, p storage.StreamPartition, sub string, offset uint64) {
	t.Helper()
	if err := l.SaveCursor(ctxOf(t), p, sub, offset); err != nil {
		t.Fatalf("SaveCursor(%s, %q, %d): %v", p, sub, offset, err)
	}
}

func streamCursorsForward(t *testing.T, l storage.StreamLog, _ *FakeClock) {
	p := part("durable", 0)
	wantCursor(t, l, p, "sub", 0, false)
	mustSaveCursor(t, l, p, "sub", 5)
	wantCursor(t, l, p, "sub", 5, true)
	mustSaveCursor(t, l, p, "sub", 3) // back: a no-op
	wantCursor(t, l, p, "sub", 5, true)
	mustSaveCursor(t, l, p, "sub", 5)
	wantCursor(t, l, p, "sub", 5, true)
	mustSaveCursor(t, l, p, "sub", 1<<40)
	wantCursor(t, l, p, "sub", 1<<40, true)
	// Offset 0, "handled nothing", is a saved cursor.
	mustSaveCursor(t, l, p, "zero", 0)
	wantCursor(t, l, p, "zero", 0, true)
	if err := l.DeleteCursor(ctxOf(t), p, "sub"); err != nil {
		t.Fatal(err)
	}
	wantCursor(t, l, p, "sub", 0, false)
	if err := l.DeleteCursor(ctxOf(t), p, "sub"); err != nil {
		t.Fatalf("deleting a missing cursor: %v", err)
	}
	if err := l.DeleteCursor(ctxOf(t), part("durable", 99), "never"); err != nil {
		t.Fatalf("deleting a cursor of a partition never used: %v", err)
	}
	// Once deleted, a cursor starts again: any offset is forward.
	mustSaveCursor(t, l, p, "sub", 2)
	wantCursor(t, l, p, "sub", 2, true)
	wantCursor(t, l, p, "zero", 0, true)
	// The log does not touch cursors.
	mustAppend(t, l, p, rec("s", "x"), rec("s", "y"))
	if _, err := l.Trim(ctxOf(t), p, time.Time{}, 1); err != nil {
		t.Fatal(err)
	}
	wantCursor(t, l, p, "sub", 2, true)
}

func streamCursorsIsolated(t *testing.T, l storage.StreamLog, _ *FakeClock) {
	a0, a1, b0, a10 := part("a", 0), part("a", 1), part("b", 0), part("a1", 0)
	mustSaveCursor(t, l, a0, "sub", 10)
	mustSaveCursor(t, l, a1, "sub", 20)
	mustSaveCursor(t, l, b0, "sub", 30)
	mustSaveCursor(t, l, a0, "other", 40)
	mustSaveCursor(t, l, a0, "sub2", 50) // a name that extends another's
	wantCursor(t, l, a0, "sub", 10, true)
	wantCursor(t, l, a1, "sub", 20, true)
	wantCursor(t, l, b0, "sub", 30, true)
	wantCursor(t, l, a0, "other", 40, true)
	wantCursor(t, l, a0, "sub2", 50, true)
	wantCursor(t, l, a10, "sub", 0, false)
	wantCursor(t, l, a1, "other", 0, false)
	if err := l.DeleteCursor(ctxOf(t), a0, "sub"); err != nil {
		t.Fatal(err)
	}
	wantCursor(t, l, a0, "sub", 0, false)
	wantCursor(t, l, a1, "sub", 20, true)
	wantCursor(t, l, a0, "sub2", 50, true)
	// Cursors leave the log as it was.
	wantBounds(t, l, a0, 0, 1)
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("%s: %v, want ErrInvalid", what, err)
	}
}

func streamInvalid(t *testing.T, l storage.StreamLog, _ *FakeClock) {
	ctx := ctxOf(t)
	for _, none := range []storage.StreamPartition{{}, {N: 3}} {
		wantInvalid(t, "Append without a provider", l.Append(ctx, none, []storage.StreamRecord{rec("s", "x")}))
		_, err := l.Read(ctx, none, 1, 1)
		wantInvalid(t, "Read without a provider", err)
		_, _, err = l.Bounds(ctx, none)
		wantInvalid(t, "Bounds without a provider", err)
		_, err = l.OffsetAt(ctx, none, t0)
		wantInvalid(t, "OffsetAt without a provider", err)
		_, err = l.Trim(ctx, none, t0, 0)
		wantInvalid(t, "Trim without a provider", err)
		wantInvalid(t, "SaveCursor without a provider", l.SaveCursor(ctx, none, "sub", 1))
		_, _, err = l.Cursor(ctx, none, "sub")
		wantInvalid(t, "Cursor without a provider", err)
		wantInvalid(t, "DeleteCursor without a provider", l.DeleteCursor(ctx, none, "sub"))
	}
	p := part("durable", 0)
	mustAppend(t, l, p, rec("s", "x"))
	for _, max := range []int{0, -1} {
		_, err := l.Read(ctx, p, 1, max)
		wantInvalid(t, fmt.Sprintf("Read with max %d", max), err)
	}
	_, err := l.Trim(ctx, p, time.Time{}, -1)
	wantInvalid(t, "Trim to -1 bytes", err)
	wantInvalid(t, "SaveCursor of an empty subscription", l.SaveCursor(ctx, p, "", 1))
	_, _, err = l.Cursor(ctx, p, "")
	wantInvalid(t, "Cursor of an empty subscription", err)
	wantInvalid(t, "DeleteCursor of an empty subscription", l.DeleteCursor(ctx, p, ""))
	// Nothing of that changed the log.
	wantBounds(t, l, p, 1, 2)
}

func streamSizeLimit(t *testing.T, l storage.StreamLog, limit int) {
	p := part("durable", 0)
	r := rec("s", "")
	r.Payload = bytes.Repeat([]byte{7}, limit-len(r.Stream)-len(r.Type))
	mustAppend(t, l, p, r)
	over := r
	over.Payload = append(slices.Clone(r.Payload), 8)
	err := l.Append(ctxOf(t), p, []storage.StreamRecord{rec("s", "fits"), over})
	if !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("append of a record of %d bytes over a limit of %d: %v, want ErrTooLarge", over.Size(), limit, err)
	}
	// All or none: the record that fits was not appended either.
	wantBounds(t, l, p, 1, 2)
	got := mustReadLog(t, l, p, 1, 10)
	if len(got) != 1 || !bytes.Equal(got[0].Payload, r.Payload) {
		t.Fatalf("after the refused append the log holds %d records", len(got))
	}
}

func streamCancelled(t *testing.T, l storage.StreamLog, _ *FakeClock) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := part("durable", 0)
	errs := map[string]error{}
	errs["Append"] = l.Append(ctx, p, []storage.StreamRecord{rec("s", "x")})
	_, errs["Read"] = l.Read(ctx, p, 1, 1)
	_, _, errs["Bounds"] = l.Bounds(ctx, p)
	_, errs["OffsetAt"] = l.OffsetAt(ctx, p, t0)
	_, errs["Trim"] = l.Trim(ctx, p, t0, 0)
	errs["SaveCursor"] = l.SaveCursor(ctx, p, "sub", 1)
	_, _, errs["Cursor"] = l.Cursor(ctx, p, "sub")
	errs["DeleteCursor"] = l.DeleteCursor(ctx, p, "sub")
	for _, name := range slices.Sorted(maps.Keys(errs)) {
		if !errors.Is(errs[name], context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", name, errs[name])
		}
	}
	wantBounds(t, l, p, 0, 1)
	wantCursor(t, l, p, "sub", 0, false)
}

func streamReopen(t *testing.T, f StreamLogFactory) {
	clock := NewFakeClock(t0)
	l := f.Open(t, clock, 0)
	p, q := part("durable", 0), part("durable", 1)
	a := mustAppend(t, l, p, rec("s/1", "one"), rec("s/2", "two"), rec("s/1", "three"))
	clock.Set(t0.Add(time.Hour))
	b := mustAppend(t, l, p, rec("s/1", "four"))
	mustAppend(t, l, q, rec("s/3", "q"))
	if n, err := l.Trim(ctxOf(t), p, time.Time{}, 9); err != nil || n != 2 {
		t.Fatalf("Trim = %d, %v; want 2", n, err)
	}
	mustSaveCursor(t, l, p, "sub", 3)
	mustSaveCursor(t, l, q, "sub", 1)
	mustSaveCursor(t, l, p, "gone", 1)
	if err := l.DeleteCursor(ctxOf(t), p, "gone"); err != nil {
		t.Fatal(err)
	}

	clock.Set(t0) // back, before the last append
	l = f.Reopen(t, l)
	wantBounds(t, l, p, 3, 5)
	wantBounds(t, l, q, 1, 2)
	got := mustReadLog(t, l, p, 0, 10)
	want := slices.Concat(a[2:], b)
	if len(got) != len(want) {
		t.Fatalf("after reopening, the log holds offsets %v, want %v", offsets(got), offsets(want))
	}
	for i := range want {
		sameRecord(t, got[i], want[i])
	}
	if o, err := l.OffsetAt(ctxOf(t), p, t0.Add(time.Minute)); err != nil || o != 4 {
		t.Fatalf("OffsetAt after reopening = %d, %v; want 4", o, err)
	}
	wantCursor(t, l, p, "sub", 3, true)
	wantCursor(t, l, q, "sub", 1, true)
	wantCursor(t, l, p, "gone", 0, false)
	mustSaveCursor(t, l, p, "sub", 2) // still forward-only
	wantCursor(t, l, p, "sub", 3, true)
	// The offsets and times go on from where they were, and the size
	// trimming counts the bytes kept before.
	c := mustAppend(t, l, p, rec("s/1", "five"))
	wantOffsets(t, "the first append after reopening", c, []uint64{5})
	if !c[0].Time.Equal(b[0].Time) {
		t.Fatalf("after reopening with the clock back at %v, an append has Time %v, want the last append's %v", t0, c[0].Time, b[0].Time)
	}
	if n, err := l.Trim(ctxOf(t), p, time.Time{}, 8); err != nil || n != 1 {
		t.Fatalf("Trim after reopening = %d, %v; want 1 (the 13 bytes kept less 5)", n, err)
	}
	wantBounds(t, l, p, 4, 6)
}

// WantStreamLogClosed checks that every stream log operation of l, a
// closed store, fails with an error wrapping storage.ErrClosed. p is a
// partition it held records and a cursor "sub" in.
func WantStreamLogClosed(t *testing.T, l storage.StreamLog, p storage.StreamPartition) {
	t.Helper()
	ctx := ctxOf(t)
	ops := map[string]func() error{
		"Append": func() error { return l.Append(ctx, p, []storage.StreamRecord{rec("s", "x")}) },
		"Read":   func() error { _, err := l.Read(ctx, p, 0, 10); return err },
		"Bounds": func() error { _, _, err := l.Bounds(ctx, p); return err },
		"OffsetAt": func() error {
			_, err := l.OffsetAt(ctx, p, t0)
			return err
		},
		"Trim":         func() error { _, err := l.Trim(ctx, p, time.Time{}, 1); return err },
		"SaveCursor":   func() error { return l.SaveCursor(ctx, p, "sub", 10) },
		"Cursor":       func() error { _, _, err := l.Cursor(ctx, p, "sub"); return err },
		"DeleteCursor": func() error { return l.DeleteCursor(ctx, p, "sub") },
	}
	for _, name := range slices.Sorted(maps.Keys(ops)) {
		if err := ops[name](); !errors.Is(err, storage.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}
