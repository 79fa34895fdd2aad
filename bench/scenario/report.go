package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Print writes r as one line for people, then as one line of JSON.
func Print(w io.Writer, r Result) error {
	line := fmt.Sprintf("%-16s %-12s %-22s %8s ops/s  p50 %9s  p99 %9s  p99.9 %9s  %7.1f allocs/op  cpu/op %9s",
		r.Scenario, r.System, r.Variant, Count(r.OpsPerSec), Latency(r.P50), Latency(r.P99), Latency(r.P999), r.AllocsPerOp, Latency(int64(r.CPUPerOp)))
	if x := r.extraText(); x != "" {
		line += "  " + x
	}
	js, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n%s\n", line, js)
	return err
}

// extraText lists r.Extra as text, in a fixed order.
func (r Result) extraText() string {
	var parts []string
	for _, k := range sortedKeys(r.Extra) {
		v := r.Extra[k]
		switch k {
		case ExtraCPUPercent, ExtraIdleCPUPercent:
			parts = append(parts, fmt.Sprintf("%s %.2f%%", k, v))
		case ExtraHeapBytes:
			parts = append(parts, fmt.Sprintf("%s %s", k, Bytes(v)))
		default:
			parts = append(parts, fmt.Sprintf("%s %s", k, Count(v)))
		}
	}
	return strings.Join(parts, "  ")
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Latency formats nanoseconds with three significant digits.
func Latency(ns int64) string {
	v := round3(float64(ns))
	switch {
	case v < 1e3:
		return strconv.FormatFloat(v, 'f', 0, 64) + " ns"
	case v < 1e6:
		return strconv.FormatFloat(v/1e3, 'f', decimals(v/1e3), 64) + " µs"
	case v < 1e9:
		return strconv.FormatFloat(v/1e6, 'f', decimals(v/1e6), 64) + " ms"
	default:
		return strconv.FormatFloat(v/1e9, 'f', 2, 64) + " s"
	}
}

// round3 rounds v to three significant digits, so that the unit is chosen
// after rounding: 999,999 ns is "1.00 ms", not "1000 µs".
func round3(v float64) float64 {
	if v == 0 {
		return 0
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*p) / p
}

// decimals keeps three significant digits for v in [1, 1000).
func decimals(v float64) int {
	switch {
	case v < 10:
		return 2
	case v < 100:
		return 1
	default:
		return 0
	}
}

// Count formats a rate or count with a k or M suffix, to three
// significant digits.
func Count(v float64) string {
	v = round3(v)
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', decimals(v/1e6), 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', decimals(v/1e3), 64) + "k"
	default:
		return strconv.FormatFloat(v, 'f', decimals(max(v, 1)), 64)
	}
}

// Bytes formats a size in B, KiB, MiB or GiB.
func Bytes(v float64) string {
	const k = 1024.0
	switch {
	case v >= k*k*k:
		return strconv.FormatFloat(v/(k*k*k), 'f', 2, 64) + " GiB"
	case v >= k*k:
		return strconv.FormatFloat(v/(k*k), 'f', 1, 64) + " MiB"
	case v >= k:
		return strconv.FormatFloat(v/k, 'f', 1, 64) + " KiB"
	default:
		return strconv.FormatFloat(v, 'f', 0, 64) + " B"
	}
}

// Median summarises rounds of the same scenario, variant and system: each
// figure is the median of that figure over the rounds. Ops and Seconds
// are summed.
func Median(rounds []Result) Result {
	if len(rounds) == 0 {
		return Result{}
	}
	r := rounds[0]
	r.Ops, r.Seconds = 0, 0
	for _, x := range rounds {
		r.Ops += x.Ops
		r.Seconds += x.Seconds
	}
	r.OpsPerSec = median(rounds, func(x Result) float64 { return x.OpsPerSec })
	r.P50 = int64(median(rounds, func(x Result) float64 { return float64(x.P50) }))
	r.P99 = int64(median(rounds, func(x Result) float64 { return float64(x.P99) }))
	r.P999 = int64(median(rounds, func(x Result) float64 { return float64(x.P999) }))
	r.AllocsPerOp = median(rounds, func(x Result) float64 { return x.AllocsPerOp })
	r.BytesPerOp = median(rounds, func(x Result) float64 { return x.BytesPerOp })
	r.CPUPerOp = median(rounds, func(x Result) float64 { return x.CPUPerOp })
	if r.Extra != nil {
		extra := make(map[string]float64, len(r.Extra))
		for k := range r.Extra {
			extra[k] = median(rounds, func(x Result) float64 { return x.Extra[k] })
		}
		r.Extra = extra
	}
	return r
}

func median(rs []Result, f func(Result) float64) float64 {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 1 {
		return vs[n/2]
	} else {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
}

// Key identifies a measured variant: scenario and variant, without the
// system.
func (r Result) Key() string { return r.Scenario + " " + r.Variant }

// Machine describes where the figures were measured: CPU model, cores,
// memory, Go version and date.
func Machine(now time.Time) string {
	return fmt.Sprintf("%s, %d cores (GOMAXPROCS %d), %s RAM; %s %s/%s; %s",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), memTotal(),
		runtime.Version(), runtime.GOOS, runtime.GOARCH, now.UTC().Format("2006-01-02"))
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// memTotal is MemTotal of /proc/meminfo.
func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err == nil {
				return Bytes(kb * 1024)
			}
		}
	}
	return "unknown"
}

// Table renders results as a Markdown table: one row per result.
func Table(rs []Result) string { return resultTable(rs, false) }

// SystemTable is Table with a column naming each result's system.
func SystemTable(rs []Result) string { return resultTable(rs, true) }

func resultTable(rs []Result, withSystem bool) string {
	var b strings.Builder
	sysHead, sysRule := "", ""
	if withSystem {
		sysHead, sysRule = " system |", " --- |"
	}
	fmt.Fprintf(&b, "| scenario | variant |%s ops/s | p50 | p99 | p99.9 | allocs/op | also |\n", sysHead)
	fmt.Fprintf(&b, "| --- | --- |%s ---: | ---: | ---: | ---: | ---: | --- |\n", sysRule)
	for _, r := range rs {
		sys := ""
		if withSystem {
			sys = " " + r.System + " |"
		}
		fmt.Fprintf(&b, "| `%s` | %s |%s %s | %s | %s | %s | %.1f | %s |\n",
			r.Scenario, r.Variant, sys, Count(r.OpsPerSec), Latency(r.P50), Latency(r.P99), Latency(r.P999), r.AllocsPerOp, r.extraText())
	}
	return b.String()
}

// Replace rewrites the part of the Markdown file at path between the
// lines "<!-- bench:NAME begin -->" and "<!-- bench:NAME end -->" with
// body. The markers must be there already.
func Replace(path, name, body string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin := []byte("<!-- bench:" + name + " begin -->\n")
	end := []byte("<!-- bench:" + name + " end -->")
	i := bytes.Index(data, begin)
	j := bytes.Index(data, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q markers to replace between", path, strings.TrimSpace(string(begin)), end)
	}
	var out bytes.Buffer
	out.Write(data[:i+len(begin)])
	out.WriteString(body)
	if !strings.HasSuffix(body, "\n") {
		out.WriteByte('\n')
	}
	out.Write(data[j:])
	return os.WriteFile(path, out.Bytes(), 0o644)
}
