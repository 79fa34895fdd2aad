package host

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/examples/cluster/counter"
	"github.com/granaryio/granary/grain"
	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// testConfig is a silo alone on loopback ports picked at run time, with
// its embedded store in the test's directory.
func testConfig(t *testing.T) Config {
	c := DefaultConfig()
	c.Name = "solo"
	c.Admin.Listen = "127.0.0.1:0"
	c.Gateway.Listen = "127.0.0.1:0"
	c.Storage.DataDir = t.TempDir()
	c.Shutdown.Timeout = 10 * time.Second
	return c
}

// runResult is what Run returned, and when.
type runResult struct {
	err  error
	took time.Duration // from the end of the wait to Run's return
}

// startRun runs Run in a goroutine with a logger the test observes, and
// returns the silo once started (nil if Run ended before), the logs and
// the channel of Run's result.
func startRun(t *testing.T, ctx context.Context, c Config, register func(*silo.Silo) error, opts ...Option) (*observer.ObservedLogs, <-chan *silo.Silo, <-chan runResult) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	started := make(chan *silo.Silo, 1)
	done := make(chan runResult, 1)
	opts = append([]Option{WithLogger(zap.New(core)), WithRegistry(prometheus.NewRegistry()),
		WithStarted(func(s *silo.Silo) { started <- s })}, opts...)
	go func() {
		err := Run(ctx, c, register, opts...)
		done <- runResult{err: err}
	}()
	return logs, started, done
}

// waitStarted returns the started silo, or fails if Run ended first.
func waitStarted(t *testing.T, ctx context.Context, started <-chan *silo.Silo, done <-chan runResult) *silo.Silo {
	t.Helper()
	select {
	case s := <-started:
		return s
	case r := <-done:
		t.Fatalf("Run returned before the silo started: %v", r.err)
	case <-ctx.Done():
		t.Fatal("the silo did not start in time")
	}
	return nil
}

// waitRun waits for Run's result and measures how long it took.
func waitRun(t *testing.T, done <-chan runResult) runResult {
	t.Helper()
	start := time.Now()
	select {
	case r := <-done:
		r.took = time.Since(start)
		return r
	case <-time.After(defaultTestTimeout):
		t.Fatal("Run did not return")
	}
	return runResult{}
}

// waitLog polls logs until an entry with message msg is there.
func waitLog(t *testing.T, ctx context.Context, logs *observer.ObservedLogs, msg string) observer.LoggedEntry {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if e := logs.FilterMessage(msg).All(); len(e) > 0 {
			return e[0]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %q log entry: %v", msg, ctx.Err())
		case <-tick.C:
		}
	}
}

func registerCounter(s *silo.Silo) error { return counter.Register(s, true) }

func httpStatus(t *testing.T, ctx context.Context, url string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRunAlone runs a silo alone from a Config: its admin server answers
// the probes, its gateway serves a Counter call to a client, and
// cancelling the context stops it gracefully within the budget.
func TestRunAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	c := testConfig(t)
	reg := prometheus.NewRegistry()
	logs, started, done := startRun(t, runCtx, c, registerCounter, WithRegistry(reg))
	s := waitStarted(t, ctx, started, done)

	info := s.Info()
	if info.AdminAddr == "" || info.GatewayAddr == "" {
		t.Fatalf("addresses: %+v", info)
	}
	for _, path := range []string{adminapi.PathHealthz, adminapi.PathReadyz} {
		if code := httpStatus(t, ctx, "http://"+info.AdminAddr+path); code != http.StatusOK {
			t.Errorf("GET %s: %d; want 200", path, code)
		}
	}

	cl, err := client.Dial(ctx, client.WithGateways(info.GatewayAddr))
	if err != nil {
		t.Fatal(err)
	}
	ref := clusterpb.NewCounterRef(cl, "c1")
	for want := int64(1); want <= 2; want++ {
		r, err := ref.Add(ctx, &clusterpb.AddRequest{Delta: 1})
		if err != nil || r.GetValue() != want || r.GetSilo() != "solo" {
			t.Fatalf("Add: %v, %v; want %d from solo", r, err, want)
		}
	}
	if err := cl.Close(); err != nil {
		t.Errorf("closing the client: %v", err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var granary []string
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "granary_") {
			granary = append(granary, f.GetName())
		}
	}
	if len(granary) == 0 {
		t.Errorf("the registry holds no granary_ metrics after a call")
	}

	stop()
	r := waitRun(t, done)
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	if r.took >= c.Shutdown.Timeout {
		t.Errorf("the stop took %v, past its budget %v", r.took, c.Shutdown.Timeout)
	}
	for _, msg := range []string{"config loaded", "silo ready", "stopping gracefully", "silo stopped gracefully", "stopped"} {
		if logs.FilterMessage(msg).Len() != 1 {
			t.Errorf("want one %q log entry; logs:\n%v", msg, messages(logs))
		}
	}
	// The admin server stopped with the silo.
	if conn, err := net.DialTimeout("tcp", info.AdminAddr, time.Second); err == nil {
		conn.Close()
		t.Errorf("the admin server still listens on %s", info.AdminAddr)
	}
}

func messages(logs *observer.ObservedLogs) string {
	var b strings.Builder
	for _, e := range logs.All() {
		b.WriteString(e.Message + "\n")
	}
	return b.String()
}

