//go:build !unix

package overload

import (
	"runtime/metrics"
	"time"
)

// ProcessCPUTime returns the CPU time the Go runtime estimates the
// process has used: the time its processors were not idle. Where
// getrusage is missing it is the best measure at hand; it counts a
// processor whose thread the OS descheduled as busy.
func ProcessCPUTime() time.Duration {
	s := [2]metrics.Sample{{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/cpu/classes/idle:cpu-seconds"}}
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindFloat64 || s[1].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration((s[0].Value.Float64() - s[1].Value.Float64()) * float64(time.Second))
}
