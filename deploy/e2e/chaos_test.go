package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// fakeRunner records the commands it is given and answers them with
// respond (nil: empty output, no error).
type fakeRunner struct {
	mu      sync.Mutex
	calls   []string
	respond func(cmd string) (string, error)
}

func (f *fakeRunner) run(_ context.Context, _ []string, name string, args ...string) (string, error) {
	cmd := strings.Join(append([]string{name}, args...), " ")
	f.mu.Lock()
	f.calls = append(f.calls, cmd)
	respond := f.respond
	f.mu.Unlock()
	if respond == nil {
		return "", nil
	}
	return respond(cmd)
}

func (f *fakeRunner) commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// inspectJSON is docker inspect's answer for a container on network at
// ip, known there by aliases.
func inspectJSON(network, ip string, restarts int, aliases ...string) string {
	if aliases == nil {
		aliases = []string{}
	}
	a, _ := json.Marshal(aliases)
	return fmt.Sprintf(`[{"RestartCount": %d, "State": {"Running": true}, "NetworkSettings": {"Networks": {%q: {"IPAddress": %q, "Aliases": %s}}}}]`, restarts, network, ip, a)
}

var testSilos = []silo{
	{Service: "silo-a", Container: "ca", Admin: "127.0.0.1:8081", Gateway: "127.0.0.1:30001"},
	{Service: "silo-b", Container: "cb", Admin: "127.0.0.1:8082", Gateway: "127.0.0.1:30002"},
	{Service: "silo-c", Container: "cc", Admin: "127.0.0.1:8083", Gateway: "127.0.0.1:30003"},
}

var testChaosConfig = chaosConfig{Hold: 10 * time.Second, Settle: 8 * time.Second, Grace: 25 * time.Second, ReadyTimeout: 30 * time.Second, ReadyPoll: 250 * time.Millisecond}

// runChaos runs c to its end on a fake clock, advancing the clock
// whenever c waits on it.
func runChaos(t *testing.T, c *chaos, clock *clockwork.FakeClock) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.run(ctx) }()
	advCtx, stopAdvancing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for clock.BlockUntilContext(advCtx, 1) == nil {
			clock.Advance(100 * time.Millisecond)
		}
	})
	err := <-done
	stopAdvancing()
	wg.Wait()
	return err
}

// newTestChaos returns a chaos over testSilos, whose silos answer /readyz
// after notReady refusals each time they are waited for, and the runner
// and clock behind it.
func newTestChaos(respond func(string) (string, error), notReady int) (*chaos, *fakeRunner, *clockwork.FakeClock, *[]string) {
	clock := clockwork.NewFakeClockAt(t0.Add(300 * time.Millisecond))
	r := &fakeRunner{respond: respond}
	var mu sync.Mutex
	var asked []string
	refusals := map[string]int{}
	ready := func(ctx context.Context, s silo) error {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, s.Service)
		if refusals[s.Service] < notReady {
			refusals[s.Service]++
			return errors.New("503: joining")
		}
		refusals[s.Service] = 0
		return nil
	}
	c := &chaos{
		cfg: testChaosConfig, d: dockerCLI{r: r}, silos: testSilos, network: "granary-e2e_granary",
		ready: ready, clock: clock, tl: newTimeline(t0, 2), logf: func(string, ...any) {},
	}
	return c, r, clock, &asked
}

func steadyInspect(cmd string) (string, error) {
	if strings.HasPrefix(cmd, "docker inspect") {
		return inspectJSON("granary-e2e_granary", "172.18.0.4", 0, "silo-c", "0123abcd"), nil
	}
	return "", nil
}

