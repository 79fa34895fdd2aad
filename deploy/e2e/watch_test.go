package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0B", 0, true},
		{"512B", 512, true},
		{"1.5KiB", 1536, true},
		{"45.5MiB", 47710208, true},
		{" 2GiB ", 2 << 30, true},
		{"1.2GB", 1.2e9, true},
		{"3kB", 3000, true},
		{"MiB", 0, false},
		{"12", 0, false},
		{"12XB", 0, false},
		{"1.2.3MiB", 0, false},
	}
	for _, tt := range tests {
		got, err := parseBytes(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseDockerStats(t *testing.T) {
	out := "abc123\t45.5MiB / 23.47GiB\t103.25%\n" +
		"def456\t0B / 0B\t0.00%\n\n"
	got, err := parseDockerStats(out)
	if err != nil {
		t.Fatal(err)
	}
	if u := got["abc123"]; u.Mem != uint64(45.5*(1<<20)) || u.CPU != 103.25 {
		t.Errorf("abc123: %+v, want 45.5MiB and 103.25%%", u)
	}
	if u, ok := got["def456"]; !ok || u.Mem != 0 || u.CPU != 0 {
		t.Errorf("def456 (stopped): %+v, %v", u, ok)
	}
	for _, bad := range []string{"", "abc 45MiB", "abc\t45 lots / 1GiB\t1%", "abc\t45MiB / 1GiB\tlots"} {
		if _, err := parseDockerStats(bad); err == nil {
			t.Errorf("parseDockerStats(%q): no error", bad)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP granary_shed_requests_total Requests refused by load shedding.
# TYPE granary_shed_requests_total counter
granary_shed_requests_total 42
granary_activations{type="cluster.Counter"} 1200
granary_activations{type="odd}type \"quoted\""} 5
granary_load_shedding 1 1700000000000
go_memstats_heap_alloc_bytes 3.5e+07
granary_grain_call_duration_seconds_bucket{le="+Inf"} 9
broken{type="unclosed 3
garbage line
`
	m := parseMetrics(text)
	want := map[string]float64{
		metricShed:        42,
		metricActivations: 1205, // summed over its labels, a brace in a quoted value included
		metricShedding:    1,    // a timestamp after the value is ignored
		metricHeap:        35e6,
		"granary_grain_call_duration_seconds_bucket": 9,
	}
	for name, v := range want {
		if m[name] != v {
			t.Errorf("%s = %v, want %v", name, m[name], v)
		}
	}
	if len(m) != len(want) {
		t.Errorf("parsed %v, want only %v", m, want)
	}
}

func TestSiloWatchDelta(t *testing.T) {
	w := siloWatch{Start: map[string]float64{metricShed: 10}, End: map[string]float64{metricShed: 25, metricQueueRefusals: 3}}
	if d, ok := w.delta(metricShed); !ok || d != 15 {
		t.Errorf("delta(shed) = %v, %v; want 15", d, ok)
	}
	if _, ok := w.delta(metricQueueRefusals); ok {
		t.Error("a counter missing from the start scrape has no delta")
	}
	if got := formatDelta(&w, metricMemoryCollections); got != "not exported" {
		t.Errorf("formatDelta of a missing metric = %q", got)
	}
}

// TestWatcher drives the watcher with a fake clock and scripted answers:
// the start scrape, a sample at once and one a second later, the end
// scrape.
func TestWatcher(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clock := clockwork.NewFakeClockAt(t0)
	silos := []silo{{Service: "silo-a", Container: "ca", Admin: "a:1"}, {Service: "silo-b", Container: "cb", Admin: "b:1"}}
	var mu sync.Mutex
	usageCalls, scrapes := 0, map[string]int{}
	sampled := make(chan string, 16)
	w := &watcher{clock: clock, silos: silos,
		usage: func(_ context.Context, ids ...string) (map[string]usage, error) {
			mu.Lock()
			defer mu.Unlock()
			usageCalls++
			defer func() { sampled <- "usage" }()
			if usageCalls == 1 {
				// silo-b's container is missing from the first answer.
				return map[string]usage{"ca": {Mem: 100 << 20, CPU: 50, HasCPU: true}}, nil
			}
			return map[string]usage{"ca": {Mem: 80 << 20, CPU: 30, HasCPU: true}, "cb": {Mem: 60 << 20}}, nil
		},
		metrics: func(_ context.Context, admin string) (map[string]float64, error) {
			mu.Lock()
			defer mu.Unlock()
			scrapes[admin]++
			n := scrapes[admin]
			defer func() { sampled <- "metrics " + admin }()
			if admin == "b:1" && n == 2 {
				return nil, errors.New("timed out")
			}
			return map[string]float64{metricShed: float64(10 * n), metricShedding: float64(n % 2), metricRSS: float64(n << 20),
				metricHeap: float64(n << 19), metricActivations: float64(100 * n)}, nil
		},
	}
	w.start(ctx)
	// The first samples come at once, then one a second.
	await := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-sampled:
			case <-ctx.Done():
				t.Fatal("a sample did not come")
			}
		}
	}
	await(2 + 1 + 2) // the start scrapes, then a usage sample and a scrape of each silo
	if err := clock.BlockUntilContext(ctx, 2); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	await(1 + 2)
	got, memErr := w.stop(ctx)
	if memErr != nil {
		t.Errorf("memory error %v", memErr)
	}
	a, b := got[0], got[1]
	if a.Service != "silo-a" || a.MemMax != 100<<20 || a.MemSamples != 2 || a.CPUMax != 50 || a.CPUSum != 80 || a.CPUSamples != 2 {
		t.Errorf("silo-a: %+v", a)
	}
	if b.MemMax != 60<<20 || b.MemSamples != 1 || b.CPUSamples != 0 {
		t.Errorf("silo-b: memory %d over %d samples, %d of CPU; want 60MiB over 1, none of CPU (its first)", b.MemMax, b.MemSamples, b.CPUSamples)
	}
	// Scrapes 2 and 3 were the samples, 1 the start and 4 the end: silo-a
	// shed at sample 3, silo-b's sample 2 failed.
	if a.Scrapes != 2 || a.Missed != 0 || a.SheddingSamples != 1 || a.RSSMax != 3<<20 || a.ActivationsMax != 300 {
		t.Errorf("silo-a metrics: %+v", a)
	}
	if b.Scrapes != 2 || b.Missed != 1 || b.SheddingSamples != 1 {
		t.Errorf("silo-b metrics: scrapes %d, missed %d, shedding %d; want 2, 1, 1", b.Scrapes, b.Missed, b.SheddingSamples)
	}
	if d, ok := a.delta(metricShed); !ok || d != 30 {
		t.Errorf("silo-a shed %v (%v), want 40-10 = 30", d, ok)
	}
}

func TestParseProtection(t *testing.T) {
	compose := `
x-env: &env
  GRANARY_CLUSTER_ID: c
  GRANARY_LOAD_SHEDDING_ENABLED: "true"
  GRANARY_QUEUE_LIMITS_HARD: "100"
services:
  silo-a:
    environment:
      <<: *env
      GRANARY_NAME: silo-a
      GRANARY_MEMORY_COLLECTION_HEAP_TARGET: "5"
`
	got, err := parseProtection([]byte(compose))
	if err != nil {
		t.Fatal(err)
	}
	want := "GRANARY_LOAD_SHEDDING_ENABLED=true GRANARY_MEMORY_COLLECTION_HEAP_TARGET=5 GRANARY_QUEUE_LIMITS_HARD=100"
	if strings.Join(got, " ") != want {
		t.Errorf("parseProtection = %q, want %q", got, want)
	}
	if _, err := parseProtection([]byte("services: {}")); err == nil {
		t.Error("a compose file without silo-a: no error")
	}
}

func TestDockerSocket(t *testing.T) {
	for host, want := range map[string]string{"": "/var/run/docker.sock", "unix:///run/user/1000/docker.sock": "/run/user/1000/docker.sock", "tcp://10.0.0.1:2376": ""} {
		if got := dockerSocket(host); got != want {
			t.Errorf("dockerSocket(%q) = %q, want %q", host, got, want)
		}
	}
}

// engineStatsJSON is a container's one-shot stats as the Engine API
// writes them, cut to what the run reads.
func engineStatsJSON(read string, usage, inactiveV1, inactiveV2, cpu uint64) string {
	stats := fmt.Sprintf(`"inactive_file": %d, "rss": 1`, inactiveV2)
	if inactiveV1 > 0 {
		stats = fmt.Sprintf(`"total_inactive_file": %d, "inactive_file": 0, "rss": 1`, inactiveV1)
	}
	return fmt.Sprintf(`{"read": %q, "preread": "0001-01-01T00:00:00Z", "memory_stats": {"usage": %d, "stats": {%s}, "limit": 99},
		"cpu_stats": {"cpu_usage": {"total_usage": %d, "percpu_usage": [1, 2]}, "online_cpus": 2}}`, read, usage, stats, cpu)
}

func TestParseEngineStats(t *testing.T) {
	got, err := parseEngineStats([]byte(engineStatsJSON("2026-11-27T21:09:33.5Z", 36<<20, 24<<20, 0, 10e9)))
	if err != nil {
		t.Fatal(err)
	}
	if got.mem != 12<<20 || got.cpu != 10e9 || !got.at.Equal(time.Date(2026, 11, 27, 21, 9, 33, 5e8, time.UTC)) {
		t.Errorf("cgroup v1: %+v, want 12MiB (usage less total_inactive_file), 10s of CPU", got)
	}
	if got, _ := parseEngineStats([]byte(engineStatsJSON("2026-11-27T21:09:33Z", 36<<20, 0, 6<<20, 1))); got.mem != 30<<20 {
		t.Errorf("cgroup v2: memory %d, want 30MiB (usage less inactive_file)", got.mem)
	}
	// A stopped container's stats carry a zero read time.
	if _, err := parseEngineStats([]byte(`{"read": "0001-01-01T00:00:00Z", "memory_stats": {}}`)); err == nil {
		t.Error("stats without a read time: no error")
	}
	if _, err := parseEngineStats([]byte("not json")); err == nil {
		t.Error("not JSON: no error")
	}
}

// TestEngine serves the Engine API on a Unix socket: two samples of a
// container make its CPU use, and a missing container is left out.
func TestEngine(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1.41/containers/gone/stats" {
			http.Error(w, `{"message":"No such container: gone"}`, http.StatusNotFound)
			return
		}
		if r.URL.Path != "/v1.41/containers/c1/stats" || r.URL.Query().Get("one-shot") != "true" || r.URL.Query().Get("stream") != "false" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		// Half a core between the samples: 250ms of CPU in 500ms.
		read := t0.Add(time.Duration(i) * 500 * time.Millisecond).Format(time.RFC3339Nano)
		fmt.Fprint(w, engineStatsJSON(read, uint64(40+i)<<20, 20<<20, 0, uint64(i)*250e6))
	})}
	go srv.Serve(l)
	defer srv.Close()

	e := newEngine(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := e.containerUsage(ctx, "c1", "gone")
	if err != nil {
		t.Fatal(err)
	}
	if u := first["c1"]; u.Mem != 21<<20 || u.HasCPU {
		t.Errorf("first sample %+v, want 21MiB and no CPU yet", u)
	}
	if _, ok := first["gone"]; ok {
		t.Error("a missing container has a sample")
	}
	second, err := e.containerUsage(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if u := second["c1"]; u.Mem != 22<<20 || !u.HasCPU || u.CPU != 50 {
		t.Errorf("second sample %+v, want 22MiB and 50%% of a core", u)
	}
	if _, err := e.containerUsage(ctx, "gone"); err == nil || !strings.Contains(err.Error(), "No such container") {
		t.Errorf("only a missing container: %v, want its error", err)
	}
}
