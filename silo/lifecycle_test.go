package silo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/membership"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// collectTestConfig: grains are collected after 10 idle minutes, checked
// every minute.
func collectTestConfig(c *Config) {
	c.CollectionAge = 10 * time.Minute
	c.CollectionInterval = time.Minute
}

// advance moves the fake clock on by d, one collection interval (a
// minute) at a time, waiting each time until the collector has looked.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	for ; d > 0; d -= time.Minute {
		want := h.clock.Now().Add(time.Minute)
		h.clock.Advance(time.Minute)
		h.waitCollected(want)
	}
}

func (h *harness) waitCollected(want time.Time) {
	h.t.Helper()
	testwait.Until(h.t, h.collected, defaultTestTimeout, fmt.Sprintf("the collector's tick at %v", want),
		func(now time.Time) bool { return !now.Before(want) })
}

// TestIdleCollection: an idle grain is collected after its age, OnDeactivate
// runs with reason idle, and the next call makes a new activation. A busy
// grain is not collected however long it runs.
func TestIdleCollection(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{fake: true, cfg: collectTestConfig})
	ref := h.probe("idle")
	r1, err := ref.Call(testCtx(t), &probe.Request{})
	if err != nil {
		t.Fatal(err)
	}
	hold := h.hold("busy")
	busy := h.probe("busy").CallAsync(context.Background(), &probe.Request{Tag: "busy"}, grain.WithTimeout(time.Hour))
	h.waitEvent("busy start")

	h.advance(9 * time.Minute)
	if got := h.s.Stats().Activations; got != 2 {
		t.Fatalf("%d activations after 9 idle minutes, want 2", got)
	}
	h.advance(3 * time.Minute)
	h.waitEvent("deactivate probe.Probe/idle idle")
	h.advance(20 * time.Minute)
	for _, e := range h.eventLog() {
		if strings.HasPrefix(e, "deactivate probe.Probe/busy") {
			t.Fatalf("busy grain collected: %q", h.eventLog())
		}
	}
	r2, err := ref.Call(testCtx(t), &probe.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Activation == r1.Activation || r2.N != 1 {
		t.Fatalf("re-activation: activation %d (was %d), call count %d: want a new activation", r2.Activation, r1.Activation, r2.N)
	}
	hold.open()
	if err := busy.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestDeactivateOnIdle: a grain that asks to deactivate does so after its
// request, and the next call re-activates it.
func TestDeactivateOnIdle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	h.script("bye", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		ctx.DeactivateOnIdle()
		return &probe.Reply{Activation: ctx.ActivationID()}, nil
	})
	ref := h.probe("d")
	r1, err := ref.Call(testCtx(t), &probe.Request{Tag: "bye"})
	if err != nil {
		t.Fatal(err)
	}
	h.waitEvent("deactivate probe.Probe/d requested")
	r2, err := ref.Call(testCtx(t), &probe.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Activation == r2.Activation {
		t.Fatalf("same activation %d after DeactivateOnIdle", r1.Activation)
	}
}

// TestActivationFailure: an OnActivate error reaches the caller with its
// code and leaves no activation; the next call activates afresh.
func TestActivationFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	fails := 1
	h.script("activate:flaky", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		if fails > 0 {
			fails--
			return nil, status.Error(codes.FailedPrecondition, "not yet")
		}
		return nil, nil
	})
	ref := h.probe("flaky")
	_, err := ref.Call(testCtx(t), &probe.Request{})
	if grain.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not yet") {
		t.Fatalf("first call: %v, want FailedPrecondition from OnActivate", err)
	}
	if n := h.s.Stats().Activations; n != 0 {
		t.Fatalf("%d activations left after a failed activation", n)
	}
	if _, err := ref.Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatalf("second call: %v", err)
	}
}