func TestChaosSchedule(t *testing.T) {
	c, r, clock, asked := newTestChaos(steadyInspect, 2)
	if err := runChaos(t, c, clock); err != nil {
		t.Fatalf("run: %v", err)
	}
	wantCmds := []string{
		"docker kill cb",
		"docker start cb",
		"docker inspect cc",
		"docker network disconnect granary-e2e_granary cc",
		"docker network connect --alias silo-c --alias 0123abcd --ip 172.18.0.4 granary-e2e_granary cc",
		"docker inspect cc",
		"docker restart -t 25 ca",
		"docker restart -t 25 cb",
		"docker restart -t 25 cc",
	}
	if got := r.commands(); !slices.Equal(got, wantCmds) {
		t.Errorf("commands:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(wantCmds, "\n  "))
	}
	wantPhases := []string{"steady state", "kill silo-b", "start silo-b", "partition silo-c", "heal silo-c", "restart silo-a", "restart silo-b", "restart silo-c"}
	var names []string
	for _, p := range c.phases {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, wantPhases) {
		t.Fatalf("phases %v, want %v", names, wantPhases)
	}
	// The phases tile the timeline: each starts where the one before
	// ended, on a whole second, and lasts at least the time held.
	for i, p := range c.phases {
		if i > 0 && p.Start != c.phases[i-1].End {
			t.Errorf("%s starts at second %d, the phase before ends at %d", p.Name, p.Start, c.phases[i-1].End)
		}
		minLen := int(testChaosConfig.Settle / time.Second)
		if strings.HasPrefix(p.Name, "kill") || strings.HasPrefix(p.Name, "partition") || p.Name == "steady state" {
			minLen = int(testChaosConfig.Hold / time.Second)
		}
		if p.End-p.Start < minLen {
			t.Errorf("%s lasts %d s, want at least %d", p.Name, p.End-p.Start, minLen)
		}
	}
	if c.phases[0].Start != 1 {
		t.Errorf("the first phase starts at second %d, want 1 (the next whole second)", c.phases[0].Start)
	}
	// Each silo brought back was waited for until ready: two refusals,
	// then an answer, for silo-b's start, silo-c's heal and each restart.
	want := []string{"silo-b", "silo-c", "silo-a", "silo-b", "silo-c"}
	var waited []string
	for i := 0; i+2 < len(*asked); i += 3 {
		waited = append(waited, (*asked)[i])
	}
	if !slices.Equal(waited, want) || len(*asked) != 3*len(want) {
		t.Errorf("readiness asked of %v, want three times each of %v", *asked, want)
	}
}

func TestChaosErrors(t *testing.T) {
	tests := []struct {
		name       string
		respond    func(string) (string, error)
		notReady   int
		wantErr    string
		wantPhases int
	}{
		{
			name: "kill fails",
			respond: func(cmd string) (string, error) {
				if strings.HasPrefix(cmd, "docker kill") {
					return "", errors.New("docker kill cb: no such container")
				}
				return steadyInspect(cmd)
			},
			wantErr:    "no such container",
			wantPhases: 2,
		},
		{
			name:       "a silo never ready",
			respond:    steadyInspect,
			notReady:   1 << 30,
			wantErr:    "silo-b is not ready 30s after it started",
			wantPhases: 3,
		},
		{
			name: "the partitioned silo comes back with another address",
			respond: func() func(string) (string, error) {
				n := 0
				return func(cmd string) (string, error) {
					if strings.HasPrefix(cmd, "docker inspect") {
						n++
						return inspectJSON("granary-e2e_granary", fmt.Sprintf("172.18.0.%d", 3+n), 0, "silo-c"), nil
					}
					return "", nil
				}
			}(),
			wantErr:    `came back on granary-e2e_granary with address "172.18.0.5", not "172.18.0.4"`,
			wantPhases: 5,
		},
		{
			name: "the partitioned silo comes back without its service name",
			respond: func() func(string) (string, error) {
				n := 0
				return func(cmd string) (string, error) {
					if strings.HasPrefix(cmd, "docker inspect") {
						n++
						if n == 1 {
							return inspectJSON("granary-e2e_granary", "172.18.0.4", 0, "silo-c", "0123abcd"), nil
						}
						return inspectJSON("granary-e2e_granary", "172.18.0.4", 0, "0123abcd"), nil
					}
					return "", nil
				}
			}(),
			wantErr:    `under the names ["0123abcd"], without its service name`,
			wantPhases: 5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, clock, _ := newTestChaos(tt.respond, tt.notReady)
			err := runChaos(t, c, clock)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("run: %v, want an error containing %q", err, tt.wantErr)
			}
			if len(c.phases) != tt.wantPhases {
				t.Fatalf("%d phases recorded, want %d", len(c.phases), tt.wantPhases)
			}
			if last := c.phases[len(c.phases)-1]; last.End < last.Start {
				t.Errorf("the last phase %s was left open: [%d, %d)", last.Name, last.Start, last.End)
			}
		})
	}
}

func TestChaosNeedsThreeSilos(t *testing.T) {
	c, _, _, _ := newTestChaos(steadyInspect, 0)
	c.silos = c.silos[:2]
	if err := c.run(context.Background()); err == nil || !strings.Contains(err.Error(), "2 silos") {
		t.Errorf("run with two silos: %v, want an error saying so", err)
	}
}
