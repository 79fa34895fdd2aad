package boltstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/storagetest"
	bolt "go.etcd.io/bbolt"
)

func TestStreamLogContract(t *testing.T) {
	storagetest.RunStreamLog(t, storagetest.StreamLogFactory{
		Open: func(t *testing.T, clock storage.Clock, maxSize int) storage.StreamLog {
			return openAt(t, Config{Path: filepath.Join(t.TempDir(), "granary.db"), MaxStateSize: maxSize, Clock: clock})
		},
		Reopen: func(t *testing.T, l storage.StreamLog) storage.StreamLog {
			s := l.(*Store)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return openAt(t, Config{Path: s.Path(), MaxStateSize: s.maxStateSize, Clock: s.clock})
		},
		Close: func(t *testing.T, l storage.StreamLog) {
			if err := l.(*Store).Close(); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// waitFor polls cond, under the appender's lock, until it holds: for the
// states of the group commit, which have no channel to wait on.
func waitFor(t *testing.T, a *appender, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	for {
		a.mu.Lock()
		ok := cond()
		a.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", defaultTestTimeout, what)
		}
		runtime.Gosched()
	}
}

// TestAppendsQueuedDuringACommitShareTheNext: while one append's commit
// waits for the disk (here, for a write transaction the test holds),
// later appends queue, and all of them go in the next commit, each still
// contiguous and each told its own offsets.
func TestAppendsQueuedDuringACommitShareTheNext(t *testing.T) {
	s := openStore(t, 0)
	var (
		mu      sync.Mutex
		batches []int
	)
	s.appends.commitHook = func(n int) {
		mu.Lock()
		batches = append(batches, n)
		mu.Unlock()
	}
	ctx := testCtx(t)
	p := storage.StreamPartition{Provider: "durable", N: 0}
	tx, err := s.db.Begin(true) // holds bbolt's writer lock
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()

	const queued = 50
	var (
		wg      sync.WaitGroup
		appends [queued + 1][]storage.StreamRecord
		errs    [queued + 1]error
	)
	append1 := func(i int) {
		wg.Go(func() {
			appends[i] = []storage.StreamRecord{{Stream: "s", Payload: []byte{byte(i)}}, {Stream: "s", Payload: []byte{byte(i), 1}}}
			errs[i] = s.Append(ctx, p, appends[i])
		})
	}
	append1(0)
	waitFor(t, &s.appends, "the first append to commit", func() bool { return s.appends.running })
	for i := 1; i <= queued; i++ {
		append1(i)
	}
	waitFor(t, &s.appends, "the appends to queue", func() bool { return len(s.appends.queue) == queued })
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	mu.Lock()
	if !slices.Equal(batches, []int{1, queued}) {
		t.Fatalf("commits of %v appends, want 1 and then the %d queued together", batches, queued)
	}
	mu.Unlock()
	if !slices.Equal(offsetsOf(appends[0]), []uint64{1, 2}) {
		t.Fatalf("the first append got offsets %v, want [1 2]", offsetsOf(appends[0]))
	}
	got, err := s.Read(ctx, p, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2*(queued+1) {
		t.Fatalf("the log holds %d records, want %d", len(got), 2*(queued+1))
	}
	for i, recs := range appends {
		for j, r := range recs {
			if g := got[r.Offset-1]; g.Offset != r.Offset || !slices.Equal(g.Payload, r.Payload) {
				t.Fatalf("append %d record %d: told offset %d, which holds %v", i, j, r.Offset, g.Payload)
			}
		}
		if recs[1].Offset != recs[0].Offset+1 {
			t.Fatalf("append %d: offsets %v, not contiguous", i, offsetsOf(recs))
		}
	}
}

func offsetsOf(recs []storage.StreamRecord) []uint64 {
	var out []uint64
	for _, r := range recs {
		out = append(out, r.Offset)
	}
	return out
}

// TestAbandonedAppendIsDropped: an append whose caller gives up while it
// is queued returns the context's error and is not made.
func TestAbandonedAppendIsDropped(t *testing.T) {
	s := openStore(t, 0)
	p := storage.StreamPartition{Provider: "durable", N: 0}
	tx, err := s.db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var wg sync.WaitGroup
	var first error
	wg.Go(func() { first = s.Append(testCtx(t), p, []storage.StreamRecord{{Stream: "first"}}) })
	waitFor(t, &s.appends, "the first append to commit", func() bool { return s.appends.running })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	abandoned := make(chan error, 1)
	go func() { abandoned <- s.Append(ctx, p, []storage.StreamRecord{{Stream: "abandoned"}}) }()
	waitFor(t, &s.appends, "the second append to queue", func() bool { return len(s.appends.queue) == 1 })
	cancel()
	if err := <-abandoned; !errors.Is(err, ctx.Err()) {
		t.Fatalf("abandoned append: %v, want %v", err, ctx.Err())
	}
	// A third append after it queues behind it, and is made.
	var third error
	wg.Go(func() { third = s.Append(testCtx(t), p, []storage.StreamRecord{{Stream: "third"}}) })
	waitFor(t, &s.appends, "the third append to queue", func() bool { return len(s.appends.queue) == 2 })
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if first != nil || third != nil {
		t.Fatalf("appends: %v, %v", first, third)
	}
	got, err := s.Read(testCtx(t), p, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var streams []string
	for _, r := range got {
		streams = append(streams, r.Stream)
	}
	if !slices.Equal(streams, []string{"first", "third"}) || got[1].Offset != 2 {
		t.Fatalf("the log holds %v at %v, want [first third] at [1 2]", streams, offsetsOf(got))
	}
}

// TestCloseDuringAppends: appends racing Close either complete, with
// their offsets, or fail with ErrClosed, and Close leaves no goroutine.
func TestCloseDuringAppends(t *testing.T) {
	s := openStore(t, 0)
	const appenders = 16
	var (
		wg      sync.WaitGroup
		started sync.WaitGroup
		made    [appenders][]uint64
	)
	errc := make(chan error, appenders)
	for a := range appenders {
		started.Add(1)
		wg.Go(func() {
			ctx := testCtx(t)
			p := storage.StreamPartition{Provider: "durable", N: uint32(a % 4)}
			for i := 0; ; i++ {
				recs := []storage.StreamRecord{{Stream: fmt.Sprint(a), Payload: []byte("data")}}
				err := s.Append(ctx, p, recs)
				if i == 0 {
					started.Done()
				}
				if err != nil {
					if !errors.Is(err, storage.ErrClosed) {
						errc <- fmt.Errorf("appender %d: %w", a, err)
					}
					return
				}
				made[a] = append(made[a], recs[0].Offset)
			}
		})
	}
	started.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	// Every append that returned is in the file.
	s = openAt(t, Config{Path: s.Path()})
	for a := range appenders {
		p := storage.StreamPartition{Provider: "durable", N: uint32(a % 4)}
		for _, o := range made[a] {
			got, err := s.Read(testCtx(t), p, o, 1)
			if err != nil || len(got) != 1 || got[0].Offset != o || got[0].Stream != fmt.Sprint(a) {
				t.Fatalf("appender %d's offset %d after reopening: %v, %v", a, o, got, err)
			}
		}
	}
}

// TestStreamsBucketAddedToOlderFiles: a file written before the stream
// log existed opens, with its state, and takes stream records.
func TestStreamsBucketAddedToOlderFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "granary.db")
	s := openAt(t, Config{Path: path})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: defaultTestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketStreams) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, Config{Path: path})
	p := storage.StreamPartition{Provider: "durable", N: 0}
	if err := s.Append(testCtx(t), p, []storage.StreamRecord{{Stream: "s"}}); err != nil {
		t.Fatal(err)
	}
	if _, next, err := s.Bounds(testCtx(t), p); err != nil || next != 2 {
		t.Fatalf("Bounds = %d, %v; want next 2", next, err)
	}
}

// TestStreamLogNames: any byte may be in a provider or subscription name,
// but not more than a key holds.
func TestStreamLogNames(t *testing.T) {
	s := openStore(t, 0)
	ctx := testCtx(t)
	nul := storage.StreamPartition{Provider: "a\x00", N: 1}
	if err := s.Append(ctx, nul, []storage.StreamRecord{{Stream: "s\x00", Type: "t\x00"}}); err != nil {
		t.Fatalf("append to a provider with a NUL: %v", err)
	}
	got, err := s.Read(ctx, nul, 0, 1)
	if err != nil || len(got) != 1 || got[0].Stream != "s\x00" || got[0].Type != "t\x00" {
		t.Fatalf("Read = %+v, %v", got, err)
	}
	if err := s.SaveCursor(ctx, nul, "sub\x00", 1); err != nil {
		t.Fatal(err)
	}
	long := string(make([]byte, bolt.MaxKeySize))
	if err := s.Append(ctx, storage.StreamPartition{Provider: long}, []storage.StreamRecord{{}}); !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("append to a provider named with %d bytes: %v, want ErrInvalid", len(long), err)
	}
	if err := s.SaveCursor(ctx, nul, long+"x", 1); !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("cursor named with %d bytes: %v, want ErrInvalid", len(long)+1, err)
	}
	if err := s.SaveCursor(ctx, nul, long, 1); err != nil {
		t.Fatalf("cursor named with %d bytes: %v", len(long), err)
	}
}

