package pgstore

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/pgtest"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/storagetest"
)

func TestStreamLogContract(t *testing.T) {
	dsn := pgtest.DSN(t)
	storagetest.RunStreamLog(t, storagetest.StreamLogFactory{
		Open: func(t *testing.T, clock storage.Clock, maxSize int) storage.StreamLog {
			return openStore(t, Config{DSN: dsn, MaxStateSize: maxSize, Clock: clock})
		},
		Reopen: func(t *testing.T, l storage.StreamLog) storage.StreamLog {
			s := l.(*Store)
			s.Close()
			return openStore(t, Config{DSN: dsn, ServiceID: s.service, MaxStateSize: s.maxStateSize, Clock: s.clock})
		},
		Close: func(t *testing.T, l storage.StreamLog) { l.(*Store).Close() },
	})
}

func TestStreamLogServicesAreSeparate(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := openStore(t, Config{DSN: dsn})
	b := openStore(t, Config{DSN: dsn})
	ctx := testCtx(t)
	p := storage.StreamPartition{Provider: "durable", N: 1}
	if err := a.Append(ctx, p, []storage.StreamRecord{{Stream: "s", Payload: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	if err := a.SaveCursor(ctx, p, "sub", 1); err != nil {
		t.Fatal(err)
	}
	if oldest, next, err := b.Bounds(ctx, p); err != nil || oldest != 0 || next != 1 {
		t.Fatalf("another service's Bounds = %d, %d, %v; want 0, 1", oldest, next, err)
	}
	if recs, err := b.Read(ctx, p, 0, 10); err != nil || len(recs) != 0 {
		t.Fatalf("another service's Read = %v, %v", recs, err)
	}
	if _, ok, err := b.Cursor(ctx, p, "sub"); err != nil || ok {
		t.Fatalf("another service's Cursor = %v, %v", ok, err)
	}
	recs := []storage.StreamRecord{{Stream: "s", Payload: []byte("b")}}
	if err := b.Append(ctx, p, recs); err != nil || recs[0].Offset != 1 {
		t.Fatalf("another service's first append: offset %d, %v; want 1", recs[0].Offset, err)
	}
	if n, err := b.Trim(ctx, p, storage.SystemClock{}.Now().Add(1), 0); err != nil || n != 1 {
		t.Fatalf("another service's Trim = %d, %v; want 1", n, err)
	}
	if oldest, next, err := a.Bounds(ctx, p); err != nil || oldest != 1 || next != 2 {
		t.Fatalf("Bounds after another service trimmed its own = %d, %d, %v; want 1, 2", oldest, next, err)
	}
}

// TestStreamLogText: names, streams and types that the text columns
// cannot hold are refused before they reach the server, where one would
// fail its whole batch.
func TestStreamLogText(t *testing.T) {
	s := openStore(t, Config{})
	ctx := testCtx(t)
	p := storage.StreamPartition{Provider: "durable"}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"provider with a NUL", s.Append(ctx, storage.StreamPartition{Provider: "a\x00"}, []storage.StreamRecord{{}})},
		{"provider not UTF-8", s.SaveCursor(ctx, storage.StreamPartition{Provider: "\xff"}, "sub", 1)},
		{"stream with a NUL", s.Append(ctx, p, []storage.StreamRecord{{Stream: "ok"}, {Stream: "s\x00"}})},
		{"type not UTF-8", s.Append(ctx, p, []storage.StreamRecord{{Type: "\xc3"}})},
		{"subscription with a NUL", s.SaveCursor(ctx, p, "sub\x00", 1)},
		{"cursor past 2^63-1", s.SaveCursor(ctx, p, "sub", math.MaxInt64+1)},
	} {
		if !errors.Is(tc.err, storage.ErrInvalid) || !strings.HasPrefix(tc.err.Error(), "pgstore: ") {
			t.Errorf("%s: %v, want a pgstore ErrInvalid", tc.name, tc.err)
		}
	}
	if oldest, next, err := s.Bounds(ctx, p); err != nil || oldest != 0 || next != 1 {
		t.Fatalf("after the refused appends, Bounds = %d, %d, %v; want 0, 1", oldest, next, err)
	}
	if err := s.SaveCursor(ctx, p, "sub", math.MaxInt64); err != nil {
		t.Fatalf("cursor at 2^63-1: %v", err)
	}
}

// TestStreamAppendsInGroupCommits: with many more appenders than
// connections, appends to several partitions and state writes share
// batches. Every append lands, contiguous, and none deadlocks against
// another batch: each batch locks the partitions in one order.
func TestStreamAppendsInGroupCommits(t *testing.T) {
	s := openStore(t, Config{MaxConns: 2})
	ctx := testCtx(t)
	const appenders, rounds, partitions = 32, 20, 4
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	var (
		mu   sync.Mutex
		made = map[storage.StreamPartition][][]storage.StreamRecord{}
	)
	for a := range appenders {
		wg.Go(func() {
			id := grain.NewID("commit.G", fmt.Sprint(a))
			etag := ""
			for r := range rounds {
				// Each appender walks the partitions in its own order,
				// so that batches hold them in every order.
				p := storage.StreamPartition{Provider: "durable", N: uint32((a + r*(1+a%3)) % partitions)}
				recs := []storage.StreamRecord{
					{Stream: fmt.Sprint(a), Payload: []byte{byte(r), 0}},
					{Stream: fmt.Sprint(a), Payload: []byte{byte(r), 1}},
				}
				if err := s.Append(ctx, p, recs); err != nil {
					errs <- fmt.Errorf("appender %d round %d: %w", a, r, err)
					return
				}
				mu.Lock()
				made[p] = append(made[p], recs)
				mu.Unlock()
				if a%4 == 0 {
					e, err := s.WriteState(ctx, id, "s", []byte{byte(r)}, etag)
					if err != nil {
						errs <- fmt.Errorf("writer %d round %d: %w", a, r, err)
						return
					}
					etag = e
				}
				if a%8 == 0 {
					bad := []storage.StreamRecord{{Stream: "bad\x00"}}
					if err := s.Append(ctx, p, bad); !errors.Is(err, storage.ErrInvalid) {
						errs <- fmt.Errorf("appender %d: a stream with a NUL byte: %v, want ErrInvalid", a, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for p, appends := range made {
		n := 0
		for _, recs := range appends {
			n += len(recs)
			if recs[1].Offset != recs[0].Offset+1 || recs[0].Offset == 0 {
				t.Fatalf("%s: an append got offsets %d, %d", p, recs[0].Offset, recs[1].Offset)
			}
		}
		got, err := s.Read(ctx, p, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != n || got[len(got)-1].Offset != uint64(n) {
			t.Fatalf("%s holds %d records, want offsets 1 to %d", p, len(got), n)
		}
		for _, recs := range appends {
			for _, r := range recs {
				if g := got[r.Offset-1]; g.Stream != r.Stream || string(g.Payload) != string(r.Payload) {
					t.Fatalf("%s offset %d holds %q %v, its append wrote %q %v", p, r.Offset, g.Stream, g.Payload, r.Stream, r.Payload)
				}
			}
		}
		total += n
	}
	if total != appenders*rounds*2 {
		t.Fatalf("%d records in all, want %d", total, appenders*rounds*2)
	}
}

func TestBatchOrder(t *testing.T) {
	w1, w2 := &writeOp{name: "1"}, &writeOp{name: "2"}
	app := func(provider string, n uint32) *appendOp {
		return &appendOp{p: storage.StreamPartition{Provider: provider, N: n}}
	}
	a0, b0, a1, a0again := app("a", 0), app("b", 0), app("a", 1), app("a", 0)
	batch := []batchOp{b0, a1, w1, a0, w2, a0again}
	sortBatch(batch)
	want := []batchOp{w1, w2, a0, a0again, a1, b0}
	for i := range want {
		if batch[i] != want[i] {
			t.Fatalf("sorted batch[%d] = %+v, want %+v", i, batch[i], want[i])
		}
	}
}

// BenchmarkStreamLogAppend: producers each append one 64-byte event at a
// time, waiting for it to be durable (storagetest.BenchmarkStreamAppends),
// through the store's pool (pgxpool's default size).
func BenchmarkStreamLogAppend(b *testing.B) {
	storagetest.BenchmarkStreamLogAppend(b, func(b *testing.B) storage.StreamLog { return openStore(b, Config{}) })
}
