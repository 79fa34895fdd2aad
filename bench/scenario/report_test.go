package scenario

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMedianOdd(t *testing.T) {
	rounds := []Result{
		{Scenario: Ping, Variant: Sequential, System: "s", Ops: 10, Seconds: 1, OpsPerSec: 300, P50: 30, P99: 300, P999: 3000, AllocsPerOp: 3, BytesPerOp: 30,
			Extra: map[string]float64{ExtraCPUPercent: 5, ExtraTimers: 9}},
		{Scenario: Ping, Variant: Sequential, System: "s", Ops: 20, Seconds: 2, OpsPerSec: 100, P50: 10, P99: 100, P999: 1000, AllocsPerOp: 1, BytesPerOp: 10,
			Extra: map[string]float64{ExtraCPUPercent: 1, ExtraTimers: 9}},
		{Scenario: Ping, Variant: Sequential, System: "s", Ops: 30, Seconds: 4, OpsPerSec: 200, P50: 20, P99: 200, P999: 2000, AllocsPerOp: 2, BytesPerOp: 20,
			Extra: map[string]float64{ExtraCPUPercent: 3, ExtraTimers: 9}},
	}
	before := cloneResults(rounds)
	got := Median(rounds)
	want := Result{Scenario: Ping, Variant: Sequential, System: "s", Ops: 60, Seconds: 7, OpsPerSec: 200, P50: 20, P99: 200, P999: 2000, AllocsPerOp: 2, BytesPerOp: 20,
		Extra: map[string]float64{ExtraCPUPercent: 3, ExtraTimers: 9}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Median\n%+v\nwant\n%+v", got, want)
	}
	if !reflect.DeepEqual(rounds, before) {
		t.Errorf("Median changed its input:\n%+v\nwas\n%+v", rounds, before)
	}
}

func TestMedianEven(t *testing.T) {
	rounds := []Result{
		{Scenario: Tell, Variant: "callers=4", System: "s", Ops: 1, Seconds: 0.5, OpsPerSec: 40, P50: 41, P99: 400, P999: 4000, AllocsPerOp: 4, BytesPerOp: 40,
			Extra: map[string]float64{ExtraActivations: 4}},
		{Scenario: Tell, Variant: "callers=4", System: "s", Ops: 2, Seconds: 0.5, OpsPerSec: 10, P50: 10, P99: 100, P999: 1000, AllocsPerOp: 1, BytesPerOp: 10,
			Extra: map[string]float64{ExtraActivations: 1}},
		{Scenario: Tell, Variant: "callers=4", System: "s", Ops: 3, Seconds: 0.5, OpsPerSec: 30, P50: 30, P99: 300, P999: 3000, AllocsPerOp: 3, BytesPerOp: 30,
			Extra: map[string]float64{ExtraActivations: 3}},
		{Scenario: Tell, Variant: "callers=4", System: "s", Ops: 4, Seconds: 0.5, OpsPerSec: 20, P50: 21, P99: 200, P999: 2000, AllocsPerOp: 2, BytesPerOp: 20,
			Extra: map[string]float64{ExtraActivations: 2}},
	}
	got := Median(rounds)
	// The mean of the middle two; latencies are whole nanoseconds.
	want := Result{Scenario: Tell, Variant: "callers=4", System: "s", Ops: 10, Seconds: 2, OpsPerSec: 25, P50: 25, P99: 250, P999: 2500, AllocsPerOp: 2.5, BytesPerOp: 25,
		Extra: map[string]float64{ExtraActivations: 2.5}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Median\n%+v\nwant\n%+v", got, want)
	}
}

func TestMedianEdges(t *testing.T) {
	if got := Median(nil); !reflect.DeepEqual(got, Result{}) {
		t.Errorf("Median(nil) = %+v, want zero", got)
	}
	one := Result{Scenario: Ping, Variant: Sequential, System: "s", Ops: 5, Seconds: 1, OpsPerSec: 5, P50: 7, P99: 8, P999: 9}
	if got := Median([]Result{one}); !reflect.DeepEqual(got, one) {
		t.Errorf("Median of one = %+v, want it unchanged", got)
	}
	two := []Result{{P50: 10, Extra: nil}, {P50: 20, Extra: nil}}
	if got := Median(two); got.Extra != nil || got.P50 != 15 {
		t.Errorf("Median = %+v, want p50 15 and no Extra", got)
	}
}

func cloneResults(rs []Result) []Result {
	out := slices.Clone(rs)
	for i := range out {
		out[i].Extra = maps.Clone(out[i].Extra)
	}
	return out
}