func TestRecordEncoding(t *testing.T) {
	for _, r := range []storage.StreamRecord{
		{},
		{Stream: "ns/key", Type: "a.v1.Event", Payload: []byte("payload")},
		{Stream: string(make([]byte, 300)), Payload: make([]byte, 1000)},
	} {
		b := encodeRecord(&r)
		k, v := setRecordKey(b, 42, -7)
		got, err := decodeRecord(k, v)
		if err != nil {
			t.Fatal(err)
		}
		if got.Offset != 42 || got.Stream != r.Stream || got.Type != r.Type || !got.Time.Equal(time.Unix(0, -7)) || !slices.Equal(got.Payload, r.Payload) {
			t.Fatalf("decoded %+v, want %+v at 42", got, r)
		}
	}
	for _, v := range [][]byte{nil, make([]byte, 7), append(make([]byte, 8), 5, 'a'), append(make([]byte, 8), 0, 0x80)} {
		if _, err := decodeRecord(offsetKey(1), v); err == nil {
			t.Fatalf("decodeRecord(%x) succeeded", v)
		}
	}
}

// BenchmarkStreamLogAppend: producers each append one 64-byte event at a
// time, waiting for it to be durable (storagetest.BenchmarkStreamAppends).
func BenchmarkStreamLogAppend(b *testing.B) {
	storagetest.BenchmarkStreamLogAppend(b, func(b *testing.B) storage.StreamLog { return openStore(b, 0) })
}

