// This file holds the driver: the -drive loop that calls counters over
// and over and prints, once a second, what answered.

package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/granaryio/granary/grain"
	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
)

const (
	// driveCallTimeout bounds each call of the driver, so a call stuck
	// on a dead silo counts as failed rather than stalling the loop.
	driveCallTimeout = time.Second
	// driveReportInterval is how often the driver prints a summary.
	driveReportInterval = time.Second
	// driveBackoff is how long the driver waits after a failed call: a
	// dead silo refuses at once, and the loop should not spin.
	driveBackoff = 50 * time.Millisecond
)

// driveStats counts the calls of one report interval.
type driveStats struct {
	ok, failed int
	silos      map[string]int // successful calls per answering member ID
	lastErr    error
}

// line is the summary printed for the interval, for example
//
//	drive ok=120 failed=0 silos=a-1f3e:40,b-77c0:80
func (d *driveStats) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "drive ok=%d failed=%d silos=", d.ok, d.failed)
	for i, id := range slices.Sorted(maps.Keys(d.silos)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%d", id, d.silos[id])
	}
	if d.lastErr != nil {
		b.WriteString(" err=" + strconv.Quote(d.lastErr.Error()))
	}
	return b.String()
}

// drive calls counters "counter-0" to "counter-<n-1>" in turn, one call
// at a time through caller, until ctx ends, and writes a summary line to
// stdout every driveReportInterval.
func drive(ctx context.Context, caller grain.Caller, n int, stdout io.Writer) {
	refs := make([]clusterpb.CounterRef, n)
	for i := range refs {
		refs[i] = clusterpb.NewCounterRef(caller, fmt.Sprintf("counter-%d", i))
	}
	tick := time.NewTicker(driveReportInterval)
	defer tick.Stop()
	stats := driveStats{silos: map[string]int{}}
	for i := 0; ; i = (i + 1) % n {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fmt.Fprintln(stdout, stats.line())
			stats = driveStats{silos: map[string]int{}}
		default:
		}
		callCtx, cancel := context.WithTimeout(ctx, driveCallTimeout)
		reply, err := refs[i].Add(callCtx, &clusterpb.AddRequest{Delta: 1})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return // stopping: not a failure of the cluster
			}
			stats.failed++
			stats.lastErr = err
			sleep(ctx, driveBackoff)
			continue
		}
		stats.ok++
		stats.silos[reply.GetSilo()]++
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
