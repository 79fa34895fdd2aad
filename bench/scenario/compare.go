package scenario

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// A Ratio sets one measured variant of a base system beside the same
// variant on a peer.
type Ratio struct {
	Key        string // scenario and variant
	Base, Peer Result
	// Throughput is base ops/s over peer ops/s: above 1, the base is
	// faster. P99 is base p99 over peer p99: below 1, the base's tail is
	// shorter.
	Throughput, P99 float64
}

// Ratios pairs every result of base with the same scenario and variant
// of each peer, in the order of rs.
func Ratios(rs []Result, base string, peers []string) []Ratio {
	byKey := map[string]map[string]Result{}
	var keys []string
	for _, r := range rs {
		if byKey[r.Key()] == nil {
			byKey[r.Key()] = map[string]Result{}
			keys = append(keys, r.Key())
		}
		byKey[r.Key()][r.System] = r
	}
	var out []Ratio
	for _, k := range keys {
		b, ok := byKey[k][base]
		if !ok {
			continue
		}
		for _, p := range peers {
			pr, ok := byKey[k][p]
			if !ok {
				continue
			}
			out = append(out, Ratio{Key: k, Base: b, Peer: pr,
				Throughput: div(b.OpsPerSec, pr.OpsPerSec), P99: div(float64(b.P99), float64(pr.P99))})
		}
	}
	return out
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// CompareTable renders ratios as a Markdown table.
func CompareTable(rs []Ratio) string {
	var b strings.Builder
	b.WriteString("| scenario | variant | peer | ops/s | peer ops/s | **throughput ratio** | p99 | peer p99 | **p99 ratio** | allocs/op | peer allocs/op |\n")
	b.WriteString("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | **%s** | %s | %s | **%s** | %.1f | %.1f |\n",
			r.Base.Scenario, r.Base.Variant, r.Peer.System,
			Count(r.Base.OpsPerSec), Count(r.Peer.OpsPerSec), ratio(r.Throughput),
			Latency(r.Base.P99), Latency(r.Peer.P99), ratio(r.P99),
			r.Base.AllocsPerOp, r.Peer.AllocsPerOp)
	}
	return b.String()
}

func ratio(v float64) string {
	if v == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", v)
}

// PrintRatios writes the ratios as aligned text.
func PrintRatios(w io.Writer, rs []Ratio) {
	fmt.Fprintf(w, "%-16s %-22s %-12s %12s %12s\n", "scenario", "variant", "peer", "ops/s ratio", "p99 ratio")
	for _, r := range rs {
		fmt.Fprintf(w, "%-16s %-22s %-12s %12s %12s\n", r.Base.Scenario, r.Base.Variant, r.Peer.System, ratio(r.Throughput), ratio(r.P99))
	}
}

// PeerDocs is the Markdown that `make bench` writes into
// docs/benchmarks.md for the comparison: where and how it was measured,
// the ratios, and each system's own figures.
func PeerDocs(rs []Result, base string, peers []string, o *Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured on %s, all systems in one process run.\n", Machine(time.Now()))
	fmt.Fprintf(&b, "Each measurement ran %v after a %v warm-up; %d round(s), interleaved, medians shown. Ratios are %s / peer: throughput above 1 and p99 below 1 favour %s.\n\n",
		o.Duration, o.Warmup, o.Rounds, base, base)
	b.WriteString(CompareTable(Ratios(rs, base, peers)))
	b.WriteString("\nEvery system's own figures:\n\n")
	b.WriteString(SystemTable(rs))
	return b.String()
}
