package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestListenConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   admin.Config
		field string
	}{
		{"listen without port", admin.Config{Listen: "localhost"}, "Listen"},
		{"listen on a bad port", admin.Config{Listen: "127.0.0.1:99999"}, "Listen"},
		{"negative sample interval", admin.Config{Listen: "127.0.0.1:0", SampleInterval: -time.Second}, "SampleInterval"},
		{"negative peer timeout", admin.Config{Listen: "127.0.0.1:0", PeerTimeout: -time.Second}, "PeerTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := admin.Listen(tt.cfg)
			if err == nil {
				srv.Stop(testCtx(t))
				t.Fatal("Listen succeeded")
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not name %s", err, tt.field)
			}
			var ce *admin.ConfigError
			if tt.field != "Listen" || errors.As(err, &ce) {
				if !errors.As(err, &ce) || ce.Field != tt.field {
					t.Errorf("error %v is not a ConfigError for %s", err, tt.field)
				}
			}
		})
	}
}

func TestListenPicksPort(t *testing.T) {
	t.Parallel()
	srv := listen(t, admin.Config{})
	if strings.HasSuffix(srv.Addr(), ":0") {
		t.Fatalf("Addr %s: no port picked", srv.Addr())
	}
	a := do(t, http.MethodGet, srv.Addr(), adminapi.PathHealthz, nil)
	if a.status != http.StatusOK || strings.TrimSpace(string(a.body)) != "ok" {
		t.Fatalf("healthz: %d %q", a.status, a.body)
	}
}

// TestReadiness follows /readyz through a silo's life: not attached,
// attached but not started, started, stopped.
func TestReadiness(t *testing.T) {
	t.Parallel()
	srv := listen(t, admin.Config{})
	addr := srv.Addr()
	do(t, http.MethodGet, addr, adminapi.PathReadyz, nil).wantError(t, http.StatusServiceUnavailable, codes.Unavailable, "not attached")
	for _, path := range []string{adminapi.PathSilo, adminapi.PathCluster, adminapi.PathEvents} {
		do(t, http.MethodGet, addr, path, nil).wantError(t, http.StatusServiceUnavailable, codes.Unavailable, "not attached")
	}
	if a := do(t, http.MethodGet, addr, adminapi.PathHealthz, nil); a.status != http.StatusOK {
		t.Fatalf("healthz before Attach: %d", a.status)
	}

	sl := newSilo(t, "alone", addr, nil)
	srv.Attach(sl, nil)
	do(t, http.MethodGet, addr, adminapi.PathReadyz, nil).wantError(t, http.StatusServiceUnavailable, codes.Unavailable, "not started")
	err := client(t, addr).Ready(testCtx(t))
	var ae *adminapi.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("client Ready before Start: %v", err)
	}

	if err := sl.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	a := do(t, http.MethodGet, addr, adminapi.PathReadyz, nil)
	if a.status != http.StatusOK || strings.TrimSpace(string(a.body)) != "ok" {
		t.Fatalf("readyz after Start: %d %q", a.status, a.body)
	}
	if err := client(t, addr).Ready(testCtx(t)); err != nil {
		t.Fatalf("client Ready after Start: %v", err)
	}

	if err := sl.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	do(t, http.MethodGet, addr, adminapi.PathReadyz, nil).wantError(t, http.StatusServiceUnavailable, codes.Unavailable, "stopped")
}

// startAlone starts a silo alone attached to an admin server made with
// cfg.
func startAlone(t *testing.T, cfg admin.Config) (*admin.Server, *silo.Silo) {
	t.Helper()
	srv := listen(t, cfg)
	sl := newSilo(t, "alone", srv.Addr(), nil)
	srv.Attach(sl, nil)
	if err := sl.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return srv, sl
}