// TestRunProbesDuringJoin starts a silo whose only seed never answers:
// while it tries to join, /healthz says 200 and /readyz 503; cancelling
// the context ends Run without an error.
func TestRunProbesDuringJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// A port nothing listens on: bind one, then free it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadSeed := l.Addr().String()
	l.Close()

	c := testConfig(t)
	c.Storage.DataDir = ""
	c.Storage.Provider = "memory"
	c.Cluster.ID = "host-join-test"
	c.Cluster.Profile = "local"
	c.Cluster.Gossip.Listen = "127.0.0.1:0"
	c.Cluster.GRPC.Listen = "127.0.0.1:0"
	c.Cluster.Seeds = []string{deadSeed}
	logs, _, done := startRun(t, runCtx, c, registerCounter)
	e := waitLog(t, ctx, logs, "admin address")
	addr, _ := e.ContextMap()["listen"].(string)
	if code := httpStatus(t, ctx, "http://"+addr+adminapi.PathHealthz); code != http.StatusOK {
		t.Errorf("/healthz while joining: %d; want 200", code)
	}
	if code := httpStatus(t, ctx, "http://"+addr+adminapi.PathReadyz); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while joining: %d; want 503", code)
	}
	stop()
	if r := waitRun(t, done); r.err != nil {
		t.Fatalf("Run stopped while joining: %v", r.err)
	}
	if logs.FilterMessage("stopping before the silo started").Len() != 1 || logs.FilterMessage("silo ready").Len() != 0 {
		t.Errorf("logs:\n%s", messages(logs))
	}
}

// TestRunDrain ends Run with a drain request to its admin server, which
// needs an admin token: without one the request is refused and the silo
// keeps running.
func TestRunDrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	c := testConfig(t)
	const token = "drain-token-0123456789"
	p := newTestPKI(t)
	c.Admin.TLS = p.tls("tls")
	c.Admin.TokenFile = p.tokens(t, "admin-tokens", token+" operator\n")
	logs, started, done := startRun(t, ctx, c, registerCounter)
	s := waitStarted(t, ctx, started, done)
	ac, err := adminapi.NewClientWith(s.Info().AdminAddr, adminapi.ClientOptions{TLS: p.clientTLS(t, "127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	for name, cl := range map[string]*adminapi.Client{"no token": ac, "a wrong token": ac.WithToken("wrong-token-0123456789")} {
		if _, err := cl.Drain(ctx, "solo"); err == nil {
			t.Fatalf("drain with %s was accepted", name)
		}
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("the silo after refused drains: %v", err)
	}
	if _, err := ac.WithToken(token).Drain(ctx, "solo"); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if r := waitRun(t, done); r.err != nil {
		t.Fatalf("Run after a drain: %v", r.err)
	}
	e := waitLog(t, ctx, logs, "stopping gracefully")
	if reason := e.ContextMap()["reason"]; reason != "drain requested" {
		t.Errorf("stop reason %v", reason)
	}
}

// sleepyCounter is a Counter whose Add sleeps longer than any test,
// holding the graceful stop up; closing the silo wakes it.
type sleepyCounter struct {
	clusterpb.UnimplementedCounterGrain
	entered chan<- struct{}
}

func (b *sleepyCounter) Add(ctx grain.Context, req *clusterpb.AddRequest) (*clusterpb.AddReply, error) {
	b.entered <- struct{}{}
	if err := ctx.Sleep(2 * defaultTestTimeout); err != nil {
		return nil, err
	}
	return &clusterpb.AddReply{Value: req.GetDelta()}, nil
}

// TestRunBudgetRunsOut holds the graceful stop up with a call that does
// not end: Run closes the silo once the budget runs out and says so.
func TestRunBudgetRunsOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	c := testConfig(t)
	c.Shutdown.Timeout = 200 * time.Millisecond
	entered := make(chan struct{}, 1)
	register := func(s *silo.Silo) error {
		return clusterpb.RegisterCounterGrain(s, func(grain.ID) clusterpb.CounterGrain {
			return &sleepyCounter{entered: entered}
		})
	}
	logs, started, done := startRun(t, runCtx, c, register)
	s := waitStarted(t, ctx, started, done)
	callDone := make(chan error, 1)
	go func() {
		_, err := clusterpb.NewCounterRef(s, "stuck").Add(ctx, &clusterpb.AddRequest{Delta: 1})
		callDone <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the call never ran")
	}
	stop()
	r := waitRun(t, done)
	if r.err == nil || !strings.Contains(r.err.Error(), "ran out of its 200ms budget (shutdown.timeout)") || !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v; want the budget's error", r.err)
	}
	if r.took < c.Shutdown.Timeout || r.took > defaultTestTimeout/2 {
		t.Errorf("Run returned %v after the stop began; want just past the %v budget", r.took, c.Shutdown.Timeout)
	}
	if err := <-callDone; err == nil {
		t.Errorf("the call held up by the stop succeeded")
	}
	if logs.FilterMessage("the graceful stop ran out of its budget: closing the silo at once").Len() != 1 || logs.FilterMessage("stopped").Len() != 1 {
		t.Errorf("logs:\n%s", messages(logs))
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	c := testConfig(t)
	c.Tracing.SampleRatio = 2
	err := Run(context.Background(), c, registerCounter, WithLogger(zap.NewNop()))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "tracing.sample_ratio" || fe.Source != "set in code" {
		t.Errorf("Run with a bad config: %v", err)
	}
	c = testConfig(t)
	boom := errors.New("boom")
	err = Run(context.Background(), c, func(*silo.Silo) error { return boom }, WithLogger(zap.NewNop()), WithRegistry(prometheus.NewRegistry()))
	if !errors.Is(err, boom) {
		t.Errorf("Run with a failing register: %v", err)
	}
}
