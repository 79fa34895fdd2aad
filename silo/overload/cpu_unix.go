//go:build unix

package overload

import (
	"syscall"
	"time"
)

// ProcessCPUTime returns the user and system CPU time the kernel has
// charged to the process, all its threads, since it started.
//
// It asks the kernel (getrusage) rather than the Go runtime. The
// runtime's /cpu/classes metrics are estimates built from GOMAXPROCS and
// wall time minus the time its processors sat idle: they count a
// processor as busy while the OS has descheduled its thread on a host
// whose cores other processes share, and miss the time spent in system
// calls and cgo outside the runtime's processors. The kernel's account
// is what the process used.
func ProcessCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
