package activation

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// BenchmarkTuneQuantumTurns is the measurement behind the QuantumTurns
// default: the 1,000-group throughput workload at several quanta.
func BenchmarkTuneQuantumTurns(b *testing.B) {
	for _, q := range []int{8, 16, 64, 256, 1024} {
		b.Run(fmt.Sprint("quantum=", q), func(b *testing.B) {
			p := newTestPool(b, benchConfig(func(c *Config) { c.QuantumTurns = q }))
			gs := make([]*Group, 1000)
			for i := range gs {
				gs[i] = p.NewGroup("g")
			}
			runThroughput(b, len(gs), func(perGroup []int, wg *sync.WaitGroup) func(i int) {
				turns := make([]Turn, len(gs))
				for i := range gs {
					turns[i] = Turn{Name: "count", Task: &countTask{want: perGroup[i], wg: wg}}
				}
				return func(i int) {
					if err := gs[i].Enqueue(turns[i]); err != nil {
						panic(err)
					}
				}
			})
		})
	}
}

// BenchmarkTuneSpinRounds is the measurement behind the SpinRounds
// default: the round trip at several spin counts.
func BenchmarkTuneSpinRounds(b *testing.B) {
	for _, s := range []int{0, 1, 2, 4, 16, 64} {
		b.Run(fmt.Sprint("spin=", s), func(b *testing.B) {
			runRoundTrip(b, func(c *Config) { c.SpinRounds = s })
		})
	}
}

// BenchmarkTuneMaxQueuedTurns is the measurement behind the MaxQueuedTurns
// default: the throughput workload with producers feeding through
// EnqueueWait, at several marks (0 is no flow control, as Enqueue).
func BenchmarkTuneMaxQueuedTurns(b *testing.B) {
	for _, groups := range []int{1, 1000} {
		for _, mark := range []int{0, 64, 256, 1024, 4096} {
			b.Run(fmt.Sprintf("groups=%d/mark=%d", groups, mark), func(b *testing.B) {
				p := newTestPool(b, benchConfig(func(c *Config) { c.MaxQueuedTurns = mark }))
				gs := make([]*Group, groups)
				for i := range gs {
					gs[i] = p.NewGroup("g")
				}
				ctx := context.Background()
				runThroughput(b, groups, func(perGroup []int, wg *sync.WaitGroup) func(i int) {
					turns := make([]Turn, groups)
					for i := range gs {
						turns[i] = Turn{Name: "count", Task: &countTask{want: perGroup[i], wg: wg}}
					}
					return func(i int) {
						if err := gs[i].EnqueueWait(ctx, turns[i]); err != nil {
							panic(err)
						}
					}
				})
			})
		}
	}
}