// BenchmarkStreamLogAppendViaBatch is the baseline of the appends' group
// commit: the same appends through DB.Batch, one transaction function per
// append, as the store's other writes commit.
func BenchmarkStreamLogAppendViaBatch(b *testing.B) {
	storagetest.BenchmarkStreamAppends(b, func(b *testing.B) storagetest.AppendFunc {
		s := openStore(b, 0)
		return func(p storage.StreamPartition, recs []storage.StreamRecord) error {
			key := partitionKey(p)
			bufs := make([][]byte, len(recs))
			var n int64
			for i := range recs {
				bufs[i] = encodeRecord(&recs[i])
				n += int64(len(recs[i].Payload))
			}
			now := unixNanos(s.clock.Now())
			return s.update(func(tx *bolt.Tx) error {
				pb, err := createPartition(tx, key)
				if err != nil {
					return err
				}
				meta, err := readMeta(pb)
				if err != nil {
					return err
				}
				meta.last = max(meta.last, now)
				log := pb.Bucket(bucketStreamLog)
				log.FillPercent = logFillPercent
				for _, b := range bufs {
					if err := log.Put(setRecordKey(b, meta.next, meta.last)); err != nil {
						return err
					}
					meta.next++
				}
				meta.bytes += n
				return pb.Put(keyStreamMeta, meta.encode())
			})
		}
	})
}