func TestLatency(t *testing.T) {
	for _, tc := range []struct {
		ns   int64
		want string
	}{
		{0, "0 ns"},
		{1, "1 ns"},
		{999, "999 ns"},
		{1000, "1.00 µs"},
		{1234, "1.23 µs"},
		{12345, "12.3 µs"},
		{123456, "123 µs"},
		{1_000_000, "1.00 ms"},
		{2_500_000, "2.50 ms"},
		{45_600_000, "45.6 ms"},
		{789_000_000, "789 ms"},
		{int64(time.Second), "1.00 s"},
		{int64(1500 * time.Millisecond), "1.50 s"},
		{int64(time.Minute), "60.00 s"},
	} {
		if got := Latency(tc.ns); got != tc.want {
			t.Errorf("Latency(%d) = %q, want %q", tc.ns, got, tc.want)
		}
	}
}

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0.00"},
		{0.5, "0.50"},
		{5, "5.00"},
		{12, "12.0"},
		{999, "999"},
		{1000, "1.00k"},
		{1500, "1.50k"},
		{12_345, "12.3k"},
		{123_456, "123k"},
		{1e6, "1.00M"},
		{2_345_678, "2.35M"},
		{45e6, "45.0M"},
		{123e6, "123M"},
	} {
		if got := Count(tc.v); got != tc.want {
			t.Errorf("Count(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// TestFormatRoundingIntoNextUnit: Latency and Count promise three
// significant digits, but a value that rounds up to the next power of ten
// gets four, and stays in the unit below ("1000 µs" for 999,999 ns).
func TestFormatRoundingIntoNextUnit(t *testing.T) {
	for _, tc := range []struct {
		ns   int64
		want string
	}{
		{9_999, "10.0 µs"},
		{99_999, "100 µs"},
		{999_999, "1.00 ms"},
		{999_999_999, "1.00 s"},
	} {
		if got := Latency(tc.ns); got != tc.want {
			t.Errorf("Latency(%d) = %q, want %q", tc.ns, got, tc.want)
		}
	}
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{9.999, "10.0"},
		{999.9, "1.00k"},
		{9_999, "10.0k"},
		{999_999, "1.00M"},
	} {
		if got := Count(tc.v); got != tc.want {
			t.Errorf("Count(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestBytes(t *testing.T) {
	const k = 1024
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0 B"},
		{512, "512 B"},
		{1023, "1023 B"},
		{k, "1.0 KiB"},
		{1.5 * k, "1.5 KiB"},
		{k * k, "1.0 MiB"},
		{3.75 * k * k, "3.8 MiB"},
		{k * k * k, "1.00 GiB"},
		{2.5 * k * k * k, "2.50 GiB"},
	} {
		if got := Bytes(tc.v); got != tc.want {
			t.Errorf("Bytes(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestTable(t *testing.T) {
	rs := []Result{
		{Scenario: Ping, Variant: Sequential, System: "s", OpsPerSec: 1234, P50: 1000, P99: 2_500_000, P999: int64(2 * time.Second), AllocsPerOp: 2.25},
		{Scenario: Activations, Variant: "callers=4", System: "s", OpsPerSec: 5e6, P50: 10, P99: 20, P999: 30, AllocsPerOp: 0,
			Extra: map[string]float64{ExtraHeapBytes: 1024 * 1024, ExtraActivations: 1000, ExtraBytesPerActivation: 512}},
		{Scenario: Timers, Variant: "3 timers, period 5ms", System: "s", OpsPerSec: 600, P50: 300_000, P99: 300_000, P999: 300_000,
			Extra: map[string]float64{ExtraCPUPercent: 1.234, ExtraIdleCPUPercent: 0.5, ExtraTimers: 3}},
	}
	want := "| scenario | variant | ops/s | p50 | p99 | p99.9 | allocs/op | also |\n" +
		"| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n" +
		"| `ping` | sequential | 1.23k | 1.00 µs | 2.50 ms | 2.00 s | 2.2 |  |\n" +
		"| `activations` | callers=4 | 5.00M | 10 ns | 20 ns | 30 ns | 0.0 | activations 1.00k  bytes_per_activation 512  heap_bytes 1.0 MiB |\n" +
		"| `timers` | 3 timers, period 5ms | 600 | 300 µs | 300 µs | 300 µs | 0.0 | cpu_percent 1.23%  idle_cpu_percent 0.50%  timers 3.00 |\n"
	if got := Table(rs); got != want {
		t.Errorf("Table:\n%s\nwant:\n%s", got, want)
	}
	if got, want := Table(nil), strings.Join(strings.SplitAfter(want, "\n")[:2], ""); got != want {
		t.Errorf("Table(nil) = %q, want just the header %q", got, want)
	}
}

func TestPrint(t *testing.T) {
	for _, r := range []Result{
		{Scenario: Ping, Variant: Sequential, System: "granary", Ops: 12345, Seconds: 2.5, OpsPerSec: 4938, P50: 1500, P99: 25_000, P999: 3_000_000, AllocsPerOp: 1.5, BytesPerOp: 96},
		{Scenario: Activations, Variant: "callers=64", System: "peer", Ops: 1000, Seconds: 0.125, OpsPerSec: 8000, P50: 10, P99: 20, P999: 30,
			Extra: map[string]float64{ExtraActivations: 1000, ExtraHeapBytes: 2048, ExtraBytesPerActivation: 2.048}},
	} {
		t.Run(r.Scenario, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Print(&buf, r); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(buf.String(), "\n")
			if len(lines) != 3 || lines[2] != "" {
				t.Fatalf("printed %q, want two lines, each ending in a newline", buf.String())
			}
			human, js := lines[0], lines[1]
			// Columns are padded: compare with single spaces.
			flat := strings.Join(strings.Fields(human), " ")
			for _, want := range []string{r.Scenario, r.System, r.Variant, Count(r.OpsPerSec) + " ops/s",
				"p50 " + Latency(r.P50), "p99 " + Latency(r.P99), "p99.9 " + Latency(r.P999)} {
				if !strings.Contains(flat, want) {
					t.Errorf("human line %q lacks %q", human, want)
				}
			}
			if strings.HasPrefix(human, "{") {
				t.Errorf("human line %q looks like JSON", human)
			}
			if r.Extra != nil && !strings.HasSuffix(human, "  "+r.extraText()) {
				t.Errorf("human line %q lacks the extras %q", human, r.extraText())
			}
			if !json.Valid([]byte(js)) {
				t.Fatalf("second line %q is not JSON", js)
			}
			var back Result
			dec := json.NewDecoder(strings.NewReader(js))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, r) {
				t.Errorf("JSON round-trips to\n%+v\nwant\n%+v", back, r)
			}
			// The field names readers of the JSON rely on.
			for _, f := range []string{`"scenario":`, `"system":`, `"ops_per_sec":`, `"p50_ns":`, `"p99_ns":`, `"p999_ns":`, `"allocs_per_op":`} {
				if !strings.Contains(js, f) {
					t.Errorf("JSON %s lacks %s", js, f)
				}
			}
		})
	}
}

func writeDoc(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestReplace(t *testing.T) {
	const head = "# Benchmarks\n\nIntro.\n\n"
	const other = "<!-- bench:peers begin -->\nthe peers' table\n<!-- bench:peers end -->\n"
	const tail = "\n## Notes\n\nOutro.\n"
	doc := head + "<!-- bench:granary begin -->\nold table\nold line\n<!-- bench:granary end -->\n" + other + tail

	for _, body := range []string{"new table", "new table\n"} {
		path := writeDoc(t, doc)
		if err := Replace(path, "granary", body); err != nil {
			t.Fatal(err)
		}
		want := head + "<!-- bench:granary begin -->\nnew table\n<!-- bench:granary end -->\n" + other + tail
		if got := readDoc(t, path); got != want {
			t.Errorf("body %q: file is\n%s\nwant\n%s", body, got, want)
		}
	}

	// Replacing twice is the same as once.
	path := writeDoc(t, doc)
	for range 2 {
		if err := Replace(path, "peers", "| a | b |\n"); err != nil {
			t.Fatal(err)
		}
	}
	want := head + "<!-- bench:granary begin -->\nold table\nold line\n<!-- bench:granary end -->\n" +
		"<!-- bench:peers begin -->\n| a | b |\n<!-- bench:peers end -->\n" + tail
	if got := readDoc(t, path); got != want {
		t.Errorf("file is\n%s\nwant\n%s", got, want)
	}
}

func TestReplaceMissingMarkers(t *testing.T) {
	for name, doc := range map[string]string{
		"none":         "# Benchmarks\n\nno markers here\n",
		"begin only":   "<!-- bench:granary begin -->\nold\n",
		"end only":     "old\n<!-- bench:granary end -->\n",
		"end first":    "<!-- bench:granary end -->\nold\n<!-- bench:granary begin -->\n",
		"another name": "<!-- bench:peers begin -->\nold\n<!-- bench:peers end -->\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := writeDoc(t, doc)
			err := Replace(path, "granary", "new\n")
			if err == nil {
				t.Fatal("no error")
			}
			for _, want := range []string{path, "<!-- bench:granary begin -->", "<!-- bench:granary end -->"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err %q does not name %q", err, want)
				}
			}
			if got := readDoc(t, path); got != doc {
				t.Errorf("file changed to %q", got)
			}
		})
	}
	if err := Replace(filepath.Join(t.TempDir(), "absent.md"), "granary", "x"); !os.IsNotExist(err) {
		t.Errorf("err %v for a missing file, want not-exist", err)
	}
}

func TestOptionsScenarios(t *testing.T) {
	ok := func(names string) *Options { return &Options{Config: tinyConfig(), Names: names, Rounds: 1} }

	got, err := ok("all").Scenarios()
	if err != nil || !slices.Equal(got, Names()) {
		t.Errorf("all: %v, %v; want every scenario %v", got, err, Names())
	}
	got, err = ok(" ping , tell,timers ").Scenarios()
	if want := []string{Ping, Tell, Timers}; err != nil || !slices.Equal(got, want) {
		t.Errorf("list with spaces: %v, %v; want %v", got, err, want)
	}

	for _, names := range []string{"ping,nope", "nope", "", "ping,"} {
		o := ok(names)
		if _, err := o.Scenarios(); err == nil {
			t.Errorf("%q: no error", names)
		} else if bad := strings.TrimSpace(strings.Split(names, ",")[len(strings.Split(names, ","))-1]); !strings.Contains(err.Error(), `"`+bad+`"`) {
			t.Errorf("%q: err %q does not name %q", names, err, bad)
		}
	}

	for _, rounds := range []int{0, -1} {
		o := ok("all")
		o.Rounds = rounds
		if _, err := o.Scenarios(); err == nil || !strings.Contains(err.Error(), "-rounds") {
			t.Errorf("rounds %d: err %v, want one about -rounds", rounds, err)
		}
	}

	o := ok("all")
	o.TimerWindow = 0
	if _, err := o.Scenarios(); err == nil || !strings.Contains(err.Error(), "TimerWindow") {
		t.Errorf("bad config: err %v, want one naming TimerWindow", err)
	}
}

func TestRegisterFlags(t *testing.T) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := RegisterFlags(fs)
	if o.Config != DefaultConfig() || o.Names != "all" || o.Rounds != 1 {
		t.Errorf("defaults %+v, want DefaultConfig, all scenarios, one round", o)
	}
	err := fs.Parse([]string{"-scenario", "ping,tell", "-rounds", "3", "-duration", "50ms", "-warmup", "0s",
		"-callers", "7", "-senders", "2", "-tell-grains", "9", "-fanout", "11", "-activations", "100",
		"-activation-callers", "5", "-activation-limit", "1s", "-stream-subscribers", "17", "-stream-window", "64", "-timers", "13", "-timer-period", "20ms", "-timer-window", "40ms"})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{Names: "ping,tell", Rounds: 3, Config: Config{
		Duration: 50 * time.Millisecond, Warmup: 0, Callers: 7, Senders: 2, TellGrains: 9, FanoutWidth: 11,
		Activations: 100, ActivationCallers: 5, ActivationLimit: time.Second,
		StreamSubscribers: 17, StreamWindow: 64,
		Timers: 13, TimerPeriod: 20 * time.Millisecond, TimerWindow: 40 * time.Millisecond,
	}}
	if *o != want {
		t.Errorf("parsed %+v\nwant %+v", *o, want)
	}
	if names, err := o.Scenarios(); err != nil || !slices.Equal(names, []string{Ping, Tell}) {
		t.Errorf("Scenarios() = %v, %v", names, err)
	}
}

func TestMachineAndDocs(t *testing.T) {
	now := time.Date(2031, 2, 3, 23, 30, 0, 0, time.FixedZone("x", -5*3600))
	m := Machine(now)
	for _, want := range []string{runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH, "2031-02-04", "cores"} {
		if !strings.Contains(m, want) {
			t.Errorf("Machine = %q, lacks %q", m, want)
		}
	}
	rs := []Result{{Scenario: Ping, Variant: Sequential, System: "granary", OpsPerSec: 1000, P50: 1000}}
	o := &Options{Config: tinyConfig(), Rounds: 3}
	doc := GranaryDocs(rs, o)
	for _, want := range []string{"Measured on ", "20ms after a 0s warm-up; 3 round(s)", Table(rs)} {
		if !strings.Contains(doc, want) {
			t.Errorf("GranaryDocs =\n%s\nlacks %q", doc, want)
		}
	}
}
