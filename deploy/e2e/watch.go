package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// How the soak watches the silos' memory. The image is FROM scratch, so
// nothing can run inside a container to read /proc; the run asks Docker,
// from outside, which a silo too busy to answer cannot skip. Docker
// reports a container's memory as its cgroup counts it, less the page
// cache the kernel may drop (the inactive file pages): the working set,
// which a memory limit and the OOM killer go by. For a static binary that
// reads no files, that is the process's resident memory plus a little
// active page cache. The silos' own figure, process_resident_memory_bytes
// on /metrics, is reported beside it.
//
// The run asks the Docker Engine API on its Unix socket for one-shot
// stats (GET /containers/ID/stats?stream=false&one-shot=true, API 1.41),
// which answer at once with the cgroup's figures. docker stats
// --no-stream answers the same figures, but waits for a second reading
// to compute CPU, and took 3 s a call on a loaded two-core machine: too
// slow to sample every second. It is the fallback when the daemon is not
// on a local socket.
const (
	memoryMethodAPI = "the Docker Engine API's one-shot container stats (`GET /containers/ID/stats?stream=false&one-shot=true` on the Docker socket): the cgroup's memory usage less its inactive page cache, as `docker stats` counts it"
	memoryMethodCLI = "`docker stats --no-stream`: the cgroup's memory usage less its inactive page cache"
)

// dockerSocket returns the Unix socket of the Docker daemon that
// DOCKER_HOST (host) names, the default one when it is empty, and ""
// when the daemon is elsewhere.
func dockerSocket(host string) string {
	switch {
	case host == "":
		return "/var/run/docker.sock"
	case strings.HasPrefix(host, "unix://"):
		return strings.TrimPrefix(host, "unix://")
	}
	return ""
}

// engine reads containers' stats from the Docker Engine API. CPU use is
// the growth of the container's CPU time between two of its samples, so
// a container's first sample has none. Its methods may be called from
// any goroutine.
type engine struct {
	hc *http.Client

	mu   sync.Mutex
	last map[string]cpuMark // the previous sample's CPU time, by container
}

// cpuMark is a container's CPU time, in nanoseconds, read at at.
type cpuMark struct {
	at    time.Time
	total uint64
}

func newEngine(socket string) *engine {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &engine{hc: &http.Client{Transport: tr}, last: map[string]cpuMark{}}
}

// containerUsage samples the containers ids at once, by ID as given.
func (e *engine) containerUsage(ctx context.Context, ids ...string) (map[string]usage, error) {
	out := make(map[string]usage, len(ids))
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			u, err := e.sample(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			out[id] = u
		})
	}
	wg.Wait()
	if len(out) == 0 {
		return nil, firstErr
	}
	return out, nil
}

