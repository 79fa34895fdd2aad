package channels

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/granaryio/granary/bench/scenario"
	"go.uber.org/goleak"
)

// unsupported are the scenarios the baseline has no feature for: all
// need a network.
var unsupported = map[string]bool{
	scenario.CrossSiloPing:   true,
	scenario.ClientPing:      true,
	scenario.StreamCrossSilo: true,
}

// TestScenarios runs every scenario once with a tiny configuration: the
// supported ones must measure something, the others must say they are
// unsupported, and nothing may be left running.
func TestScenarios(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := scenario.SmokeConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sys := New()
	for _, name := range scenario.Names() {
		t.Run(name, func(t *testing.T) {
			rs, err := scenario.Run(ctx, sys, name, cfg)
			if unsupported[name] {
				if !errors.Is(err, scenario.ErrUnsupported) {
					t.Fatalf("got error %v, want ErrUnsupported", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) == 0 {
				t.Fatal("no results")
			}
			for _, r := range rs {
				t.Logf("%s: ops %d, %.0f ops/s, p50 %v, p99 %v, %.1f allocs/op, extra %v",
					r.Variant, r.Ops, r.OpsPerSec, time.Duration(r.P50), time.Duration(r.P99), r.AllocsPerOp, r.Extra)
				if r.Ops <= 0 || r.OpsPerSec <= 0 || r.P99 <= 0 {
					t.Errorf("%s: ops %d, ops/s %v, p99 %d: want all positive", r.Variant, r.Ops, r.OpsPerSec, r.P99)
				}
			}
		})
	}
}