func TestSiloReport(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Now())
	const interval = 4 * time.Second
	srv, sl := startAlone(t, admin.Config{Clock: clock, SampleInterval: interval})
	for range 8 {
		call(t, sl, "busy")
	}
	for range 2 {
		call(t, sl, "calm")
	}
	if err := clock.BlockUntilContext(testCtx(t), 1); err != nil { // the sampler's ticker
		t.Fatal(err)
	}
	clock.Advance(interval)

	var r adminapi.SiloReport
	testwait.For(t, testTimeout, "the sampler to report hot grains", func() bool {
		r = adminapi.SiloReport{}
		do(t, http.MethodGet, srv.Addr(), adminapi.PathSilo, nil).decode(t, http.StatusOK, &r)
		return len(r.Hot) > 0
	})
	if r.Name != "alone" || r.Member != "" || r.Status != "active" {
		t.Errorf("name %q member %q status %q, want alone, \"\", active", r.Name, r.Member, r.Status)
	}
	if r.Addresses.Admin != srv.Addr() || r.Addresses.Gossip != "" {
		t.Errorf("addresses %+v, want admin %s and no gossip", r.Addresses, srv.Addr())
	}
	if r.Started.IsZero() || r.Processors < 1 || r.Activations != 2 {
		t.Errorf("started %v, processors %d, activations %d; want set, >= 1, 2", r.Started, r.Processors, r.Activations)
	}
	want := []adminapi.HotGrain{
		{Grain: probeType + "/busy", Silo: "alone", CallRate: 2},
		{Grain: probeType + "/calm", Silo: "alone", CallRate: 0.5},
	}
	if len(r.Hot) != len(want) || r.Hot[0] != want[0] || r.Hot[1] != want[1] {
		t.Errorf("hot %+v, want %+v", r.Hot, want)
	}
	var probeStats *adminapi.TypeReport
	for i := range r.Types {
		if r.Types[i].Type == probeType {
			probeStats = &r.Types[i]
		}
	}
	if probeStats == nil || probeStats.Activations != 2 {
		t.Errorf("types %+v: want %s with 2 activations", r.Types, probeType)
	}
	if r.Errors == nil {
		t.Error("errors is null, want an empty list")
	}

	// The next interval saw no call: no grain is hot.
	clock.Advance(interval)
	testwait.For(t, testTimeout, "the next sample", func() bool {
		r = adminapi.SiloReport{}
		do(t, http.MethodGet, srv.Addr(), adminapi.PathSilo, nil).decode(t, http.StatusOK, &r)
		return len(r.Hot) == 0
	})
}

