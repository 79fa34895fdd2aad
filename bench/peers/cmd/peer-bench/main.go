// Command peer-bench runs the benchmark scenarios of bench/scenario on
// Granary and on its peers in one process run, interleaved, and prints
// every result and the granary / peer ratios of throughput and p99.
//
//	cd bench/peers && go run ./cmd/peer-bench -scenario ping,cross-silo-ping
//	cd bench/peers && go run ./cmd/peer-bench -rounds 3 -docs ../../docs/benchmarks.md
//
// With -docs it rewrites each comparison of docs/benchmarks.md whose
// scenarios all ran: the streams' (bench:streams markers) and the rest's
// (bench:peers).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/granaryio/granary/bench/granarysys"
	"github.com/granaryio/granary/bench/peers/channels"
	"github.com/granaryio/granary/bench/peers/protoactor"
	"github.com/granaryio/granary/bench/scenario"
)

// base is the system every other is compared with.
const base = "granary"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "peer-bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	all := []scenario.System{granarysys.New(), protoactor.New(), channels.New()}
	var names []string
	for _, s := range all {
		names = append(names, s.Name())
	}
	fs := flag.NewFlagSet("peer-bench", flag.ContinueOnError)
	opts := scenario.RegisterFlags(fs)
	systems := fs.String("systems", strings.Join(names, ","), "systems to run, comma-separated; "+base+" must be one")
	docs := fs.String("docs", "", "rewrite the comparison tables of this Markdown `file` (between its bench:peers and bench:streams markers) whose scenarios all ran")
	if err := fs.Parse(args); err != nil {
		return err
	}
	scenarios, err := opts.Scenarios()
	if err != nil {
		return err
	}
	var chosen []scenario.System
	var peers []string
	for n := range strings.SplitSeq(*systems, ",") {
		i := slices.Index(names, strings.TrimSpace(n))
		if i < 0 {
			return fmt.Errorf("-systems: unknown system %q (known: %s)", n, strings.Join(names, ", "))
		}
		chosen = append(chosen, all[i])
		if names[i] != base {
			peers = append(peers, names[i])
		}
	}
	if len(chosen) == len(peers) {
		return errors.New("-systems: " + base + " must be one of them: it is what the ratios compare with")
	}

	// As in granary-bench, calls carry a context that never ends.
	results, err := opts.RunAll(context.Background(), chosen, scenarios, os.Stdout)
	if err != nil {
		return err
	}
	fmt.Printf("\n%s / peer:\n", base)
	scenario.PrintRatios(os.Stdout, scenario.Ratios(results, base, peers))
	if *docs == "" {
		return nil
	}
	if len(chosen) != len(all) {
		return errors.New("-docs needs every system: leave -systems at its default")
	}
	wrote := false
	for _, sec := range sections() {
		if !containsAll(scenarios, sec.scenarios) {
			continue
		}
		if err := scenario.Replace(*docs, sec.marker, scenario.PeerDocs(only(results, sec.scenarios), base, peers, opts)); err != nil {
			return err
		}
		wrote = true
	}
	if !wrote {
		return errors.New("-docs needs every scenario of a comparison: leave -scenario at all, or name every stream scenario (" +
			strings.Join(scenario.StreamNames(), ",") + ")")
	}
	return nil
}

// A section is one comparison of docs/benchmarks.md: its markers' name and
// the scenarios whose results it shows.
type section struct {
	marker    string
	scenarios []string
}

// sections are the comparisons: the streams in a section of their own, the
// other scenarios in the first.
func sections() []section {
	var others []string
	for _, n := range scenario.Names() {
		if !slices.Contains(scenario.StreamNames(), n) {
			others = append(others, n)
		}
	}
	return []section{{"peers", others}, {"streams", scenario.StreamNames()}}
}

// containsAll reports whether have has every name of want.
func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// only returns the results of the scenarios named, in their order in rs.
func only(rs []scenario.Result, names []string) []scenario.Result {
	var out []scenario.Result
	for _, r := range rs {
		if slices.Contains(names, r.Scenario) {
			out = append(out, r)
		}
	}
	return out
}
