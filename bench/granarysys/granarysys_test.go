package granarysys

import (
	"context"
	"fmt"
	"testing"

	"github.com/granaryio/granary/bench/scenario"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScenarios runs every scenario on Granary and checks that each
// measured something.
func TestScenarios(t *testing.T) {
	cfg := scenario.SmokeConfig()
	for _, name := range scenario.Names() {
		t.Run(name, func(t *testing.T) {
			rs, err := scenario.Run(context.Background(), New(), name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) == 0 {
				t.Fatal("no results")
			}
			for _, r := range rs {
				if r.Scenario != name || r.System != "granary" || r.Ops <= 0 || r.OpsPerSec <= 0 || r.P99 <= 0 {
					t.Errorf("result %+v: want this scenario, system granary, and ops, ops/s and p99 above zero", r)
				}
			}
			switch name {
			case scenario.Activations:
				if got := rs[0].Extra[scenario.ExtraActivations]; got != float64(cfg.Activations) {
					t.Errorf("created %v activations, want %d", got, cfg.Activations)
				}
				if rs[0].Extra[scenario.ExtraBytesPerActivation] <= 0 {
					t.Errorf("bytes per activation %v, want above zero", rs[0].Extra[scenario.ExtraBytesPerActivation])
				}
			case scenario.Timers:
				// 200 timers at 100 ms over 300 ms tick about 600 times.
				if rs[0].Ops < int64(cfg.Timers) {
					t.Errorf("%d ticks in %v, want at least %d", rs[0].Ops, cfg.TimerWindow, cfg.Timers)
				}
			case scenario.StreamLocal, scenario.StreamCrossSilo, scenario.StreamFanout:
				subs := 1
				if name == scenario.StreamFanout {
					subs = cfg.StreamSubscribers
				}
				r := rs[0]
				if want := fmt.Sprint("subscribers=", subs); len(rs) != 1 || r.Variant != want {
					t.Errorf("variants %+v, want %s", rs, want)
				}
				if r.Ops%int64(subs) != 0 || r.Extra[scenario.ExtraEventsPerSec] != r.OpsPerSec/float64(subs) {
					t.Errorf("ops %d, events/s %v: want every event handled by each of %d subscribers", r.Ops, r.Extra[scenario.ExtraEventsPerSec], subs)
				}
			case scenario.CrossSiloPing, scenario.ClientPing:
				if len(rs) != 2 || rs[0].Variant != scenario.Sequential || rs[1].Variant != "callers=8" {
					t.Errorf("variants %+v, want sequential and callers=8", rs)
				}
			}
		})
	}
}