func (e *engine) sample(ctx context.Context, id string) (usage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/v1.41/containers/"+id+"/stats?stream=false&one-shot=true", nil)
	if err != nil {
		return usage{}, err
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return usage{}, fmt.Errorf("docker engine stats of %s: %w", id, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return usage{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return usage{}, fmt.Errorf("docker engine stats of %s: %s: %s", id, resp.Status, strings.TrimSpace(string(body)))
	}
	st, err := parseEngineStats(body)
	if err != nil {
		return usage{}, fmt.Errorf("docker engine stats of %s: %w", id, err)
	}
	u := usage{Mem: st.mem}
	e.mu.Lock()
	defer e.mu.Unlock()
	if prev, ok := e.last[id]; ok && st.at.After(prev.at) && st.cpu >= prev.total {
		u.CPU = 100 * float64(st.cpu-prev.total) / float64(st.at.Sub(prev.at))
		u.HasCPU = true
	}
	e.last[id] = cpuMark{at: st.at, total: st.cpu}
	return u, nil
}

// engineStats is what the soak reads of one container's stats.
type engineStats struct {
	at  time.Time // when the daemon read them
	mem uint64    // the working set: usage less inactive page cache
	cpu uint64    // the container's CPU time, in nanoseconds
}

// parseEngineStats reads the Engine API's stats of one container. The
// memory is usage less inactive file pages, as docker stats computes it:
// total_inactive_file on cgroup v1, inactive_file on v2.
func parseEngineStats(body []byte) (engineStats, error) {
	var raw struct {
		Read        time.Time `json:"read"`
		MemoryStats struct {
			Usage uint64            `json:"usage"`
			Stats map[string]uint64 `json:"stats"`
		} `json:"memory_stats"`
		CPUStats struct {
			CPUUsage struct {
				TotalUsage uint64 `json:"total_usage"`
			} `json:"cpu_usage"`
		} `json:"cpu_stats"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return engineStats{}, err
	}
	if raw.Read.IsZero() {
		return engineStats{}, errors.New("no read time: is the container running?")
	}
	m := raw.MemoryStats
	mem := m.Usage
	if v, ok := m.Stats["total_inactive_file"]; ok && v < mem {
		mem -= v
	} else if v, ok := m.Stats["inactive_file"]; ok && v < mem {
		mem -= v
	}
	return engineStats{at: raw.Read, mem: mem, cpu: raw.CPUStats.CPUUsage.TotalUsage}, nil
}

// usage is one sample of a container.
type usage struct {
	Mem    uint64  // bytes
	CPU    float64 // percent of one core, since the previous sample
	HasCPU bool    // CPU is known: not the engine's first sample
}

// containerUsage asks docker stats once for the memory and CPU use of
// the containers ids, by ID as given.
func (d dockerCLI) containerUsage(ctx context.Context, ids ...string) (map[string]usage, error) {
	out, err := d.do(ctx, append([]string{"stats", "--no-stream", "--format", "{{.Container}}\t{{.MemUsage}}\t{{.CPUPerc}}"}, ids...)...)
	if err != nil {
		return nil, err
	}
	return parseDockerStats(out)
}

// parseDockerStats reads docker stats lines "ID<tab>USED / LIMIT<tab>CPU%".
func parseDockerStats(out string) (map[string]usage, error) {
	m := map[string]usage{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("docker stats: %q is not ID<tab>USED / LIMIT<tab>CPU%%", line)
		}
		id := strings.TrimSpace(f[0])
		used, _, _ := strings.Cut(f[1], "/")
		n, err := parseBytes(used)
		if err != nil {
			return nil, fmt.Errorf("docker stats: %s: %w", id, err)
		}
		cpu, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(f[2]), "%"), 64)
		if err != nil {
			return nil, fmt.Errorf("docker stats: %s: CPU %q: %w", id, f[2], err)
		}
		m[id] = usage{Mem: n, CPU: cpu, HasCPU: true}
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("docker stats: no container in %q", out)
	}
	return m, nil
}

// byteUnits are the units Docker writes sizes in: binary ones for
// memory use (go-units' BytesSize), decimal ones elsewhere (HumanSize).
var byteUnits = map[string]float64{
	"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
	"kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
}

// parseBytes reads a size as Docker writes it, such as 12.5MiB or 0B.
func parseBytes(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("size %q: no number and unit", s)
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	unit, ok := byteUnits[strings.TrimSpace(s[i:])]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit", s)
	}
	return uint64(v * unit), nil
}

// The metrics the soak reads on each silo's /metrics.
const (
	metricShed              = "granary_shed_requests_total"
	metricQueueRefusals     = "granary_queue_limit_refusals_total"
	metricWaitRefusals      = "granary_queue_wait_refusals_total"
	metricLimitRefusals     = "granary_concurrency_limit_refusals_total"
	metricMemoryCollections = "granary_memory_collections_total"
	metricShedding          = "granary_load_shedding"
	metricActivations       = "granary_activations"
	metricHeap              = "go_memstats_heap_alloc_bytes"
	metricRSS               = "process_resident_memory_bytes"
)

// parseMetrics reads Prometheus' text exposition format and sums each
// metric's series over their labels; a histogram's or summary's series
// keep their suffixed names. Lines it cannot read are skipped: a scrape
// is evidence for a report, and the metrics the soak asserts on are
// counters and gauges of one number a line.
func parseMetrics(text string) map[string]float64 {
	m := map[string]float64{}
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ \t"); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			end := labelsEnd(rest)
			if end < 0 {
				continue
			}
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest) // the value, then perhaps a timestamp
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		m[name] += v
	}
	return m
}

// labelsEnd returns the index of the brace that closes the label set s
// opens, past quoted values that may hold braces and escaped quotes; -1
// when it is not closed.
func labelsEnd(s string) int {
	quoted := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return i
		}
	}
	return -1
}

// scrape GETs a silo's /metrics over HTTPS; its probes and metrics need
// no token.
func scrape(ctx context.Context, hc *http.Client, admin string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET https://%s/metrics: %s", admin, resp.Status)
	}
	return parseMetrics(string(body)), nil
}

// siloWatch is what the soak saw of one silo.
type siloWatch struct {
	Service string
	// MemMax is the most memory Docker reported of the container, over
	// MemSamples samples; CPUMax the most CPU, and CPUSum the sum of the
	// CPUSamples samples' CPU, in percent of one core.
	MemMax         uint64
	MemSamples     int
	CPUMax, CPUSum float64
	CPUSamples     int
	// From /metrics, sampled once a second: the most resident memory the
	// process reported, the largest Go heap, the most activations, and
	// how many samples found the silo shedding load.
	RSSMax, HeapMax  uint64
	ActivationsMax   int
	SheddingSamples  int
	Scrapes, Missed  int
	Start, End       map[string]float64 // the metrics at the start and the end; nil when the scrape failed
	StartErr, EndErr error
}

// delta is how much counter name grew over the soak, and false when
// either scrape lacks it: the silo does not export it.
func (w *siloWatch) delta(name string) (float64, bool) {
	a, okA := w.Start[name]
	b, okB := w.End[name]
	if !okA || !okB {
		return 0, false
	}
	return b - a, true
}

// watcher samples the silos' memory and metrics once a second, from
// start to stop.
type watcher struct {
	clock   clockwork.Clock
	silos   []silo
	usage   func(ctx context.Context, ids ...string) (map[string]usage, error)
	metrics func(ctx context.Context, admin string) (map[string]float64, error)

	mu      sync.Mutex
	watches []siloWatch // by the index of silos
	memErr  error       // the last failure of docker stats

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newWatcher returns a watcher of silos that asks the Docker daemon on
// socket for their stats, or docker stats when socket is "", and their
// admin servers for /metrics with tlsConf. It says which way memory is
// read, for the report.
func newWatcher(clock clockwork.Clock, silos []silo, d dockerCLI, socket string, tlsConf *tls.Config) (*watcher, string) {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}}
	w := &watcher{clock: clock, silos: silos, usage: d.containerUsage,
		metrics: func(ctx context.Context, admin string) (map[string]float64, error) { return scrape(ctx, hc, admin) }}
	if socket == "" {
		return w, memoryMethodCLI
	}
	w.usage = newEngine(socket).containerUsage
	return w, memoryMethodAPI
}

// start scrapes every silo's metrics once, as the start of the counters,
// then samples in the background until stop.
func (w *watcher) start(ctx context.Context) {
	w.watches = make([]siloWatch, len(w.silos))
	w.scrapeAll(ctx, func(sw *siloWatch, m map[string]float64, err error) { sw.Start, sw.StartErr = m, err })
	for i, s := range w.silos {
		w.watches[i].Service = s.Service
	}
	ctx, w.cancel = context.WithCancel(ctx)
	w.wg.Go(func() { w.every(ctx, w.sampleUsage) })
	w.wg.Go(func() { w.every(ctx, w.sampleMetrics) })
}

// stop ends the sampling, scrapes the metrics a last time, and returns
// what was seen.
func (w *watcher) stop(ctx context.Context) ([]siloWatch, error) {
	w.cancel()
	w.wg.Wait()
	w.scrapeAll(ctx, func(sw *siloWatch, m map[string]float64, err error) { sw.End, sw.EndErr = m, err })
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.watches, w.memErr
}

// every runs f once a second until ctx ends. A sample that takes longer
// than a second (docker stats may) delays the next: ticks are dropped,
// not queued.
func (w *watcher) every(ctx context.Context, f func(ctx context.Context)) {
	tk := w.clock.NewTicker(time.Second)
	defer tk.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tk.Chan():
		}
	}
}

func (w *watcher) sampleUsage(ctx context.Context) {
	ids := make([]string, len(w.silos))
	for i, s := range w.silos {
		ids[i] = s.Container
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := w.usage(ctx, ids...)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			w.memErr = err
		}
		return
	}
	for i, s := range w.silos {
		if u, ok := got[s.Container]; ok {
			sw := &w.watches[i]
			sw.MemMax = max(sw.MemMax, u.Mem)
			sw.MemSamples++
			if u.HasCPU {
				sw.CPUMax = max(sw.CPUMax, u.CPU)
				sw.CPUSum += u.CPU
				sw.CPUSamples++
			}
		}
	}
}

func (w *watcher) sampleMetrics(ctx context.Context) {
	w.scrapeAll(ctx, func(sw *siloWatch, m map[string]float64, err error) {
		sw.Scrapes++
		if err != nil {
			sw.Missed++
			return
		}
		sw.RSSMax = max(sw.RSSMax, uint64(m[metricRSS]))
		sw.HeapMax = max(sw.HeapMax, uint64(m[metricHeap]))
		sw.ActivationsMax = max(sw.ActivationsMax, int(m[metricActivations]))
		if m[metricShedding] > 0 {
			sw.SheddingSamples++
		}
	})
}

// scrapeAll scrapes every silo at once, each bounded by a second, and
// hands each answer to f under the lock.
func (w *watcher) scrapeAll(ctx context.Context, f func(sw *siloWatch, m map[string]float64, err error)) {
	var wg sync.WaitGroup
	for i, s := range w.silos {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			m, err := w.metrics(ctx, s.Admin)
			w.mu.Lock()
			defer w.mu.Unlock()
			f(&w.watches[i], m, err)
		})
	}
	wg.Wait()
}
