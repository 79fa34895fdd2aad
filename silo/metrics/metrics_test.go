package metrics

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// defaultTestTimeout bounds each test's calls and its silo's stop.
const defaultTestTimeout = 20 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigErrorsNameField(t *testing.T) {
	reg := func(c *Config) { c.Registerer = prometheus.NewRegistry() }
	tests := []struct {
		field string
		edit  func(*Config)
	}{
		{"Registerer", func(c *Config) { c.Registerer = nil }},
		{"LatencyBuckets", func(c *Config) { c.LatencyBuckets = []float64{} }},
		{"LatencyBuckets", func(c *Config) { c.LatencyBuckets = make([]float64, MaxLatencyBuckets+1) }},
		{"LatencyBuckets[0]", func(c *Config) { c.LatencyBuckets = []float64{0} }},
		{"LatencyBuckets[0]", func(c *Config) { c.LatencyBuckets = []float64{-1} }},
		{"LatencyBuckets[1]", func(c *Config) { c.LatencyBuckets = []float64{1, math.NaN()} }},
		{"LatencyBuckets[1]", func(c *Config) { c.LatencyBuckets = []float64{1, math.Inf(1)} }},
		{"LatencyBuckets[1]", func(c *Config) { c.LatencyBuckets = []float64{1, 1} }},
		{"LatencyBuckets[2]", func(c *Config) { c.LatencyBuckets = []float64{1, 2, 1.5} }},
		{"LatencyBuckets[1]", func(c *Config) { c.LatencyBuckets = []float64{1, 1 + 1e-12} }},
		{"LatencyBuckets[0]", func(c *Config) { c.LatencyBuckets = []float64{1e-12} }},
		{"LatencyBuckets[0]", func(c *Config) { c.LatencyBuckets = []float64{1e12} }},
		{"RecentErrors", func(c *Config) { c.RecentErrors = -1 }},
		{"RecentErrors", func(c *Config) { c.RecentErrors = MaxRecentErrors + 1 }},
		{"StreamLagSeries", func(c *Config) { c.StreamLagSeries = -1 }},
		{"StreamLagSeries", func(c *Config) { c.StreamLagSeries = MaxStreamLagSeries + 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			var cfg Config
			reg(&cfg)
			tt.edit(&cfg)
			_, err := New(cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("New = %v, want a ConfigError naming %s", err, tt.field)
			}
			if !strings.HasPrefix(err.Error(), "metrics: config: "+tt.field+": ") {
				t.Errorf("error %q does not begin with the package and field", err)
			}
		})
	}

	r := prometheus.NewRegistry()
	m, err := New(Config{Registerer: r})
	if err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
	if !slices.Equal(m.cfg.LatencyBuckets, DefaultLatencyBuckets) || m.cfg.RecentErrors != DefaultRecentErrors || m.cfg.StreamLagSeries != DefaultStreamLagSeries || !m.realClock {
		t.Errorf("defaults: buckets %v, recent errors %d, stream lag series %d, real clock %t", m.cfg.LatencyBuckets, m.cfg.RecentErrors, m.cfg.StreamLagSeries, m.realClock)
	}
	if m.bounds[0] != 50_000 || m.bounds[len(m.bounds)-1] != 10e9 {
		t.Errorf("bounds in ns = %v", m.bounds)
	}
	if _, err := New(Config{Registerer: r}); err == nil {
		t.Error("a second Metrics on one registry was accepted")
	}
	if err := m.Attach(nil); err == nil {
		t.Error("Attach(nil) succeeded")
	}
}

// probeGrain answers Call, failing when the request's text says so and
// advancing the test's clock by its N milliseconds; Read panics.
type probeGrain struct {
	probe.UnimplementedProbeGrain
	clock *clockwork.FakeClock
}

func (g *probeGrain) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	if g.clock != nil {
		g.clock.Advance(time.Duration(req.N) * time.Millisecond)
	}
	if req.Text == "fail" {
		return nil, status.Error(codes.FailedPrecondition, "asked to fail")
	}
	return &probe.Reply{N: req.N}, nil
}

func (g *probeGrain) Read(grain.Context, *probe.Request) (*probe.Reply, error) {
	panic("asked to panic")
}

