// Command granary-bench runs Granary's benchmark scenarios (bench/scenario)
// and prints, for each, ops/s, p50, p99 and p99.9 latency and allocs/op,
// as a line for people and a line of JSON.
//
//	go run ./bench/cmd/granary-bench -scenario ping -duration 5s
//	go run ./bench/cmd/granary-bench -scenario all -docs docs/benchmarks.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/granaryio/granary/bench/granarysys"
	"github.com/granaryio/granary/bench/scenario"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "granary-bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("granary-bench", flag.ContinueOnError)
	opts := scenario.RegisterFlags(fs)
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `file`")
	docs := fs.String("docs", "", "rewrite the Granary tables of this Markdown `file` (between its bench:granary markers)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	names, err := opts.Scenarios()
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	// Calls carry a context that never ends, as in the Go benchmarks of
	// the packages: a context that can end costs every system a select
	// on its channel per call, which is measured apart (docs/benchmarks.md).
	ctx := context.Background()
	results, err := opts.RunAll(ctx, []scenario.System{granarysys.New()}, names, os.Stdout)
	if err != nil {
		return err
	}
	if *docs == "" {
		return nil
	}
	if len(names) != len(scenario.Names()) {
		return errors.New("-docs needs every scenario: leave -scenario at all")
	}
	return scenario.Replace(*docs, "granary", scenario.GranaryDocs(results, opts))
}
