package scenario

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Options are the settings a benchmark command takes from its flags.
type Options struct {
	Config
	// Names is the comma-separated list of scenarios, or "all".
	Names string
	// Rounds is how many times each scenario runs on each system; the
	// figures reported are the medians over the rounds.
	Rounds int
}

// RegisterFlags defines the benchmark flags on fs, defaulting to
// DefaultConfig, and returns the Options they fill.
func RegisterFlags(fs *flag.FlagSet) *Options {
	o := &Options{Config: DefaultConfig()}
	fs.StringVar(&o.Names, "scenario", "all", "scenarios to run, comma-separated, or all: "+strings.Join(Names(), ", "))
	fs.IntVar(&o.Rounds, "rounds", 1, "runs of each scenario on each system, interleaved; the medians are reported")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long each measurement runs")
	fs.DurationVar(&o.Warmup, "warmup", o.Warmup, "unmeasured run before each measurement")
	fs.IntVar(&o.Callers, "callers", o.Callers, "concurrent callers in the concurrent variants")
	fs.IntVar(&o.Senders, "senders", o.Senders, "goroutines sending one-way messages (tell)")
	fs.IntVar(&o.TellGrains, "tell-grains", o.TellGrains, "grains receiving one-way messages (tell)")
	fs.IntVar(&o.FanoutWidth, "fanout", o.FanoutWidth, "grains a fan-out calls (fanout)")
	fs.IntVar(&o.Activations, "activations", o.Activations, "grains to create (activations)")
	fs.IntVar(&o.ActivationCallers, "activation-callers", o.ActivationCallers, "goroutines creating them (activations)")
	fs.DurationVar(&o.ActivationLimit, "activation-limit", o.ActivationLimit, "longest time spent creating them (activations)")
	fs.IntVar(&o.StreamSubscribers, "stream-subscribers", o.StreamSubscribers, "grains subscribed to the stream (stream-fanout)")
	fs.IntVar(&o.StreamWindow, "stream-window", o.StreamWindow, "events a stream's publisher may be ahead of its slowest subscriber (stream-*)")
	fs.IntVar(&o.Timers, "timers", o.Timers, "timers to run (timers)")
	fs.DurationVar(&o.TimerPeriod, "timer-period", o.TimerPeriod, "their period (timers)")
	fs.DurationVar(&o.TimerWindow, "timer-window", o.TimerWindow, "how long their CPU and lateness are measured (timers)")
	return o
}

// Scenarios returns the scenario names the options select, checked.
func (o *Options) Scenarios() ([]string, error) {
	if o.Rounds < 1 {
		return nil, fmt.Errorf("-rounds %d: must be at least 1", o.Rounds)
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	if o.Names == "all" {
		return Names(), nil
	}
	var names []string
	for n := range strings.SplitSeq(o.Names, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(Names(), n) {
			return nil, fmt.Errorf("-scenario: unknown scenario %q (known: %s, all)", n, strings.Join(Names(), ", "))
		}
		names = append(names, n)
	}
	return names, nil
}

// RunAll runs each scenario of names on each system, Rounds times,
// interleaving systems within a round and rounds over the whole list so
// that drift in the machine's speed falls on every system alike. It
// prints every result to w as it comes, and returns the medians over the
// rounds, in the order of names and then systems. A scenario a system
// does not support is noted on w and skipped.
func (o *Options) RunAll(ctx context.Context, systems []System, names []string, w io.Writer) ([]Result, error) {
	type key struct{ scenario, variant, system string }
	rounds := map[key][]Result{}
	var order []key
	for round := range o.Rounds {
		for _, name := range names {
			for _, sys := range systems {
				rs, err := Run(ctx, sys, name, o.Config)
				if errors.Is(err, ErrUnsupported) {
					if round == 0 {
						fmt.Fprintf(w, "%-16s %-12s not supported\n", name, sys.Name())
					}
					continue
				}
				if err != nil {
					return nil, err
				}
				for _, r := range rs {
					if err := Print(w, r); err != nil {
						return nil, err
					}
					k := key{r.Scenario, r.Variant, r.System}
					if _, seen := rounds[k]; !seen {
						order = append(order, k)
					}
					rounds[k] = append(rounds[k], r)
				}
			}
		}
	}
	out := make([]Result, 0, len(order))
	for _, k := range order {
		out = append(out, Median(rounds[k]))
	}
	if o.Rounds > 1 {
		fmt.Fprintf(w, "\nmedians over %d rounds:\n", o.Rounds)
		for _, r := range out {
			if err := Print(w, r); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// GranaryDocs is the Markdown that `make bench` writes into
// docs/benchmarks.md for Granary's own results: where and how they were
// measured, then the table.
func GranaryDocs(rs []Result, o *Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured on %s.\n", Machine(time.Now()))
	fmt.Fprintf(&b, "Each measurement ran %v after a %v warm-up; %d round(s), medians shown.\n\n", o.Duration, o.Warmup, o.Rounds)
	b.WriteString(Table(rs))
	return b.String()
}