// TestCallsAndErrors: with metrics attached, the report has each type's
// call and error counts and rates, and the latest failed calls.
func TestCallsAndErrors(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Now())
	const interval = 2 * time.Second
	m, reg := newMetrics(t)
	srv := listen(t, admin.Config{Clock: clock, SampleInterval: interval, Gatherer: reg})
	sl := newSilo(t, "alone", srv.Addr(), m)
	if err := m.Attach(sl); err != nil {
		t.Fatal(err)
	}
	srv.Attach(sl, m)
	if err := sl.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	ref := probe.NewProbeRef(sl, "shop")
	for range 6 {
		if _, err := ref.Call(testCtx(t), &probe.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, item := range []string{"pears", "plums"} {
		if _, err := ref.Call(testCtx(t), &probe.Request{Tag: "fail", Text: item}); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("failing call: %v", err)
		}
	}
	if err := clock.BlockUntilContext(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(interval)

	var r adminapi.SiloReport
	testwait.For(t, testTimeout, "the sampler to measure the calls", func() bool {
		r = adminapi.SiloReport{}
		do(t, http.MethodGet, srv.Addr(), adminapi.PathSilo, nil).decode(t, http.StatusOK, &r)
		return len(r.Types) == 1 && r.Types[0].CallRate > 0
	})
	want := adminapi.TypeReport{Type: probeType, Activations: 1, Calls: 8, Errors: 2, CallRate: 4, ErrorRate: 1}
	if r.Types[0] != want {
		t.Errorf("types %+v, want %+v", r.Types, want)
	}
	if len(r.Errors) != 2 {
		t.Fatalf("errors %+v, want the 2 failed calls", r.Errors)
	}
	for i, item := range []string{"plums", "pears"} { // the newest first
		e := r.Errors[i]
		if e.Grain != probeType+"/shop" || e.Code != "FailedPrecondition" || !strings.Contains(e.Message, item) ||
			!strings.Contains(e.Method, "Call") || e.Silo != "alone" || e.Time.IsZero() {
			t.Errorf("error %d: %+v, want the failed call for %s", i, e, item)
		}
	}
	a := do(t, http.MethodGet, srv.Addr(), adminapi.PathMetrics, nil)
	if a.status != http.StatusOK || !strings.Contains(string(a.body), "granary_grain_calls_total") {
		t.Errorf("metrics: %d, without granary_grain_calls_total:\n%s", a.status, a.body)
	}
}

// TestSiloReportCarriesOverload: the silo report has the silo's overload
// counters and whether it sheds, under the JSON names the dashboard reads.
func TestSiloReportCarriesOverload(t *testing.T) {
	t.Parallel()
	srv, sl := startAlone(t, admin.Config{})
	var r adminapi.SiloReport
	do(t, http.MethodGet, srv.Addr(), adminapi.PathSilo, nil).decode(t, http.StatusOK, &r)
	if r.Overload != (adminapi.Overload{}) {
		t.Errorf("overload %+v of a silo that has not protected itself, want zero", r.Overload)
	}

	// Distinct values, so that a field reading another's counter shows.
	sl.TestHooks().SetOverload(silo.OverloadStats{QueueWarnings: 1, QueueRefusals: 2, WaitRefusals: 6, Shed: 3, Shedding: true, MemoryCollections: 4, AbandonedTurns: 5,
		LimitRefusals: 7, ConcurrencyLimit: 8})
	a := do(t, http.MethodGet, srv.Addr(), adminapi.PathSilo, nil)
	var raw struct {
		Overload map[string]any `json:"overload"`
	}
	a.decode(t, http.StatusOK, &raw)
	want := map[string]any{"shedding": true, "shed_requests": 3.0, "queue_warnings": 1.0, "queue_refusals": 2.0,
		"wait_refusals": 6.0, "memory_collections": 4.0, "abandoned_turns": 5.0, "limit_refusals": 7.0, "concurrency_limit": 8.0, "concurrency": 0.0}
	if len(raw.Overload) != len(want) {
		t.Errorf("overload %v, want %v", raw.Overload, want)
	}
	for k, v := range want {
		if raw.Overload[k] != v {
			t.Errorf("overload.%s = %v, want %v", k, raw.Overload[k], v)
		}
	}

	// The cluster report carries the silo's report whole.
	cr, err := client(t, srv.Addr()).Cluster(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	wantOverload := adminapi.Overload{Shedding: true, ShedRequests: 3, QueueWarnings: 1, QueueRefusals: 2, WaitRefusals: 6, MemoryCollections: 4, AbandonedTurns: 5,
		LimitRefusals: 7, ConcurrencyLimit: 8}
	if len(cr.Silos) != 1 || cr.Silos[0].Overload != wantOverload {
		t.Errorf("cluster report silos %+v, want one with overload %+v", cr.Silos, wantOverload)
	}
}

func TestClusterReportAlone(t *testing.T) {
	t.Parallel()
	srv, _ := startAlone(t, admin.Config{})
	r, err := client(t, srv.Addr()).Cluster(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.Asked != "alone" || len(r.Silos) != 1 || r.Silos[0].Name != "alone" || len(r.Unreachable) != 0 {
		t.Fatalf("cluster report of a silo alone: %+v", r)
	}
	if len(r.Types) != 1 || r.Types[0].Type != probeType {
		t.Errorf("types %+v, want %s alone", r.Types, probeType)
	}
}

func TestLookupAndDeactivate(t *testing.T) {
	t.Parallel()
	srv, sl := startAlone(t, admin.Config{Tokens: testTokens(t)})
	c := adminClient(t, srv.Addr())
	ctx := testCtx(t)
	grainID := probeType + "/x"

	loc, err := c.Lookup(ctx, grainID)
	if err != nil || loc.Active || loc.Grain != grainID {
		t.Fatalf("Lookup before any call: %+v, %v; want inactive", loc, err)
	}
	d, err := c.Deactivate(ctx, grainID)
	if err != nil || d.Deactivated {
		t.Fatalf("Deactivate of an inactive grain: %+v, %v; want not deactivated", d, err)
	}

	call(t, sl, "x")
	loc, err = c.Lookup(ctx, grainID)
	if err != nil || !loc.Active || loc.Name != "alone" {
		t.Fatalf("Lookup after a call: %+v, %v; want active on alone", loc, err)
	}
	d, err = c.Deactivate(ctx, grainID)
	if err != nil || !d.Deactivated || d.Grain != grainID {
		t.Fatalf("Deactivate: %+v, %v; want deactivated", d, err)
	}
	testwait.For(t, testTimeout, "the grain to deactivate", func() bool {
		loc, err := c.Lookup(ctx, grainID)
		return err == nil && !loc.Active
	})
	// The next call activates it afresh: its count starts again.
	if n := callCount(t, sl, "x"); n != 1 {
		t.Errorf("first call after the deactivation counted %d, want 1", n)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	srv, _ := startAlone(t, admin.Config{Drain: func() {}, Tokens: testTokens(t)})
	addr := srv.Addr()
	tests := []struct {
		name   string
		method string
		path   string
		query  string
		status int
		code   codes.Code
		parts  []string
	}{
		{"lookup without grain", "GET", adminapi.PathLookup, "", 400, codes.InvalidArgument, []string{"grain=TYPE/KEY"}},
		{"lookup with empty grain", "GET", adminapi.PathLookup, "grain=", 400, codes.InvalidArgument, []string{"grain"}},
		{"grain without slash", "GET", adminapi.PathLookup, "grain=noslash", 400, codes.InvalidArgument, []string{`"noslash"`, "TYPE/KEY"}},
		{"grain without type", "GET", adminapi.PathLookup, "grain=/k", 400, codes.InvalidArgument, []string{"empty type"}},
		{"grain without key", "POST", adminapi.PathDeactivate, "grain=probe.Probe/", 400, codes.InvalidArgument, []string{"empty key"}},
		{"grain twice", "GET", adminapi.PathLookup, "grain=probe.Probe/a&grain=probe.Probe/b", 400, codes.InvalidArgument, []string{"2 times"}},
		{"malformed query", "GET", adminapi.PathLookup, "grain=%zz", 400, codes.InvalidArgument, []string{"malformed query"}},
		{"unknown type", "GET", adminapi.PathLookup, "grain=nosuch.Type/k", 404, codes.NotFound, []string{`"nosuch.Type"`}},
		{"deactivate unknown type", "POST", adminapi.PathDeactivate, "grain=nosuch.Type/k", 404, codes.NotFound, []string{`"nosuch.Type"`}},
		{"lookup by POST", "POST", adminapi.PathLookup, "grain=probe.Probe/a", 405, codes.Unimplemented, []string{"GET"}},
		{"deactivate by GET", "GET", adminapi.PathDeactivate, "grain=probe.Probe/a", 405, codes.Unimplemented, []string{"POST"}},
		{"drain by GET", "GET", adminapi.PathDrain, "silo=alone", 405, codes.Unimplemented, []string{"POST"}},
		{"silo report by DELETE", "DELETE", adminapi.PathSilo, "", 405, codes.Unimplemented, []string{"GET"}},
		{"healthz by POST", "POST", adminapi.PathHealthz, "", 405, codes.Unimplemented, []string{"GET"}},
		{"dashboard by POST", "POST", "/", "", 405, codes.Unimplemented, []string{"GET"}},
		{"drain without silo", "POST", adminapi.PathDrain, "", 400, codes.InvalidArgument, []string{"silo="}},
		{"drain of an unknown silo", "POST", adminapi.PathDrain, "silo=nosuch", 404, codes.NotFound, []string{`"nosuch"`}},
		{"unknown API path", "GET", "/api/v1/nosuch", "", 404, codes.NotFound, []string{"/api/v1/nosuch"}},
		{"unknown page", "GET", "/nosuch.html", "", 404, codes.NotFound, []string{"/nosuch.html"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := "http://" + addr + tt.path
			if tt.query != "" {
				u += "?" + tt.query
			}
			a := doURLWith(t, tt.method, u, http.Header{"Authorization": {"Bearer " + adminToken}})
			a.wantError(t, tt.status, tt.code, tt.parts...)
			if tt.status == http.StatusMethodNotAllowed && a.header.Get("Allow") == "" {
				t.Error("405 without an Allow header")
			}
		})
	}
}

func TestDrain(t *testing.T) {
	t.Parallel()
	var drains atomic.Int32
	srv, _ := startAlone(t, admin.Config{Drain: func() { drains.Add(1) }, Tokens: testTokens(t)})
	c := adminClient(t, srv.Addr())
	for i := range 3 {
		reply, err := c.Drain(testCtx(t), "alone")
		if err != nil {
			t.Fatalf("drain %d: %v", i, err)
		}
		if reply.Name != "alone" {
			t.Errorf("drain %d answered by %+v, want alone", i, reply)
		}
	}
	if n := drains.Load(); n != 1 {
		t.Fatalf("Drain called %d times, want once", n)
	}
	a := doAuth(t, http.MethodPost, srv.Addr(), adminapi.PathDrain, query("silo", "alone"), adminToken)
	if a.status != http.StatusAccepted {
		t.Errorf("drain status %d, want 202", a.status)
	}
}

func TestDrainWithoutFunc(t *testing.T) {
	t.Parallel()
	srv, _ := startAlone(t, admin.Config{Tokens: testTokens(t)})
	doAuth(t, http.MethodPost, srv.Addr(), adminapi.PathDrain, query("silo", "alone"), adminToken).
		wantError(t, http.StatusNotImplemented, codes.Unimplemented, "alone")
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	served := prometheus.NewCounter(prometheus.CounterOpts{Name: "granary_admin_test_total", Help: "A counter of the admin server's test."})
	reg.MustRegister(served)
	served.Add(3)
	srv := listen(t, admin.Config{Gatherer: reg})
	a := do(t, http.MethodGet, srv.Addr(), adminapi.PathMetrics, nil)
	if a.status != http.StatusOK || !strings.Contains(string(a.body), "granary_admin_test_total 3") {
		t.Fatalf("metrics: %d\n%s", a.status, a.body)
	}

	bare := listen(t, admin.Config{})
	do(t, http.MethodGet, bare.Addr(), adminapi.PathMetrics, nil).wantError(t, http.StatusNotFound, codes.NotFound, "no gatherer")
}

func TestDashboardFiles(t *testing.T) {
	t.Parallel()
	srv := listen(t, admin.Config{})
	tests := []struct {
		path, contentType, holds string
	}{
		{"/", "text/html; charset=utf-8", `id="silos"`},
		{"/app.js", "text/javascript; charset=utf-8", "getReader"},
		{"/style.css", "text/css; charset=utf-8", ".badge"},
	}
	for _, tt := range tests {
		a := do(t, http.MethodGet, srv.Addr(), tt.path, nil)
		if a.status != http.StatusOK || a.header.Get("Content-Type") != tt.contentType {
			t.Errorf("GET %s: %d %q", tt.path, a.status, a.header.Get("Content-Type"))
			continue
		}
		if !strings.Contains(string(a.body), tt.holds) {
			t.Errorf("GET %s does not hold %q", tt.path, tt.holds)
		}
		if csp := a.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tt.path, csp)
		}
		if head := do(t, http.MethodHead, srv.Addr(), tt.path, nil); head.status != http.StatusOK || len(head.body) != 0 {
			t.Errorf("HEAD %s: %d with %d bytes", tt.path, head.status, len(head.body))
		}
	}
	// The page loads nothing from another origin.
	a := do(t, http.MethodGet, srv.Addr(), "/", nil)
	for _, bad := range []string{"http://", "https://", "//cdn", "innerHTML"} {
		if strings.Contains(string(a.body), bad) {
			t.Errorf("index.html holds %q", bad)
		}
	}
	js := do(t, http.MethodGet, srv.Addr(), "/app.js", nil)
	if strings.Contains(string(js.body), ".innerHTML") || strings.Contains(string(js.body), "insertAdjacentHTML") {
		t.Error("app.js writes HTML from strings")
	}
}

// TestEvents reads the event stream: a report at once, another each
// EventInterval, and the end of the stream when the server stops.
func TestEvents(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Now())
	srv, _ := startAlone(t, admin.Config{Clock: clock})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+srv.Addr()+adminapi.PathEvents, nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
	}
	events := make(chan adminapi.ClusterReport, 4)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var r adminapi.ClusterReport
			if err := json.Unmarshal([]byte(data), &r); err != nil {
				t.Errorf("event %q: %v", data, err)
				return
			}
			events <- r
		}
	})
	next := func(what string) (adminapi.ClusterReport, bool) {
		t.Helper()
		select {
		case r, ok := <-events:
			return r, ok
		case <-time.After(testTimeout):
			t.Fatalf("timed out waiting for %s", what)
			return adminapi.ClusterReport{}, false
		}
	}
	if r, ok := next("the first event"); !ok || len(r.Silos) != 1 || r.Silos[0].Name != "alone" {
		t.Fatalf("first event: %+v (stream open %v)", r, ok)
	}
	// The stream's ticker and the sampler's.
	if err := clock.BlockUntilContext(ctx, 2); err != nil {
		t.Fatal(err)
	}
	clock.Advance(admin.EventInterval)
	if _, ok := next("the second event"); !ok {
		t.Fatal("the stream ended before the second event")
	}

	if err := srv.Stop(ctx); err != nil {
		t.Fatalf("Stop with a stream open: %v", err)
	}
	if _, ok := next("the stream to end"); ok {
		t.Fatal("an event after Stop")
	}
	wg.Wait()
}