// startSilo starts a silo alone hosting the Probe type with m's filter,
// with cfg changed by tweak, and stops it when the test ends.
func startSilo(t testing.TB, m *Metrics, clock *clockwork.FakeClock, tweak func(*silo.Config)) *silo.Silo {
	t.Helper()
	s := newSilo(t, m, clock, tweak)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// newSilo makes the silo of startSilo, not started; it is closed when the
// test ends.
func newSilo(t testing.TB, m *Metrics, clock *clockwork.FakeClock, tweak func(*silo.Config)) *silo.Silo {
	t.Helper()
	cfg := silo.DefaultConfig()
	cfg.IncomingFilters = []grain.IncomingFilter{m.IncomingFilter()}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := silo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.RegisterProbeGrain(s, func(grain.ID) probe.ProbeGrain { return &probeGrain{clock: clock} }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("stopping the silo: %v", err)
		}
	})
	return s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("error = %v, want %v", err, code)
	}
}

func TestFilterCountsCalls(t *testing.T) {
	reg := prometheus.NewRegistry()
	clock := clockwork.NewFakeClock()
	m, err := New(Config{Registerer: reg, LatencyBuckets: []float64{0.001, 0.01}, RecentErrors: 2, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	s := startSilo(t, m, clock, nil)
	ctx := testCtx(t)
	a, b := probe.NewProbeRef(s, "a"), probe.NewProbeRef(s, "b")
	for _, n := range []int64{0, 0, 5} { // 0, 0 and 5 ms
		if _, err := a.Call(ctx, &probe.Request{N: n}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Call(ctx, &probe.Request{N: 20}); err != nil { // past the last bound
		t.Fatal(err)
	}
	_, err = b.Call(ctx, &probe.Request{Text: "fail", N: 1})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = a.Interleave(ctx, &probe.Request{})
	wantCode(t, err, codes.Unimplemented)
	_, err = a.Read(ctx, &probe.Request{})
	wantCode(t, err, codes.Internal)

	const want = `
# HELP granary_grain_calls_total ` + callsHelp + `
# TYPE granary_grain_calls_total counter
granary_grain_calls_total{code="FailedPrecondition",method="/probe.Probe/Call",type="probe.Probe"} 1
granary_grain_calls_total{code="Internal",method="/probe.Probe/Read",type="probe.Probe"} 1
granary_grain_calls_total{code="OK",method="/probe.Probe/Call",type="probe.Probe"} 4
granary_grain_calls_total{code="Unimplemented",method="/probe.Probe/Interleave",type="probe.Probe"} 1
# HELP granary_grain_call_duration_seconds ` + callDurationHelp + `
# TYPE granary_grain_call_duration_seconds histogram
granary_grain_call_duration_seconds_bucket{code="FailedPrecondition",method="/probe.Probe/Call",type="probe.Probe",le="0.001"} 1
granary_grain_call_duration_seconds_bucket{code="FailedPrecondition",method="/probe.Probe/Call",type="probe.Probe",le="0.01"} 1
granary_grain_call_duration_seconds_bucket{code="FailedPrecondition",method="/probe.Probe/Call",type="probe.Probe",le="+Inf"} 1
granary_grain_call_duration_seconds_sum{code="FailedPrecondition",method="/probe.Probe/Call",type="probe.Probe"} 0.001
granary_grain_call_duration_seconds_count{code="FailedPrecondition",method="/probe.Probe/Call",type="probe.Probe"} 1
granary_grain_call_duration_seconds_bucket{code="Internal",method="/probe.Probe/Read",type="probe.Probe",le="0.001"} 1
granary_grain_call_duration_seconds_bucket{code="Internal",method="/probe.Probe/Read",type="probe.Probe",le="0.01"} 1
granary_grain_call_duration_seconds_bucket{code="Internal",method="/probe.Probe/Read",type="probe.Probe",le="+Inf"} 1
granary_grain_call_duration_seconds_sum{code="Internal",method="/probe.Probe/Read",type="probe.Probe"} 0
granary_grain_call_duration_seconds_count{code="Internal",method="/probe.Probe/Read",type="probe.Probe"} 1
granary_grain_call_duration_seconds_bucket{code="OK",method="/probe.Probe/Call",type="probe.Probe",le="0.001"} 2
granary_grain_call_duration_seconds_bucket{code="OK",method="/probe.Probe/Call",type="probe.Probe",le="0.01"} 3
granary_grain_call_duration_seconds_bucket{code="OK",method="/probe.Probe/Call",type="probe.Probe",le="+Inf"} 4
granary_grain_call_duration_seconds_sum{code="OK",method="/probe.Probe/Call",type="probe.Probe"} 0.025
granary_grain_call_duration_seconds_count{code="OK",method="/probe.Probe/Call",type="probe.Probe"} 4
granary_grain_call_duration_seconds_bucket{code="Unimplemented",method="/probe.Probe/Interleave",type="probe.Probe",le="0.001"} 1
granary_grain_call_duration_seconds_bucket{code="Unimplemented",method="/probe.Probe/Interleave",type="probe.Probe",le="0.01"} 1
granary_grain_call_duration_seconds_bucket{code="Unimplemented",method="/probe.Probe/Interleave",type="probe.Probe",le="+Inf"} 1
granary_grain_call_duration_seconds_sum{code="Unimplemented",method="/probe.Probe/Interleave",type="probe.Probe"} 0
granary_grain_call_duration_seconds_count{code="Unimplemented",method="/probe.Probe/Interleave",type="probe.Probe"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "granary_grain_calls_total", "granary_grain_call_duration_seconds"); err != nil {
		t.Fatal(err)
	}

	if got, want := m.CallTotals(), []TypeCalls{{Type: probe.ProbeGrainType, Calls: 7, Errors: 3}}; !slices.Equal(got, want) {
		t.Errorf("CallTotals() = %v, want %v", got, want)
	}
	// The ring holds two: the oldest failure (FailedPrecondition) is gone.
	errs := m.RecentErrors()
	wantErrs := []CallError{
		{Time: clock.Now(), Grain: grain.NewID(probe.ProbeGrainType, "a"), Method: "/probe.Probe/Read", Code: codes.Internal, Message: "the method panicked"},
		{Time: clock.Now(), Grain: grain.NewID(probe.ProbeGrainType, "a"), Method: "/probe.Probe/Interleave", Code: codes.Unimplemented,
			Message: "granary: method Interleave of probe.Probe is not implemented"},
	}
	if len(errs) != len(wantErrs) {
		t.Fatalf("RecentErrors() = %+v, want %+v", errs, wantErrs)
	}
	for i := range errs {
		if errs[i] != wantErrs[i] {
			t.Errorf("RecentErrors()[%d] = %+v, want %+v", i, errs[i], wantErrs[i])
		}
	}
}

func TestRecentErrorsBeforeTheRingFills(t *testing.T) {
	clock := clockwork.NewFakeClock()
	m, err := New(Config{Registerer: prometheus.NewRegistry(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.RecentErrors(); len(got) != 0 {
		t.Fatalf("RecentErrors() of a new Metrics = %v", got)
	}
	s := startSilo(t, m, clock, nil)
	ctx := testCtx(t)
	long := strings.Repeat("é", maxErrorMessage) // two bytes a character
	for _, key := range []string{"x", "y"} {
		_, err := probe.NewProbeRef(s, key).Call(ctx, &probe.Request{Text: "fail", N: 1})
		wantCode(t, err, codes.FailedPrecondition)
	}
	got := m.RecentErrors()
	if len(got) != 2 || got[0].Grain.Key != "y" || got[1].Grain.Key != "x" || got[0].Time.Sub(got[1].Time) != time.Millisecond {
		t.Fatalf("RecentErrors() = %+v; want y then x, a millisecond apart", got)
	}
	cut := cutMessage(long)
	if !strings.HasSuffix(cut, "…") || len(cut) > maxErrorMessage+len("…") || !strings.HasPrefix(long, strings.TrimSuffix(cut, "…")) {
		t.Fatalf("cutMessage cut %d bytes to %q", len(long), cut)
	}
	if cutMessage("short") != "short" {
		t.Fatal("cutMessage changed a short message")
	}
}