// TestErrorsKeepCode: an application error keeps its code and message; a
// plain error arrives as Unknown with its message.
func TestErrorsKeepCode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	h.script("denied", func(grain.Context, *probeGrain, *probe.Request) (*probe.Reply, error) {
		return nil, status.Error(codes.PermissionDenied, "no entry")
	})
	plain := errors.New("plain failure")
	h.script("plain", func(grain.Context, *probeGrain, *probe.Request) (*probe.Reply, error) {
		return nil, plain
	})
	_, err := h.probe("e").Call(testCtx(t), &probe.Request{Tag: "denied"})
	if s, _ := status.FromError(err); s.Code() != codes.PermissionDenied || s.Message() != "no entry" {
		t.Fatalf("got %v", err)
	}
	_, err = h.probe("e").Call(testCtx(t), &probe.Request{Tag: "plain"})
	if grain.Code(err) != codes.Unknown || err.Error() != "plain failure" {
		t.Fatalf("got %v", err)
	}
}

// TestPanicDeactivates: a panic returns Internal, deactivates the
// activation, and the grain re-activates on its next call.
func TestPanicDeactivates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	h.script("boom", func(grain.Context, *probeGrain, *probe.Request) (*probe.Reply, error) {
		panic("boom")
	})
	ref := h.probe("p")
	r1, err := ref.Call(testCtx(t), &probe.Request{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ref.Call(testCtx(t), &probe.Request{Tag: "boom"})
	if grain.Code(err) != codes.Internal || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("got %v, want Internal naming the panic", err)
	}
	h.waitEvent("deactivate probe.Probe/p panic")
	r2, err := ref.Call(testCtx(t), &probe.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Activation == r1.Activation {
		t.Fatal("no re-activation after a panic")
	}
}

// TestUnknownTypeMethodKey: calls to an unregistered type, a method the
// type lacks, and a key of the wrong kind fail with clear codes.
func TestUnknownTypeMethodKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	_, err := h.s.Invoke(testCtx(t), grain.NewID("nope.Missing", "x"), &probe.Probe_ServiceDesc.Methods[0], &probe.Request{})
	if grain.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "nope.Missing") {
		t.Fatalf("unknown type: %v", err)
	}
	bogus := probe.Probe_ServiceDesc.Methods[0]
	bogus.Name, bogus.Index = "Bogus", 99
	_, err = h.s.Invoke(testCtx(t), grain.NewID(probe.ProbeGrainType, "x"), &bogus, &probe.Request{})
	if grain.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "Bogus") {
		t.Fatalf("unknown method: %v", err)
	}
	_, err = probe.IntProbeRefFromID(h.s, grain.NewID(probe.IntProbeGrainType, "twelve")).Call(testCtx(t), &probe.Request{})
	if grain.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "int64") {
		t.Fatalf("bad key: %v", err)
	}
	if _, err := probe.NewIntProbeRef(h.s, 12).Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatalf("good int key: %v", err)
	}
}

