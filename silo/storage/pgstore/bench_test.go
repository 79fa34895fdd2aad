package pgstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/granaryio/granary/grain"
)

// BenchmarkStateWrite: writers each read-modify-write their own grain's
// 100-byte state, with the ETag of their previous write: one writer, and
// 64 sharing the store's pool (pgxpool's default size).
func BenchmarkStateWrite(b *testing.B) {
	s := openStore(b, Config{})
	b.Run("sequential", func(b *testing.B) { benchmarkWriters(b, s, 1) })
	b.Run("writers=64", func(b *testing.B) { benchmarkWriters(b, s, 64) })
}

var benchRun atomic.Int64

func benchmarkWriters(b *testing.B, s *Store, writers int) {
	ctx := context.Background()
	run := benchRun.Add(1)
	ids := make([]grain.ID, writers)
	etags := make([]string, writers)
	for w := range writers {
		ids[w] = grain.NewID("bench.G", fmt.Sprintf("%d-%d", run, w))
		e, err := s.WriteState(ctx, ids[w], "s", make([]byte, 100), "")
		if err != nil {
			b.Fatal(err)
		}
		etags[w] = e
	}
	var (
		next   atomic.Int64 // writes started
		wg     sync.WaitGroup
		failed atomic.Pointer[error]
	)
	b.ReportAllocs()
	b.ResetTimer()
	for w := range writers {
		wg.Go(func() {
			data := make([]byte, 100)
			etag := etags[w]
			for n := uint64(0); next.Add(1) <= int64(b.N); n++ {
				binary.LittleEndian.PutUint64(data, n) // the modification
				e, err := s.WriteState(ctx, ids[w], "s", data, etag)
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				etag = e
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
}