func TestStopIdempotent(t *testing.T) {
	t.Parallel()
	srv, err := admin.Listen(admin.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := srv.Stop(testCtx(t)); err != nil {
				t.Errorf("Stop: %v", err)
			}
		})
	}
	wg.Wait()
	// Attached after Stop: no sampler starts, nothing leaks.
	srv.Attach(newSilo(t, "late", "", nil), nil)
	if err := srv.Stop(testCtx(t)); err != nil {
		t.Fatalf("Stop again: %v", err)
	}
}

func TestAttachTwicePanics(t *testing.T) {
	t.Parallel()
	srv := listen(t, admin.Config{})
	sl := newSilo(t, "twice", srv.Addr(), nil)
	srv.Attach(sl, nil)
	defer func() {
		if recover() == nil {
			t.Fatal("a second Attach did not panic")
		}
	}()
	srv.Attach(sl, nil)
}

// A page of another site that an operator has open in a browser cannot
// drain the silo or deactivate grains: the browser says where the request
// comes from, and the server refuses it before acting, even with an admin
// token (a browser may have one to send).
func TestCrossSitePostsRefused(t *testing.T) {
	t.Parallel()
	var drains atomic.Int32
	srv, _ := startAlone(t, admin.Config{Drain: func() { drains.Add(1) }, Tokens: testTokens(t)})
	for _, h := range []struct{ name, value string }{
		{"Origin", "http://evil.example"},
		{"Sec-Fetch-Site", "cross-site"},
	} {
		for _, path := range []string{adminapi.PathDrain + "?silo=alone", adminapi.PathDeactivate + "?grain=probe.Probe/a"} {
			req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, "http://"+srv.Addr()+path, http.NoBody)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(h.name, h.value)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			resp, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("POST %s with %s: %s: status %d, want 403", path, h.name, h.value, resp.StatusCode)
			}
		}
	}
	if n := drains.Load(); n != 0 {
		t.Errorf("a cross-site request drained the silo (%d calls)", n)
	}
	// The same request from the dashboard's own origin, as a program would
	// send it, is taken.
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, "http://"+srv.Addr()+adminapi.PathDrain+"?silo=alone", http.NoBody)
	req.Header.Set("Origin", "http://"+srv.Addr())
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || drains.Load() != 1 {
		t.Errorf("a same-origin drain: status %d, %d drains; want 202 and 1", resp.StatusCode, drains.Load())
	}
}
