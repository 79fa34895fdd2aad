package storagetest

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
)

// BenchStateSize is the size of the states the write benchmarks store.
const BenchStateSize = 100

// BenchWriters is the number of concurrent writers of the concurrent
// write benchmarks.
const BenchWriters = 64

// Writer makes writer w's write function: write(data) stores data as the
// writer's next write. Each writer has its own record.
type Writer func(b *testing.B, w int) (write func(data []byte) error)

// BenchmarkWrites runs b.N writes of BenchStateSize bytes, first by one
// writer ("sequential"), then shared by BenchWriters goroutines
// ("writers=64"), each changing its data before every write.
func BenchmarkWrites(b *testing.B, writer Writer) {
	b.Run("sequential", func(b *testing.B) { runWriters(b, 1, writer) })
	b.Run(fmt.Sprintf("writers=%d", BenchWriters), func(b *testing.B) { runWriters(b, BenchWriters, writer) })
}

func runWriters(b *testing.B, writers int, writer Writer) {
	writes := make([]func([]byte) error, writers)
	for w := range writers {
		writes[w] = writer(b, w)
	}
	var (
		next   atomic.Int64
		wg     sync.WaitGroup
		failed atomic.Pointer[error]
	)
	b.ReportAllocs()
	b.ResetTimer()
	for w := range writers {
		wg.Go(func() {
			data := make([]byte, BenchStateSize)
			for n := uint64(0); next.Add(1) <= int64(b.N); n++ {
				binary.LittleEndian.PutUint64(data, n)
				if err := writes[w](data); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
}

var benchRun atomic.Int64

// BenchmarkStateWrite benchmarks p's WriteState as grains use it: each
// writer writes its own grain's state, changed, with the ETag of its
// previous write.
func BenchmarkStateWrite(b *testing.B, p storage.Provider) {
	BenchmarkWrites(b, func(b *testing.B, w int) func([]byte) error {
		ctx := context.Background()
		id := grain.NewID("bench.Grain", fmt.Sprintf("%d-%d", benchRun.Add(1), w))
		etag, err := p.WriteState(ctx, id, "s", make([]byte, BenchStateSize), "")
		if err != nil {
			b.Fatal(err)
		}
		return func(data []byte) error {
			etag, err = p.WriteState(ctx, id, "s", data, etag)
			return err
		}
	})
}
