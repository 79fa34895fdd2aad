package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// testResult is a run over a scripted timeline: a steady second, a fault
// that fails calls for two seconds, and a clean tail.
func testResult(secs []second) (*result, *timeline) {
	tl := buildTimeline(secs)
	r := &result{
		Started: t0, Elapsed: 95 * time.Second, Compose: "compose -f deploy/compose.yaml -p granary-e2e up -d",
		Image: "granary/example-silo:dev", Load: loadConfig{Workers: 2, Counters: 4, CallTimeout: 2 * time.Second, Backoff: 50 * time.Millisecond},
		Chaos: testChaosConfig, Client: "test client", Bound: 5 * time.Second,
		Phases:     []phase{{Name: "steady state", Action: "none", Start: 0, End: 1}, {Name: "kill silo-b", Action: "docker kill", Start: 1, End: len(secs)}},
		Final:      finalCheck{Counters: 4, Acked: 100, Sent: 103, Final: 101},
		Restarts:   map[string]int{"silo-a": 0, "silo-b": 0, "silo-c": 0},
		Screenshot: "resilience-dashboard.png",
	}
	return r, tl
}

func TestEvaluate(t *testing.T) {
	fault := second{ok: [2]int{1, 0}, failed: 3}
	tests := []struct {
		name   string
		secs   []second
		change func(r *result)
		want   []string // the failures, in part
	}{
		{name: "a run that passes", secs: []second{clean, fault, fault, clean, clean}},
		{name: "recovery over the bound", secs: []second{clean, fault, fault, fault, fault, fault, fault, clean},
			want: []string{"kill silo-b: recovered after 6s, over the 5s bound"}},
		{name: "still failing at the end", secs: []second{clean, fault, fault},
			want: []string{"kill silo-b: calls were still failing or stalled"}},
		{name: "lost replies", secs: []second{clean, {ok: [2]int{1, 1}, lost: 2}, clean},
			want: []string{"kill silo-b: 2 replies carried a count below an acknowledged one"}},
		{name: "the final read", secs: []second{clean, clean},
			change: func(r *result) {
				r.Final.LostCounters, r.Final.LostAdds, r.Final.OverCounters = 2, 5, 1
				r.Final.Unread = []string{"e2e-001: unavailable"}
			},
			want: []string{"final read: 2 counters lost 5 acknowledged Adds", "final read: 1 counters exceed", "final read: 1 counters could not be read, the first: e2e-001"}},
		{name: "a silo that crashed", secs: []second{clean, clean},
			change: func(r *result) { r.Restarts["silo-c"] = 1 },
			want:   []string{"silo-c exited on its own and was restarted 1 times"}},
		{name: "a run cut short", secs: []second{clean, clean},
			change: func(r *result) { r.RunErr = errors.New("docker kill: no such container") },
			want:   []string{"the run stopped early: docker kill: no such container"}},
		{name: "a phase never watched", secs: []second{clean},
			want: []string{"kill silo-b: the run ended before the phase was watched"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, tl := testResult(tt.secs)
			if tt.change != nil {
				tt.change(r)
			}
			r.evaluate(tl)
			if len(r.Failures) != len(tt.want) {
				t.Fatalf("failures %q, want %d like %q", r.Failures, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(r.Failures[i], w) {
					t.Errorf("failure %d = %q, want it to contain %q", i, r.Failures[i], w)
				}
			}
			if r.passed() != (len(tt.want) == 0) {
				t.Errorf("passed() = %v with failures %q", r.passed(), r.Failures)
			}
		})
	}
}

// render writes r's report, failing the test if it cannot.
func render(t *testing.T, r *result) string {
	t.Helper()
	var b strings.Builder
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// wantLines checks that md holds each of wants.
func wantLines(t *testing.T, md string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	fault := second{ok: [2]int{1, 0}, failed: 3}
	r, tl := testResult([]second{clean, fault, {ok: [2]int{1, 1}, dups: 1}, clean})
	tl.sample(sec(2.5), 6)
	tl.sample(sec(3.5), 4)
	r.evaluate(tl)
	wantLines(t, render(t, r),
		"# Resilience under chaos",
		"**Verdict: passed.**",
		"| fault | injected by | calls | failed calls | recovery time | duplicates seen in replies | excess activations in silo reports | lost writes |",
		"| steady state | `none` | 6 | 0 | 0 s (no failure) | 0 | - | 0 |",
		"| kill silo-b | `docker kill` | 13 | 3 | 1 s | 1 | 2 (6 for 4 counters) | 0 |",
		"- kill silo-b: Unavailable for 3 of the 3 failed calls, such as `rpc error: code = Unavailable desc = gone`",
		"4 of 4 counters read, 103 Adds sent, 100 acknowledged",
		"![dashboard](resilience-dashboard.png)",
		"The partition rule",
		"Duplicate activations revealed by the replies over the whole run: 1. Most activations the silos reported at once: 2 (6 for 4 counters).",
	)

	r.Failures = []string{"kill silo-b: recovered after 6s, over the 5s bound"}
	r.Screenshot, r.ScreenshotErr = "", errors.New("no Chromium found")
	wantLines(t, render(t, r), "**Verdict: failed.**", "- kill silo-b: recovered after 6s", "No screenshot was taken: no Chromium found.")
}

func TestOneLine(t *testing.T) {
	if got := oneLine("a\n  b `c`", 100); got != "a b 'c'" {
		t.Errorf("oneLine = %q", got)
	}
	if got := oneLine("abcdef", 3); got != "abc..." {
		t.Errorf("oneLine = %q", got)
	}
}

// testOverload is a soak that passes: capacity 1000/s, 2000/s offered,
// refusals of both kinds, bounded latency and memory, quick recovery.
func testOverload() *overloadResult {
	cfg := overloadConfig{Prefix: "s", P99Bound: 500 * time.Millisecond, RSSBound: 256 << 20}
	cfg.setDefaults()
	var burst, over stageStats
	burst.Outcomes[outOK], burst.Outcomes[outShed] = 15000, 200
	burst.P50, burst.P99, burst.Max = 20*time.Millisecond, 80*time.Millisecond, 300*time.Millisecond
	over.Outcomes[outOK], over.Outcomes[outShed], over.Outcomes[outRefused] = 120000, 100000, 19000
	over.P50, over.P99, over.Max = 30*time.Millisecond, 250*time.Millisecond, 900*time.Millisecond
	over.LagP99, over.LagMax = 6*time.Millisecond, 40*time.Millisecond
	over.HotOK, over.HotP99 = 20000, 210*time.Millisecond
	over.Examples[outShed] = "rpc error: code = ResourceExhausted desc = granary: silo a is overloaded"
	watch := func(name string, mem uint64) siloWatch {
		return siloWatch{Service: name, MemMax: mem, MemSamples: 140, CPUMax: 70, CPUSum: 140 * 50, CPUSamples: 140, RSSMax: mem - 5<<20, HeapMax: 60 << 20,
			ActivationsMax: 30000, SheddingSamples: 80, Scrapes: 140,
			Start: map[string]float64{metricShed: 5, metricQueueRefusals: 0, metricLimitRefusals: 100, metricMemoryCollections: 0},
			End:   map[string]float64{metricShed: 40005, metricQueueRefusals: 19000, metricLimitRefusals: 400, metricMemoryCollections: 70000}}
	}
	return &overloadResult{
		Config: cfg, Capacity: 1000, Offered: 2000, MaxInFlight: 4000,
		Burst: burst, Overload: over,
		Loop:         loopCounts{Scheduled: 240000, Sent: 239000, NotSent: 1000, MaxSeen: 4000},
		Recovery:     windowStats{Calls: 3000, Failed: 12, Recovered: true, Recovery: 4 * time.Second, TopCode: "ResourceExhausted", TopCount: 12, TopExample: "overloaded", PeakActivations: -1},
		RecoveryLoad: loadConfig{Workers: 8, Counters: 64, Pace: 40 * time.Millisecond},
		RecoveryRate: 200,
		Final:        finalCheck{Counters: 96065, Acked: 123000, Sent: 124000, Final: 123100},
		Silos:        []siloWatch{watch("silo-a", 150<<20), watch("silo-b", 140<<20), watch("silo-c", 130<<20)},
	}
}

func TestEvaluateOverload(t *testing.T) {
	tests := []struct {
		name   string
		change func(o *overloadResult)
		want   []string
	}{
		{name: "a soak that passes"},
		{name: "a timeout hides a queue", change: func(o *overloadResult) {
			o.Overload.Outcomes[outDeadline] = 3
			o.Overload.Examples[outDeadline] = "context deadline exceeded"
		}, want: []string{"overload: overload: 3 calls ended neither served nor refused with ResourceExhausted (DeadlineExceeded 3, Unavailable 0, other 0), such as context deadline exceeded"}},
		{name: "a silo gone in the burst", change: func(o *overloadResult) { o.Burst.Outcomes[outUnavailable] = 1 },
			want: []string{"overload: capacity burst: 1 calls ended neither served nor refused"}},
		{name: "latency over the bound", change: func(o *overloadResult) { o.Overload.P99 = 600 * time.Millisecond },
			want: []string{"overload: the admitted calls' p99 latency 600ms is over the 500ms bound"}},
		{name: "nothing refused", change: func(o *overloadResult) { o.Overload.Outcomes[outShed], o.Overload.Outcomes[outRefused] = 0, 0 },
			want: []string{"overload: no call was refused"}},
		{name: "a generator that fell behind", change: func(o *overloadResult) { o.Loop.Sent, o.Loop.NotSent = 200000, 40000 },
			want: []string{"overload: the load generator sent 200000 of the 240000 calls due"}},
		{name: "memory over the bound", change: func(o *overloadResult) { o.Silos[1].MemMax = 300 << 20 },
			want: []string{"overload: silo-b used 300.0 MiB of memory, over the 256.0 MiB bound"}},
		{name: "no memory sample", change: func(o *overloadResult) { o.Silos[2].MemSamples = 0; o.MemErr = errors.New("docker stats: boom") },
			want: []string{"overload: silo-c: no memory sample (docker stats: boom)"}},
		{name: "slow recovery", change: func(o *overloadResult) { o.Recovery.Recovery = 11 * time.Second },
			want: []string{"overload: the cluster served normally again 11s after the load dropped, over the 10s bound"}},
		{name: "no recovery", change: func(o *overloadResult) { o.Recovery.Recovered, o.Recovery.Recovery = false, 20*time.Second },
			want: []string{"overload: calls were still failing or stalled 20s after the load dropped"}},
		{name: "lost writes", change: func(o *overloadResult) {
			o.Overload.Lost = 2
			o.Final.LostCounters, o.Final.LostAdds = 1, 1
			o.Final.Unread = []string{"s-new-00000007: unavailable"}
		}, want: []string{"overload: overload: 2 replies carried a count below an acknowledged one", "overload: final read: 1 counters lost 1 acknowledged Adds",
			"overload: final read: 1 counters could not be read, the first: s-new-00000007"}},
		{name: "stopped before the overload", change: func(o *overloadResult) {
			o.Err, o.Offered = errors.New("the capacity burst was served no call"), 0
		}, want: []string{"overload: the soak stopped early: the capacity burst was served no call"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, tl := testResult([]second{clean, clean})
			r.Overload = testOverload()
			if tt.change != nil {
				tt.change(r.Overload)
			}
			r.evaluate(tl)
			if len(r.Failures) != len(tt.want) {
				t.Fatalf("failures %q, want %d like %q", r.Failures, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(r.Failures[i], w) {
					t.Errorf("failure %d = %q, want it to contain %q", i, r.Failures[i], w)
				}
			}
		})
	}
}

func TestWriteMarkdownOverload(t *testing.T) {
	r, tl := testResult([]second{clean, clean})
	r.Overload = testOverload()
	r.Overload.Silos[2].End = map[string]float64{} // silo-c exports none of the counters
	r.Protection = []string{"GRANARY_LOAD_SHEDDING_ENABLED=true", "GRANARY_QUEUE_LIMITS_HARD=100"}
	r.evaluate(tl)
	wantLines(t, render(t, r),
		"Offered 2 times its capacity for 2m0s, the cluster refused the excess with ResourceExhausted only, kept its admitted calls' p99 latency under 500ms and every silo's memory under 256.0 MiB, and served normally again 4 s after the load dropped.",
		"## Overload",
		"The cluster served **1000 calls/s** in the capacity burst; for 2m0s it was then offered **2000 calls/s**, 2 times that, open loop: 20% of the calls to one hot counter",
		"| ended | 15200 | 239000 |",
		"| OK | 15000 | 120000 |",
		"| ResourceExhausted (shed) | 200 | 100000 |",
		"| ResourceExhausted (queue limit) | 0 | 19000 |",
		"| DeadlineExceeded | 0 | 0 |",
		"| not sent by the load generator | - | 1000 |",
		"| admitted: p50 / p99 / max latency | 20.0 ms / 80.0 ms / 300.0 ms | 30.0 ms / 250.0 ms / 900.0 ms |",
		"The admitted calls' p99 latency during the overload was 250.0 ms, against a bound of 500ms; that of the 20000 calls to the hot counter alone was 210.0 ms.",
		"The load generator started 239000 of the 240000 calls that fell due (at most 4000 in flight at once, of 4000 allowed), 6.0 ms late at the 99th percentile and 40.0 ms at most.",
		"- overload, ResourceExhausted (shed): `rpc error: code = ResourceExhausted desc = granary: silo a is overloaded`",
		"| silo-a | 150.0 MiB | 145.0 MiB | 60.0 MiB | 30000 | 70% / 50% | 80 of 140 | 40000 | 19000 | not exported | 300 | 70000 |",
		"| silo-c | 130.0 MiB | 125.0 MiB | 60.0 MiB | 30000 | 70% / 50% | 80 of 140 | not exported | not exported | not exported |",
		"every worker's calls succeeded again after **4 s** (bound 10s): 3000 calls in 20s, 12 failed, ResourceExhausted for 12 of them",
		"Final read: 96065 counters read",
		"Counters below their acknowledged Adds: 0 (0 Adds lost).",
		"### The overload soak",
		"at most 4000 in flight",
		"`GRANARY_LOAD_SHEDDING_ENABLED=true`, `GRANARY_QUEUE_LIMITS_HARD=100`",
		"**Recovery time**",
	)

	r.Overload.Recovery.Recovered = false
	wantLines(t, render(t, r), "calls were **still failing or stalled at the end of the 20s watch** (bound 10s): 3000 calls in 20s")

	r.Overload = nil
	if md := render(t, r); !strings.Contains(md, "The soak did not run: it runs with `-overload`") || strings.Contains(md, "### The overload soak") {
		t.Errorf("a run without the soak reports it as run:\n%s", md)
	}
}