// TestStopDeactivatesAll: Stop runs every activation's OnDeactivate with
// reason shutdown, and calls afterwards get Unavailable.
func TestStopDeactivatesAll(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	for _, k := range []string{"a", "b", "c"} {
		if _, err := h.probe(k).Call(testCtx(t), &probe.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.s.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range h.eventLog() {
		if strings.HasPrefix(e, "deactivate ") && strings.HasSuffix(e, " shutdown") {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d shutdown deactivations, want 3: %q", n, h.eventLog())
	}
	if _, err := h.probe("a").Call(testCtx(t), &probe.Request{}); grain.Code(err) != codes.Unavailable {
		t.Fatalf("call after Stop: %v, want Unavailable", err)
	}
}

// TestConfigErrorsNameField: bad configuration is refused naming the field.
func TestConfigErrorsNameField(t *testing.T) {
	t.Parallel()
	for field, mutate := range map[string]func(*Config){
		"ResponseTimeout":                 func(c *Config) { c.ResponseTimeout = 0 },
		"CollectionAge":                   func(c *Config) { c.CollectionAge = -time.Second },
		"MaxCallChain":                    func(c *Config) { c.MaxCallChain = 0 },
		`Types["x.Y"].CollectionInterval`: func(c *Config) { c.Types = map[string]TypeConfig{"x.Y": {CollectionInterval: -1}} },
		"IncomingFilters[0]":              func(c *Config) { c.IncomingFilters = []grain.IncomingFilter{nil} },
		"Name":                            func(c *Config) { c.Name = "" },
		"Gateway.Listen":                  func(c *Config) { g := DefaultGatewayConfig(); g.Listen = "nohost"; c.Gateway = &g },
		"Gateway.Advertise":               func(c *Config) { g := DefaultGatewayConfig(); g.Advertise = "h:0"; c.Gateway = &g },
		"Gateway.Services[0]": func(c *Config) {
			g := DefaultGatewayConfig()
			g.Services = []*grain.ServiceDesc{nil}
			c.Gateway = &g
		},
		"Gateway.Transport.MaxMessageSize": func(c *Config) {
			g := DefaultGatewayConfig()
			g.Transport.MaxMessageSize = 10
			c.Gateway = &g
		},
	} {
		cfg := DefaultConfig()
		mutate(&cfg)
		_, err := New(cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
}

// TestActivateCallsBack: OnActivate calling a grain that calls back is a
// deadlock, refused at once with Aborted; the activation fails with that
// error and the next call, which does not call back, succeeds.
func TestActivateCallsBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	first := true
	h.script("activate:loop", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		if !first {
			return nil, nil
		}
		first = false
		_, err := g.forward(ctx, &probe.Request{Path: []string{probeID("helper"), probeID("loop")}})
		return nil, err
	})
	start := time.Now()
	_, err := h.probe("loop").Call(testCtx(t), &probe.Request{})
	if grain.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "probe.Probe/loop → probe.Probe/helper → probe.Probe/loop") {
		t.Fatalf("got %v, want Aborted naming the chain", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("refused after %v, not at once", took)
	}
	if _, err := h.probe("loop").Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
}

// TestStartWithABadMembershipConfigFails: a membership configuration that
// memberlist refuses fails Start with the reason, and stops what Start
// began, without a panic.
func TestStartWithABadMembershipConfigFails(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cc := DefaultClusterConfig()
	cc.Membership = membership.DefaultLocalConfig()
	cc.Membership.ClusterID = "bad"
	cc.Membership.ProbeTimeout = cc.Membership.ProbeInterval
	cc.GRPCListen = "127.0.0.1:0"
	cfg.Cluster = &cc
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := s.Start(ctx); err == nil || !strings.Contains(err.Error(), "ProbeTimeout") {
		t.Fatalf("Start = %v, want the membership's config error", err)
	}
}

// TestStopDeactivatesActivationCreatedDuringStop: an activation that a
// call creates while Stop begins (the call passed the stopping check
// before Stop, and is placed after Stop listed the activations) is
// Stop's to deactivate too: Stop returns within its context, with the
// catalog empty.
func TestStopDeactivatesActivationCreatedDuringStop(t *testing.T) {
	t.Parallel()
	placing, proceed := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(proceed) })
	h := newHarness(t, harnessOpt{})
	t.Cleanup(release) // before the harness's Stop, which would wait on the held call
	h.s.rt.Placing = func(id grain.ID) {
		if id.Key == "late" { // held after the stopping check
			close(placing)
			<-proceed
		}
	}
	hold := h.gate()
	h.script("hold", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("hold start")
		hold.wait(ctx, g)
		return &probe.Reply{}, nil
	})
	fx := h.probe("x").CallAsync(context.Background(), &probe.Request{Tag: "hold"})
	h.waitEvent("hold start")

	lateErr := make(chan error, 1)
	go func() {
		_, err := h.probe("late").Call(context.Background(), &probe.Request{})
		lateErr <- err
	}()
	select { // the call to "late" passes the stopping check
	case <-placing:
	case err := <-lateErr:
		t.Fatalf("the call to late ended before placement: %v", err)
	case <-time.After(defaultTestTimeout):
		t.Fatal("the call to late never reached placement")
	}

	stopErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		stopErr <- h.s.Stop(ctx)
	}()
	x := actOf(h, probe.ProbeGrainType, "x")
	testwait.For(t, defaultTestTimeout, "Stop to ask x to deactivate", func() bool {
		x.Mu.Lock()
		defer x.Mu.Unlock()
		return x.DeactivationPending()
	})
	release()
	<-lateErr
	hold.open()
	_ = fx.Wait(context.Background())
	if err := <-stopErr; err != nil {
		t.Fatalf("Stop: %v (activations left: %d)", err, h.s.Stats().Activations)
	}
}
