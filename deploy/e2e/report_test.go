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

func TestWriteMarkdown(t *testing.T) {
	fault := second{ok: [2]int{1, 0}, failed: 3}
	r, tl := testResult([]second{clean, fault, {ok: [2]int{1, 1}, dups: 1}, clean})
	tl.sample(sec(2.5), 6)
	tl.sample(sec(3.5), 4)
	r.evaluate(tl)
	var b strings.Builder
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
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
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}

	r.Failures = []string{"kill silo-b: recovered after 6s, over the 5s bound"}
	r.Screenshot, r.ScreenshotErr = "", errors.New("no Chromium found")
	b.Reset()
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**Verdict: failed.**", "- kill silo-b: recovered after 6s", "No screenshot was taken: no Chromium found."} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the failed run's report lacks %q", want)
		}
	}
}

func TestOneLine(t *testing.T) {
	if got := oneLine("a\n  b `c`", 100); got != "a b 'c'" {
		t.Errorf("oneLine = %q", got)
	}
	if got := oneLine("abcdef", 3); got != "abc..." {
		t.Errorf("oneLine = %q", got)
	}
}
