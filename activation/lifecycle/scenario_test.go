package lifecycle_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/granaryio/granary/activation/lifecycle"
	"github.com/granaryio/granary/grain"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScenarios plays the scripts in testdata/*.txt, each on a fresh
// (zero, Registering) Machine. Blank lines and comments, from '#' to the
// end of the line, are ignored. Every event line names what the Machine
// must answer after "->", exactly as Result.String prints it ("none" for
// nothing); a line "state ..." checks Machine.String.
//
// Events (flags in any order; times as time.ParseDuration reads them):
//
//	offer [chain] [holds]              Offer(inChain, holdsChain)
//	registered                         Registered()
//	lost [quiet]                       RegistrationLost(quiet)
//	regfail                            RegistrationFailed()
//	activated [failed] [now=D]         ActivateDone(failed, now)
//	done [quiet] [activity] [panic]    TurnDone(quiet, activity, panicked, now)
//	  [now=D]
//	deactivate REASON [quiet]          Deactivate(reason, quiet); REASON as
//	                                   grain.DeactivationReason prints it:
//	                                   idle, requested, shutdown, panic, operator
//	migrate REASON [quiet]             Migrate(reason, quiet)
//	tick now=D age=D [busy]            IdleTick(now, age, busy)
//	pressure now=D since=D [busy]      PressureTick(now, since, busy)
//	delay now=D d=D                    DelayDeactivation(now, d); answers
//	                                   nothing: write "-> none"
//	deactivated                        Deactivated()
//	close                              Close()
//
// Checks:
//
//	offer -> hold                      the event's Result, as printed
//	state active held=1 idle-since=0s  Machine.String()
//	usable true                        Machine.Usable()
//	idle-since now=D -> D true         Machine.IdleSince(now): since, collectable
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenarios in testdata")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			runScenario(t, f)
		})
	}
}

func runScenario(t *testing.T, path string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var m lifecycle.Machine
	sc := bufio.NewScanner(f)
	steps := 0
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		text = strings.TrimSpace(text)
		if text == "" {
			continue
		}
		steps++
		if err := step(&m, text); err != nil {
			t.Fatalf("%s:%d: %s: %v\n\tmachine: %s", path, line, text, err, &m)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if steps == 0 {
		t.Fatalf("%s: no steps", path)
	}
}

func step(m *lifecycle.Machine, text string) error {
	if rest, ok := strings.CutPrefix(text, "state "); ok {
		if got := m.String(); got != strings.TrimSpace(rest) {
			return fmt.Errorf("state is %q, want %q", got, strings.TrimSpace(rest))
		}
		return nil
	}
	if rest, ok := strings.CutPrefix(text, "idle-since "); ok {
		ev, want, ok := strings.Cut(rest, "->")
		if !ok {
			return fmt.Errorf(`idle-since needs "-> <since> <collectable>"`)
		}
		a, err := parseArgs(strings.Fields(ev), "now=")
		if err != nil {
			return err
		}
		since, collectable := m.IdleSince(a.vals["now"])
		if got := fmt.Sprint(since, " ", collectable); got != strings.Join(strings.Fields(want), " ") {
			return fmt.Errorf("idle-since is %s, want %s", got, strings.TrimSpace(want))
		}
		return nil
	}
	if rest, ok := strings.CutPrefix(text, "usable "); ok {
		if got := fmt.Sprint(m.Usable()); got != strings.TrimSpace(rest) {
			return fmt.Errorf("usable is %s, want %s", got, strings.TrimSpace(rest))
		}
		return nil
	}
	ev, want, ok := strings.Cut(text, "->")
	if !ok {
		return fmt.Errorf(`an event needs "-> <result>"`)
	}
	want = strings.Join(strings.Fields(want), " ")
	if want == "" {
		return fmt.Errorf(`empty result: write "-> none"`)
	}
	r, err := apply(m, strings.Fields(ev))
	if err != nil {
		return err
	}
	if got := r.String(); got != want {
		return fmt.Errorf("got -> %s, want -> %s", got, want)
	}
	return nil
}

// args are an event's flags and key=value settings.
type args struct {
	flags map[string]bool
	vals  map[string]time.Duration
	words []string // positional, after the event's name
}

func parseArgs(fields []string, flags ...string) (args, error) {
	a := args{flags: map[string]bool{}, vals: map[string]time.Duration{}}
	known := map[string]bool{}
	for _, f := range flags {
		known[f] = true
	}
	for _, f := range fields {
		switch k, v, isVal := strings.Cut(f, "="); {
		case isVal:
			d, err := time.ParseDuration(v)
			if err != nil {
				return a, fmt.Errorf("%s: %v", f, err)
			}
			if !known[k+"="] {
				return a, fmt.Errorf("unknown setting %q", k)
			}
			a.vals[k] = d
		case known[f]:
			a.flags[f] = true
		default:
			a.words = append(a.words, f)
		}
	}
	return a, nil
}

func parseReason(s string) (grain.DeactivationReason, error) {
	for r := grain.DeactivateIdle; r <= grain.DeactivateMemoryPressure; r++ {
		if r.String() == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("unknown reason %q", s)
}

func apply(m *lifecycle.Machine, f []string) (lifecycle.Result, error) {
	if len(f) == 0 {
		return lifecycle.Result{}, fmt.Errorf("no event")
	}
	name := f[0]
	var flags []string
	nwords := 0
	switch name {
	case "offer":
		flags = []string{"chain", "holds"}
	case "lost":
		flags = []string{"quiet"}
	case "activated":
		flags = []string{"failed", "now="}
	case "done":
		flags = []string{"quiet", "activity", "panic", "now="}
	case "deactivate", "migrate":
		flags, nwords = []string{"quiet"}, 1
	case "tick":
		flags = []string{"now=", "age=", "busy"}
	case "pressure":
		flags = []string{"now=", "since=", "busy"}
	case "delay":
		flags = []string{"now=", "d="}
	case "registered", "regfail", "deactivated", "close":
	default:
		return lifecycle.Result{}, fmt.Errorf("unknown event %q", name)
	}
	a, err := parseArgs(f[1:], flags...)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if len(a.words) != nwords {
		return lifecycle.Result{}, fmt.Errorf("%s takes %d word(s) besides its flags, got %q", name, nwords, a.words)
	}
	switch name {
	case "offer":
		return m.Offer(a.flags["chain"], a.flags["holds"]), nil
	case "registered":
		return m.Registered(), nil
	case "lost":
		return m.RegistrationLost(a.flags["quiet"]), nil
	case "regfail":
		return m.RegistrationFailed(), nil
	case "activated":
		return m.ActivateDone(a.flags["failed"], a.vals["now"]), nil
	case "done":
		return m.TurnDone(a.flags["quiet"], a.flags["activity"], a.flags["panic"], a.vals["now"]), nil
	case "deactivate", "migrate":
		reason, err := parseReason(a.words[0])
		if err != nil {
			return lifecycle.Result{}, err
		}
		if name == "migrate" {
			return m.Migrate(reason, a.flags["quiet"]), nil
		}
		return m.Deactivate(reason, a.flags["quiet"]), nil
	case "tick":
		if _, ok := a.vals["now"]; !ok {
			return lifecycle.Result{}, fmt.Errorf("tick needs now=")
		}
		if _, ok := a.vals["age"]; !ok {
			return lifecycle.Result{}, fmt.Errorf("tick needs age=")
		}
		return m.IdleTick(a.vals["now"], a.vals["age"], a.flags["busy"]), nil
	case "pressure":
		if _, ok := a.vals["since"]; !ok {
			return lifecycle.Result{}, fmt.Errorf("pressure needs since=")
		}
		return m.PressureTick(a.vals["now"], a.vals["since"], a.flags["busy"]), nil
	case "delay":
		if _, ok := a.vals["d"]; !ok {
			return lifecycle.Result{}, fmt.Errorf("delay needs d=")
		}
		m.DelayDeactivation(a.vals["now"], a.vals["d"])
		return lifecycle.Result{}, nil
	case "deactivated":
		return m.Deactivated(), nil
	case "close":
		return m.Close(), nil
	}
	panic("unreachable")
}
