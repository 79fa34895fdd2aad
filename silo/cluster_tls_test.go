package silo

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/security/certs"
	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/granaryio/granary/silo/membership"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// testCA is a CA whose silo certificates a test writes to files.
type testCA struct {
	t   testing.TB
	ca  *certs.CA
	dir string
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	ca, err := certs.NewCA(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{t: t, ca: ca, dir: t.TempDir()}
}

// siloFiles issues a silo certificate for name into a directory of its
// own, beside a bundle of the CAs given (this one when none).
func (c *testCA) siloFiles(name string, bundle ...*testCA) tlsfiles.Files {
	c.t.Helper()
	dir := filepath.Join(c.dir, name)
	leaf, err := c.ca.Issue(certs.LeafOptions{CommonName: name, DNSNames: []string{name}})
	if err != nil {
		c.t.Fatal(err)
	}
	cert, key, err := leaf.Write(dir, "silo")
	if err != nil {
		c.t.Fatal(err)
	}
	if len(bundle) == 0 {
		bundle = []*testCA{c}
	}
	return tlsfiles.Files{Cert: cert, Key: key, CA: writeBundle(c.t, filepath.Join(dir, "ca.crt"), bundle...)}
}

// writeBundle writes the certificates of cas to path and returns it.
func writeBundle(t testing.TB, path string, cas ...*testCA) string {
	t.Helper()
	var pem []byte
	for _, c := range cas {
		pem = append(pem, c.ca.CertPEM...)
	}
	if err := certs.WriteFileAtomic(path, pem, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// withClusterTLS returns a tweak that gives a silo mutual TLS from files
// and a logger whose warnings the test reads; src, when not nil, receives
// the Source so the test can make it re-read its files.
func withClusterTLS(t testing.TB, files tlsfiles.Files, logs **observer.ObservedLogs, src **tlsfiles.Source) func(*Config) {
	return func(cfg *Config) {
		s, err := tlsfiles.Load(files, tlsfiles.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if src != nil {
			*src = s
		}
		cfg.Cluster.ServerTLS, cfg.Cluster.DialTLS, err = ClusterTLS(s)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Cluster.LoadReportInterval = 50 * time.Millisecond
		// These tests are about TLS, not failure detection: a probe
		// that a loaded machine under the race detector answers late
		// must not declare a silo dead mid-test.
		m := &cfg.Cluster.Membership
		m.ProbeInterval, m.ProbeTimeout, m.SuspicionMult = time.Second, 500*time.Millisecond, 6
		if logs != nil {
			core, l := observer.New(zap.WarnLevel)
			cfg.Logger, *logs = zap.New(core), l
		}
	}
}

func registerBenchProbe(t testing.TB) func(*Silo) {
	return func(s *Silo) {
		if err := probe.RegisterProbeGrain(s, func(grain.ID) probe.ProbeGrain { return &benchProbe{} }); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterRefusesASiloOfAnotherCA: a silo that has the gossip (same
// cluster, no key) but a certificate from another CA is never admitted:
// the cluster places nothing on it, it sends and receives no envelope, and
// both sides log why.
func TestClusterRefusesASiloOfAnotherCA(t *testing.T) {
	t.Parallel()
	cluster, other := newTestCA(t, "cluster"), newTestCA(t, "other")
	var aLogs, xLogs *observer.ObservedLogs
	a := grpcSiloWith(t, "a", nil, registerBenchProbe(t), withClusterTLS(t, cluster.siloFiles("a"), &aLogs, nil))
	// A starting silo verifies the members it knows before it turns
	// active, so that it never serves while taking itself for alone: the
	// view b has at the instant it turns active holds a.
	var bSilo *Silo
	viewAtActive := -1
	tlsTweak := withClusterTLS(t, cluster.siloFiles("b"), nil, nil)
	b := grpcSiloWith(t, "b", []string{gossipAddr(a)}, func(s *Silo) {
		bSilo = s
		registerBenchProbe(t)(s)
	}, func(cfg *Config) {
		tlsTweak(cfg)
		cfg.Cluster.NewMembership = func(mc membership.Config, on func(membership.Event)) (membership.Service, error) {
			m, err := membership.New(mc, on)
			if err != nil {
				return nil, err
			}
			return &onActive{Service: m, f: func() {
				bSilo.cl.ViewMu.Lock()
				viewAtActive = len(bSilo.cl.Members)
				bSilo.cl.ViewMu.Unlock()
			}}, nil
		}
	})
	if viewAtActive != 1 {
		t.Errorf("b turned active knowing %d other silos, want a", viewAtActive)
	}
	testwait.For(t, defaultTestTimeout, "a and b to admit each other", func() bool {
		return hostsOf(a, probe.ProbeGrainType) == 2 && hostsOf(b, probe.ProbeGrainType) == 2
	})
	// The stranger trusts the cluster's CA too: only its own certificate
	// is wrong.
	x := grpcSiloWith(t, "x", []string{gossipAddr(a)}, registerBenchProbe(t), withClusterTLS(t, other.siloFiles("x", other, cluster), &xLogs, nil))
	testwait.For(t, defaultTestTimeout, "the gossip to carry x to a", func() bool { return len(a.cl.Mship.Members()) == 3 })
	testwait.For(t, defaultTestTimeout, "a to refuse x's certificate", func() bool {
		return a.Rejections().Count(security.ListenerSilo, security.ReasonUnknownCA) > 0
	})
	testwait.For(t, defaultTestTimeout, "x to learn its certificate was refused", func() bool {
		return x.Rejections().Count(security.ListenerDial, security.ReasonBadCertificate)+
			x.Rejections().Count(security.ListenerDial, security.ReasonUnknownCA) > 0
	})
	for _, s := range []*Silo{a, b} {
		if n := hostsOf(s, probe.ProbeGrainType); n != 2 {
			t.Errorf("%s places probes on %d silos, want 2: x was admitted", s.cfg.Name, n)
		}
	}
	if n := len(a.Members()); n != 2 {
		t.Errorf("a lists %d members, want a and b: x is no member (the admin server forwards to members)", n)
	}
	if n := hostsOf(x, probe.ProbeGrainType); n != 1 {
		t.Errorf("x places probes on %d silos, want only itself", n)
	}
	// Calls through a and b reach only a and b.
	for i := range 64 {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		_, err := probe.NewProbeRef(a, fmt.Sprintf("k%d", i)).Call(ctx, &probe.Request{N: 1})
		cancel()
		if err != nil {
			t.Fatalf("call %d through a: %v", i, err)
		}
	}
	if n := x.TypeStats()[0].Activations; n != 0 {
		t.Errorf("x holds %d activations of calls through the cluster", n)
	}
	for name, logs := range map[string]*observer.ObservedLogs{"a": aLogs, "x": xLogs} {
		if logs.FilterMessageSnippet("refused").FilterFieldKey("remote").Len() == 0 {
			t.Errorf("%s's log does not say why x was refused: %v", name, logs.All())
		}
	}
}

// onActive is a membership Service that calls f when the silo turns
// itself active, before the change is made.
type onActive struct {
	membership.Service
	f func()
}

func (o *onActive) Update(fn func(*membership.Member)) error {
	var m membership.Member
	fn(&m)
	if m.Status == membership.StatusActive {
		o.f()
	}
	return o.Service.Update(fn)
}

// TestClusterCertificateRotationUnderLoadFailsNoCall rotates a 3-silo
// cluster onto a new CA under load: bundles first take both CAs, then
// every silo's certificate is reissued by the new CA, then the old CA is
// dropped, each step read by the silos without a restart. A silo of the
// new CA alone joins at the end, which proves the others serve and accept
// the new certificates. No call fails.
func TestClusterCertificateRotationUnderLoadFailsNoCall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a cluster on loopback")
	}
	oldCA, newCA := newTestCA(t, "old"), newTestCA(t, "new")
	names := []string{"a", "b", "c"}
	files := map[string]tlsfiles.Files{}
	srcs := map[string]**tlsfiles.Source{}
	var silos []*Silo
	for _, name := range names {
		files[name] = oldCA.siloFiles(name)
		var src *tlsfiles.Source
		srcs[name] = &src
		var seeds []string
		if len(silos) > 0 {
			seeds = []string{gossipAddr(silos[0])}
		}
		silos = append(silos, grpcSiloWith(t, name, seeds, registerBenchProbe(t), withClusterTLS(t, files[name], nil, srcs[name])))
	}
	testwait.For(t, defaultTestTimeout, "three silos to admit each other", func() bool {
		for _, s := range silos {
			if hostsOf(s, probe.ProbeGrainType) != 3 {
				return false
			}
		}
		return true
	})

	var calls, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				via := silos[r.IntN(len(silos))]
				ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
				_, err := probe.NewProbeRef(via, fmt.Sprintf("k%d", r.IntN(512))).Call(ctx, &probe.Request{N: 1})
				cancel()
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
		if n := failed.Load(); n != 0 {
			t.Errorf("%d of %d calls failed during the rotation; the first: %v", n, calls.Load(), firstErr.Load())
		}
		t.Logf("%d calls during the rotation", calls.Load())
	}()
	reread := func(step string) {
		t.Helper()
		for _, name := range names {
			if err := (*srcs[name]).Check(); err != nil {
				t.Fatalf("%s: %s re-reading its files: %v", step, name, err)
			}
		}
		// Let calls run on the new material for a while.
		n := calls.Load()
		testwait.For(t, defaultTestTimeout, "calls after "+step, func() bool { return calls.Load() > n+200 })
	}

	for _, name := range names {
		writeBundle(t, files[name].CA, oldCA, newCA)
	}
	reread("both CAs in every bundle")
	for _, name := range names {
		leaf, err := newCA.ca.Issue(certs.LeafOptions{CommonName: name, DNSNames: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := leaf.Write(filepath.Dir(files[name].Cert), "silo"); err != nil {
			t.Fatal(err)
		}
	}
	reread("new certificates")
	for _, name := range names {
		writeBundle(t, files[name].CA, newCA)
	}
	reread("the old CA dropped")

	// Each silo now serves a certificate of the new CA.
	onlyNew, err := tlsfiles.Load(tlsfiles.Files{CA: writeBundle(t, filepath.Join(t.TempDir(), "new.crt"), newCA)}, tlsfiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range silos {
		_, addr := s.ClusterAddrs()
		conn, err := tls.Dial("tcp", addr, onlyNew.ClientConfig(tlsfiles.ClientOptions{SkipNameCheck: true, NextProtos: []string{"h2"}}))
		if err != nil {
			t.Errorf("%s does not serve a certificate of the new CA: %v", s.cfg.Name, err)
			continue
		}
		conn.Close()
	}
	d := grpcSiloWith(t, "d", []string{gossipAddr(silos[0])}, registerBenchProbe(t), withClusterTLS(t, newCA.siloFiles("d"), nil, nil))
	testwait.For(t, defaultTestTimeout, "the cluster to admit a silo of the new CA", func() bool {
		for _, s := range append(silos, d) {
			if hostsOf(s, probe.ProbeGrainType) != 4 {
				return false
			}
		}
		return true
	})
	n := calls.Load()
	testwait.For(t, defaultTestTimeout, "calls with d in the cluster", func() bool { return calls.Load() > n+200 })
}
