package metrics

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/transport"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/storage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var registerState = grain.NewStateSpec[*probe.RegisterState]("register", "")

// registerGrain keeps a value in persistent state.
type registerGrain struct {
	probe.UnimplementedRegisterGrain
	st *grain.State[*probe.RegisterState]
}

func (g *registerGrain) OnActivate(ctx grain.Context) error {
	g.st = registerState.Of(ctx)
	return nil
}

func (g *registerGrain) Get(grain.Context, *probe.RegisterOp) (*probe.RegisterReply, error) {
	return &probe.RegisterReply{Value: g.st.Value().Value}, nil
}

func (g *registerGrain) Set(ctx grain.Context, req *probe.RegisterOp) (*probe.RegisterReply, error) {
	g.st.Value().Value = req.Value
	if err := g.st.Write(ctx); err != nil {
		return nil, err
	}
	return &probe.RegisterReply{Value: req.Value}, nil
}

// count returns how many metrics of family name reg gathers.
func count(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	n, err := testutil.GatherAndCount(reg, name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAttachReadsSiloAtScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s := newSilo(t, m, nil, func(c *silo.Config) {
		c.Storage = map[string]storage.Provider{grain.DefaultStorage: storage.NewMemory(0)}
	})
	err = probe.RegisterRegisterGrain(s, func(grain.ID) probe.RegisterGrain { return &registerGrain{} }, grain.WithState(registerState))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Attach(s); err != nil {
		t.Fatal(err)
	}
	if err := m.Attach(s); err == nil {
		t.Fatal("attaching a second silo collector to one registry succeeded")
	}

	// Before Start: only the readiness gauge.
	const notReady = "# HELP granary_silo_ready 1 while the silo serves calls (Start has returned and Stop has not begun), else 0.\n# TYPE granary_silo_ready gauge\ngranary_silo_ready 0\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(notReady), "granary_silo_ready"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, reg, "granary_scheduler_workers") + count(t, reg, "granary_activations"); n != 0 {
		t.Fatalf("%d silo metrics before Start", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b"} {
		if _, err := probe.NewProbeRef(s, key).Call(ctx, &probe.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	r := probe.NewRegisterRef(s, "r")
	if _, err := r.Get(ctx, &probe.RegisterOp{}); err != nil { // reads the state
		t.Fatal(err)
	}
	if _, err := r.Set(ctx, &probe.RegisterOp{Value: 3}); err != nil { // writes it
		t.Fatal(err)
	}

	const want = `
# HELP granary_silo_ready 1 while the silo serves calls (Start has returned and Stop has not begun), else 0.
# TYPE granary_silo_ready gauge
granary_silo_ready 1
# HELP granary_activations Grain activations in the silo's catalog (activating, serving or deactivating), by grain type.
# TYPE granary_activations gauge
granary_activations{type="probe.Probe"} 2
granary_activations{type="probe.Register"} 1
# HELP granary_state_reads_total Grain state reads made through a storage provider, by provider.
# TYPE granary_state_reads_total counter
granary_state_reads_total{provider="default"} 1
# HELP granary_state_writes_total Grain state writes made through a storage provider, by provider.
# TYPE granary_state_writes_total counter
granary_state_writes_total{provider="default"} 1
# HELP granary_state_clears_total Grain state clears made through a storage provider, by provider.
# TYPE granary_state_clears_total counter
granary_state_clears_total{provider="default"} 0
# HELP granary_state_failures_total Grain state operations that failed (unreachable store, oversize state, ended context, stale ETag), by provider and operation.
# TYPE granary_state_failures_total counter
granary_state_failures_total{op="clear",provider="default"} 0
granary_state_failures_total{op="read",provider="default"} 0
granary_state_failures_total{op="write",provider="default"} 0
`
	names := []string{"granary_silo_ready", "granary_activations", "granary_state_reads_total", "granary_state_writes_total",
		"granary_state_clears_total", "granary_state_failures_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	procs := "# HELP granary_scheduler_processors Processors of the scheduler's pool: the most grain turns that run at once outside blocking regions.\n" +
		"# TYPE granary_scheduler_processors gauge\ngranary_scheduler_processors " + strconv.Itoa(runtime.GOMAXPROCS(0)) + "\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(procs), "granary_scheduler_processors"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{
		"granary_scheduler_turn_duration_seconds": 1,
		"granary_scheduler_steals_total":          1,
		"granary_grain_calls_total":               3, // Probe.Call, Register.Get, Register.Set
		"granary_cluster_members":                 0, // a silo alone
		"granary_transport_bytes_sent_total":      0,
		"granary_reminders_owned":                 0, // no reminder service
	} {
		if got := count(t, reg, name); got != want {
			t.Errorf("%s: %d metrics, want %d", name, got, want)
		}
	}
	// The whole registry passes Prometheus's own consistency checks.
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

// funcCollector collects what fn emits, for testing the conversions.
type funcCollector struct {
	descs []*prometheus.Desc
	fn    func(e emit)
}

func (c funcCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c funcCollector) Collect(ch chan<- prometheus.Metric) { c.fn(emit(ch)) }

func TestClusterFamilies(t *testing.T) {
	cl := &silo.ClusterStats{
		Members: 3, Active: 2, InFlight: 4,
		Directory: directory.Stats{Entries: 10, Share: 0.5, Lookups: 7, LookupCacheHits: 5, RemoteLookups: 1},
		Transport: transport.Stats{
			Streams: 2, BytesSent: 1000, BatchesSent: 3, EnvelopesSent: 9,
			BatchBounds: []uint64{1, 2, 4, 8}, BatchSizes: []uint64{1, 0, 1, 0, 1}, // 1, 3 and 5 envelopes
		},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(funcCollector{siloDescs, func(e emit) { collectCluster(e, cl) }})
	const want = `
# HELP granary_cluster_members Live members of the cluster as this silo sees them, itself included.
# TYPE granary_cluster_members gauge
granary_cluster_members 3
# HELP granary_directory_ring_share Fraction (0 to 1) of the directory ring this silo owns.
# TYPE granary_directory_ring_share gauge
granary_directory_ring_share 0.5
# HELP granary_directory_lookup_cache_hits_total Directory lookups answered by this silo's lookup cache.
# TYPE granary_directory_lookup_cache_hits_total counter
granary_directory_lookup_cache_hits_total 5
# HELP granary_transport_bytes_sent_total Bytes of frames the transport wrote to other silos and clients.
# TYPE granary_transport_bytes_sent_total counter
granary_transport_bytes_sent_total 1000
# HELP granary_transport_batch_envelopes Envelopes per frame the transport wrote: how well its writers coalesce.
# TYPE granary_transport_batch_envelopes histogram
granary_transport_batch_envelopes_bucket{le="1"} 1
granary_transport_batch_envelopes_bucket{le="2"} 1
granary_transport_batch_envelopes_bucket{le="4"} 2
granary_transport_batch_envelopes_bucket{le="8"} 2
granary_transport_batch_envelopes_bucket{le="+Inf"} 3
granary_transport_batch_envelopes_sum 9
granary_transport_batch_envelopes_count 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "granary_cluster_members", "granary_directory_ring_share",
		"granary_directory_lookup_cache_hits_total", "granary_transport_bytes_sent_total", "granary_transport_batch_envelopes"); err != nil {
		t.Fatal(err)
	}
}

func TestDurationHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(funcCollector{siloDescs, func(e emit) {
		bounds := []time.Duration{time.Millisecond, time.Second}
		e.durations(remTardiness, bounds, []uint64{2, 1, 1}, 3*time.Second+1500*time.Millisecond)
	}})
	const want = `
# HELP granary_reminder_tardiness_seconds Time in seconds by which a reminder tick was delivered after it was due.
# TYPE granary_reminder_tardiness_seconds histogram
granary_reminder_tardiness_seconds_bucket{le="0.001"} 2
granary_reminder_tardiness_seconds_bucket{le="1"} 3
granary_reminder_tardiness_seconds_bucket{le="+Inf"} 4
granary_reminder_tardiness_seconds_sum 4.5
granary_reminder_tardiness_seconds_count 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "granary_reminder_tardiness_seconds"); err != nil {
		t.Fatal(err)
	}
}

// TestOverloadFamiliesFollowStats: the overload counters and the shedding
// gauge carry the values of the silo's Stats().Overload at each scrape.
func TestOverloadFamiliesFollowStats(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s := startSilo(t, m, nil, nil)
	if err := m.Attach(s); err != nil {
		t.Fatal(err)
	}
	names := []string{"granary_queue_limit_warnings_total", "granary_queue_limit_refusals_total", "granary_queue_wait_refusals_total", "granary_shed_requests_total",
		"granary_concurrency_limit_refusals_total", "granary_concurrency_limit", "granary_concurrency", "granary_load_shedding", "granary_memory_collections_total", "granary_abandoned_turns_total"}
	exposition := func(o silo.OverloadStats, shedding int) string {
		return `
# HELP granary_queue_limit_warnings_total Requests that queued at an activation past its soft queue limit.
# TYPE granary_queue_limit_warnings_total counter
granary_queue_limit_warnings_total ` + strconv.FormatUint(o.QueueWarnings, 10) + `
# HELP granary_queue_limit_refusals_total Requests refused with ResourceExhausted because an activation's queue was at its hard limit.
# TYPE granary_queue_limit_refusals_total counter
granary_queue_limit_refusals_total ` + strconv.FormatUint(o.QueueRefusals, 10) + `
# HELP granary_queue_wait_refusals_total Requests refused with ResourceExhausted because they waited for their turn past their type's queue wait limit.
# TYPE granary_queue_wait_refusals_total counter
granary_queue_wait_refusals_total ` + strconv.FormatUint(o.WaitRefusals, 10) + `
# HELP granary_concurrency_limit_refusals_total New requests refused with ResourceExhausted because the silo ran as many at once as its latency limit allows.
# TYPE granary_concurrency_limit_refusals_total counter
granary_concurrency_limit_refusals_total ` + strconv.FormatUint(o.LimitRefusals, 10) + `
# HELP granary_concurrency_limit How many new requests from clients and other silos the latency limit lets the silo run at once; 0 while nothing is limited.
# TYPE granary_concurrency_limit gauge
granary_concurrency_limit ` + strconv.FormatInt(o.ConcurrencyLimit, 10) + `
# HELP granary_concurrency New requests from clients and other silos running or queued in the silo now, counted while a latency limit is set.
# TYPE granary_concurrency gauge
granary_concurrency 0
# HELP granary_shed_requests_total Requests refused with ResourceExhausted by load shedding.
# TYPE granary_shed_requests_total counter
granary_shed_requests_total ` + strconv.FormatUint(o.Shed, 10) + `
# HELP granary_load_shedding 1 while the silo sheds load (refuses new requests because its CPU use or Go heap is over its limit), else 0.
# TYPE granary_load_shedding gauge
granary_load_shedding ` + strconv.Itoa(shedding) + `
# HELP granary_memory_collections_total Idle activations deactivated because the Go heap was over the memory collection's heap target.
# TYPE granary_memory_collections_total counter
granary_memory_collections_total ` + strconv.FormatUint(o.MemoryCollections, 10) + `
# HELP granary_abandoned_turns_total Grain turns still running when the silo's close stopped waiting for them, at its close timeout.
# TYPE granary_abandoned_turns_total counter
granary_abandoned_turns_total ` + strconv.FormatUint(o.AbandonedTurns, 10) + `
`
	}
	// A silo that has not protected itself exports every family, at 0.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exposition(silo.OverloadStats{}, 0)), names...); err != nil {
		t.Fatal(err)
	}
	// Distinct values, so that a family reading another's counter shows.
	busy := silo.OverloadStats{QueueWarnings: 11, QueueRefusals: 22, WaitRefusals: 66, Shed: 33, Shedding: true, MemoryCollections: 44, AbandonedTurns: 55,
		LimitRefusals: 77, ConcurrencyLimit: 88}
	s.TestHooks().SetOverload(busy)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exposition(busy, 1)), names...); err != nil {
		t.Fatal(err)
	}
	calm := busy
	calm.Shedding, calm.Shed = false, 34
	s.TestHooks().SetOverload(calm)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exposition(calm, 0)), names...); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.GatherAndLint(reg, names...); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}
