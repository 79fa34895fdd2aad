// Command ratios reads `go test -bench` output and prints, for each pair
// of benchmarks compared in docs/benchmarks.md, the median ns/op of both
// and their ratio. Medians over -count runs are what benchstat reports;
// ratios of results from the same run are what stays meaningful on a
// noisy shared machine.
//
//	go test -run '^$' -bench . -benchmem -count 6 ./activation/ > bench.out
//	go run ./bench/ratios bench.out
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// pairs lists what is compared: a benchmark, its baseline, and the target
// ratio (0 when there is none).
var pairs = []struct {
	name, base string
	target     float64
}{
	{"RoundTrip", "BaselineChanRoundTrip", 1.5},
	{"LocalCall", "BaselineChanAsk", 2},
	{"GrainToGrain", "BaselineChanAsk", 0},
	{"CrossSiloCall", "BaselineGRPCBidiPingPong", 1.5},
	{"CrossSiloCallMTLS", "CrossSiloCall", 1.15},
	// Throughput at least 0.85x plaintext's: ns/op at most 1/0.85 times.
	{"CrossSiloThroughputMTLS", "CrossSiloThroughput", 1.176},
	{"ClientCall/sequential", "CrossSiloCall", 0},
	{"ClientCall/concurrent=256", "CrossSiloThroughput", 0},
	{"Handoff/inline", "BaselineChanRoundTrip", 2},
	{"Handoff/blocking", "BaselineChanRoundTrip", 2},
	{"GoroutinePerRun/RoundTrip", "BaselineChanRoundTrip", 0},
	{"GoroutinePerRun/Handoff", "BaselineChanRoundTrip", 0},
	{"Throughput/groups=1", "BaselineGoroutinePerGroup/groups=1", 1},
	{"Throughput/groups=1000", "BaselineGoroutinePerGroup/groups=1000", 1},
	{"Throughput/groups=100000", "BaselineGoroutinePerGroup/groups=100000", 1},
	{"StateWrite/sequential", "StateWriteRaw/sequential", 0},
	{"StateWrite/writers=64", "StateWriteRaw/writers=64", 0},
	{"Throughput/groups=1", "GoroutinePerRun/Throughput/groups=1", 0},
	{"Throughput/groups=1000", "GoroutinePerRun/Throughput/groups=1000", 0},
	{"Throughput/groups=100000", "GoroutinePerRun/Throughput/groups=100000", 0},
}

var line = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op`)

func main() {
	in := io.Reader(os.Stdin)
	if len(os.Args) > 1 {
		f, err := os.Open(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "ratios:", err)
			os.Exit(1)
		}
		defer f.Close()
		in = f
	}
	samples, err := parse(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratios:", err)
		os.Exit(1)
	}
	fmt.Printf("%-28s %-42s %10s %10s %7s %s\n", "benchmark", "baseline", "ns/op", "base", "ratio", "target")
	for _, p := range pairs {
		a, okA := samples[p.name]
		b, okB := samples[p.base]
		if !okA || !okB {
			continue
		}
		ma, mb := median(a), median(b)
		target := ""
		if p.target > 0 {
			target = fmt.Sprintf("<= %gx", p.target)
		}
		fmt.Printf("%-28s %-42s %10.1f %10.1f %6.2fx %s\n", p.name, p.base, ma, mb, ma/mb, target)
	}
}

// parse collects the ns/op samples of each benchmark.
func parse(r io.Reader) (map[string][]float64, error) {
	out := map[string][]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := line.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, fmt.Errorf("bad ns/op in %q: %w", sc.Text(), err)
		}
		out[m[1]] = append(out[m[1]], v)
	}
	return out, sc.Err()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
