package silo

import (
	"context"
	"fmt"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestInfoAndReadyFollowTheLifecycle(t *testing.T) {
	t.Parallel()
	s, err := New(func() Config { c := DefaultConfig(); c.Name = "alone"; c.AdminAddr = "127.0.0.1:8080"; return c }())
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.RegisterProbeGrain(s, func(id grain.ID) probe.ProbeGrain { return &probeGrain{id: id} }); err != nil {
		t.Fatal(err)
	}
	if got := s.Info().Status; got != StatusJoining {
		t.Errorf("status before Start = %q, want %q", got, StatusJoining)
	}
	if s.Ready() == nil {
		t.Error("Ready before Start = nil, want an error")
	}
	if _, _, err := s.Lookup(context.Background(), grain.NewID(probe.ProbeGrainType, "k")); status.Code(err) != codes.Unavailable {
		t.Errorf("Lookup before Start = %v, want Unavailable", err)
	}
	if ms := s.Members(); len(ms) != 1 || ms[0].Status.String() != "joining" {
		t.Errorf("Members before Start = %+v, want itself, joining", ms)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	in := s.Info()
	if in.Status != StatusActive || in.Name != "alone" || in.AdminAddr != "127.0.0.1:8080" || in.Started.IsZero() || in.Member != "" {
		t.Errorf("Info after Start = %+v", in)
	}
	if err := s.Ready(); err != nil {
		t.Errorf("Ready after Start = %v", err)
	}
	if ms := s.Members(); len(ms) != 1 || ms[0].Name != "alone" || ms[0].AdminAddr != "127.0.0.1:8080" || ms[0].Status.String() != "active" {
		t.Errorf("Members of a silo alone = %+v", ms)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Info().Status; got != StatusStopped {
		t.Errorf("status after Stop = %q, want %q", got, StatusStopped)
	}
	if s.Ready() == nil {
		t.Error("Ready after Stop = nil, want an error")
	}
}

func TestAdminAddrMustBeHostPort(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"nowhere", ":8080"} {
		cfg := DefaultConfig()
		cfg.AdminAddr = addr
		_, err := New(cfg)
		if ce, ok := err.(*ConfigError); !ok || ce.Field != "AdminAddr" {
			t.Errorf("New with AdminAddr %q = %v, want a ConfigError naming AdminAddr", addr, err)
		}
	}
}

func TestTypeStatsLookupDeactivateAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	ctx := testCtx(t)
	for _, k := range []string{"a", "b"} {
		if _, err := h.probe(k).Call(ctx, &probe.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	counts := map[string]int{}
	for _, ts := range h.s.TypeStats() {
		counts[ts.Type] = ts.Activations
	}
	if counts[probe.ProbeGrainType] != 2 || counts[probe.WorkerProbeGrainType] != 0 || len(counts) != 4 {
		t.Errorf("TypeStats = %v, want 2 %s and every type listed", counts, probe.ProbeGrainType)
	}

	id := grain.NewID(probe.ProbeGrainType, "a")
	if m, found, err := h.s.Lookup(ctx, id); err != nil || !found || m != h.s.cfg.Name {
		t.Errorf("Lookup(%v) = %q, %v, %v; want the silo's name", id, m, found, err)
	}
	if _, found, err := h.s.Lookup(ctx, grain.NewID(probe.ProbeGrainType, "never")); err != nil || found {
		t.Errorf("Lookup of a grain never called = %v, %v; want not found", found, err)
	}
	for _, bad := range []struct {
		id   grain.ID
		code codes.Code
	}{
		{grain.NewID("no.such.Type", "k"), codes.NotFound},
		{grain.ID{Type: probe.ProbeGrainType}, codes.InvalidArgument},
	} {
		if _, _, err := h.s.Lookup(ctx, bad.id); status.Code(err) != bad.code {
			t.Errorf("Lookup(%q) = %v, want %v", bad.id, err, bad.code)
		}
		if _, err := h.s.Deactivate(ctx, bad.id); status.Code(err) != bad.code {
			t.Errorf("Deactivate(%q) = %v, want %v", bad.id, err, bad.code)
		}
	}

	if ok, err := h.s.Deactivate(ctx, id); err != nil || !ok {
		t.Fatalf("Deactivate(%v) = %v, %v; want true", id, ok, err)
	}
	testwait.For(t, defaultTestTimeout, "the deactivated grain to leave the catalog", func() bool {
		_, found, _ := h.s.Lookup(ctx, id)
		return !found
	})
	if ok, err := h.s.Deactivate(ctx, id); err != nil || ok {
		t.Errorf("Deactivate of a grain not active = %v, %v; want false", ok, err)
	}
	testwait.For(t, defaultTestTimeout, "the type's count to drop", func() bool {
		for _, ts := range h.s.TypeStats() {
			if ts.Type == probe.ProbeGrainType {
				return ts.Activations == 1
			}
		}
		return false
	})
}

func TestHotGrainsRanksTheLastInterval(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	ctx := testCtx(t)
	call := func(key string, n int) {
		for range n {
			if _, err := h.probe(key).Call(ctx, &probe.Request{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	call("cold", 1)
	call("warm", 3)
	call("hot", 5)
	want := func(label string, n int, exp ...GrainLoad) {
		t.Helper()
		got := h.s.HotGrains(n)
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Errorf("%s: HotGrains(%d) = %v, want %v", label, n, got, exp)
		}
	}
	id := func(k string) grain.ID { return grain.NewID(probe.ProbeGrainType, k) }
	want("first", 2, GrainLoad{id("hot"), 5}, GrainLoad{id("warm"), 3})
	// The sample moved on: only what came since counts.
	call("cold", 2)
	want("second", 3, GrainLoad{id("cold"), 2})
	want("idle", 3)
	want("none asked", 0)
}

func TestIntrospectionInACluster(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{tweak: func(c *Config) { c.AdminAddr = c.Name + ":8080" }})
	a := tc.silo("a")
	ms := a.Members()
	if len(ms) != 3 {
		t.Fatalf("Members = %d, want 3", len(ms))
	}
	for _, m := range ms {
		if m.AdminAddr != m.Name+":8080" {
			t.Errorf("member %s gossips admin address %q, want %q", m.ID, m.AdminAddr, m.Name+":8080")
		}
	}
	ctx := testCtx(t)
	for i := range 12 {
		key := fmt.Sprint("k", i)
		r, err := tc.call(a, key, nil)
		if err != nil {
			t.Fatal(err)
		}
		host := tc.silo(r.Text)
		id := grain.NewID(probe.ProbeGrainType, key)
		for _, via := range tc.live() {
			m, found, err := via.Lookup(ctx, id)
			if err != nil || !found || m != host.Member() {
				t.Errorf("%s: Lookup(%v) = %q, %v, %v; want %q", via.cfg.Name, id, m, found, err, host.Member())
			}
		}
		if in := host.Info(); in.Member != host.Member() || in.GRPCAddr == "" || in.Status != StatusActive {
			t.Errorf("Info of %s = %+v", r.Text, in)
		}
	}
}

// Info gives the gateway address clients are told to dial, not the one
// the listener is bound to.
func TestInfoGivesTheAdvertisedGateway(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{cfg: func(c *Config) {
		gc := DefaultGatewayConfig()
		gc.Listen, gc.Advertise = "127.0.0.1:0", "gw.example:30000"
		c.Gateway = &gc
	}})
	if got := h.s.Info().GatewayAddr; got != "gw.example:30000" {
		t.Errorf("Info().GatewayAddr = %q, want the advertised gw.example:30000", got)
	}
	if got := h.s.Members()[0].GatewayAddr; got != "gw.example:30000" {
		t.Errorf("Members()[0].GatewayAddr = %q, want the advertised gw.example:30000", got)
	}
}
