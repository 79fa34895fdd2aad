package storagetest

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/granaryio/granary/silo/storage"
)

// BenchEventSize is the payload size of the stream append benchmarks'
// events.
const BenchEventSize = 64

// BenchPartitions is how many partitions the stream append benchmarks'
// producers spread over.
const BenchPartitions = 8

// AppendFunc appends recs to p, as StreamLog.Append does.
type AppendFunc func(p storage.StreamPartition, recs []storage.StreamRecord) error

// BenchmarkStreamAppends: producers each append one BenchEventSize-byte
// event at a time, waiting for it to be durable, spread over
// BenchPartitions partitions, as a durable stream provider's producers
// do: one producer per GOMAXPROCS, then about 64 and 1024 in all
// (RunParallel starts a multiple of GOMAXPROCS; the names say how many).
// It reports events/s, the throughput of all of them together. open
// returns the append function of a fresh log, for each count of
// producers.
func BenchmarkStreamAppends(b *testing.B, open func(b *testing.B) AppendFunc) {
	procs := runtime.GOMAXPROCS(0)
	for _, parallelism := range []int{1, max(1, 64/procs), max(1, 1024/procs)} {
		b.Run(fmt.Sprintf("producers=%d", parallelism*procs), func(b *testing.B) {
			appendRecs := open(b)
			var next atomic.Int64
			payload := make([]byte, BenchEventSize)
			b.ReportAllocs()
			b.SetParallelism(parallelism)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				id := next.Add(1)
				p := storage.StreamPartition{Provider: "bench", N: uint32(id % BenchPartitions)}
				stream := fmt.Sprintf("bench/%d", id)
				recs := make([]storage.StreamRecord, 1)
				for pb.Next() {
					recs[0] = storage.StreamRecord{Stream: stream, Type: "bench.v1.Event", Payload: payload}
					if err := appendRecs(p, recs); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkStreamLogAppend runs BenchmarkStreamAppends on the Append of
// the logs open returns.
func BenchmarkStreamLogAppend(b *testing.B, open func(b *testing.B) storage.StreamLog) {
	BenchmarkStreamAppends(b, func(b *testing.B) AppendFunc {
		l := open(b)
		return func(p storage.StreamPartition, recs []storage.StreamRecord) error {
			return l.Append(context.Background(), p, recs)
		}
	})
}
