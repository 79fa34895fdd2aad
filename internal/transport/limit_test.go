package transport

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/security"
	"go.uber.org/zap"
)

// listenIdle starts a listener of the default configuration, tweaked, that
// serves a transport, and returns its address and rejections.
func listenIdle(t *testing.T, tweak func(*Config)) (string, *security.Rejections) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ClusterID, cfg.Self = "c", "s"
	cfg.Rejections = security.NewRejections(zap.NewNop())
	if tweak != nil {
		tweak(&cfg)
	}
	l, err := ListenGRPC("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	gn := NewGRPCNetwork(cfg)
	t.Cleanup(func() { gn.Close() })
	tr, err := New(cfg, gn, newEcho())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Serve(tr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Stop()
		tr.Close()
	})
	return l.Addr(), cfg.Rejections
}

// TestIdleConnectionsAreReapedWithinTheHandshakeTimeout opens 2,000
// connections that never send a byte: with the default configuration the
// server closes each one about HandshakeTimeout after it accepted it, and
// not much before. Each connection is timed from its own dial, because
// the server's clock for it starts only then: opening 2,000 connections
// can itself take longer than the timeout on a loaded machine under the
// race detector.
func TestIdleConnectionsAreReapedWithinTheHandshakeTimeout(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for the 10 s handshake timeout")
	}
	addr, _ := listenIdle(t, nil)
	const n = 2000
	timeout := DefaultConfig().HandshakeTimeout
	// What the server may take beyond the timeout, from a connection's
	// dial: to accept it, and for its close to reach the reader.
	const slack = 10 * time.Second
	start := time.Now()
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		shortest, longest time.Duration
	)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		dialed := time.Now()
		conns = append(conns, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The bound: a connection still open at its timeout plus the
			// slack fails the test.
			c.SetReadDeadline(dialed.Add(timeout + slack))
			buf := make([]byte, 512) // the server's HTTP/2 settings arrive first
			for {
				_, err := c.Read(buf)
				if err == nil {
					continue
				}
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Errorf("a connection was still open %v after its dial", timeout+slack)
					return
				}
				lived := time.Since(dialed)
				mu.Lock()
				if shortest == 0 || lived < shortest {
					shortest = lived
				}
				longest = max(longest, lived)
				mu.Unlock()
				return
			}
		}()
	}
	dialling := time.Since(start)
	wg.Wait()
	if shortest < timeout/2 {
		t.Errorf("a connection closed %v after its dial, long before the handshake timeout: not by it", shortest)
	}
	t.Logf("dialled %d connections in %v; each closed %v to %v after its dial", n, dialling, shortest, longest)
}

// TestConnectionsOverTheCapAreClosedAndCounted holds a listener's cap of
// connections open and checks that the next is closed at once, counted,
// and that a closed connection frees its place.
func TestConnectionsOverTheCapAreClosedAndCounted(t *testing.T) {
	t.Parallel()
	addr, rej := listenIdle(t, func(c *Config) { c.MaxConnections = 3 })
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	over.SetReadDeadline(time.Now().Add(defaultTestTimeout))
	if _, err := over.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection over the cap was served")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection over the cap was left open")
	}
	if got := rej.Count(security.ListenerSilo, security.ReasonConnectionLimit); got != 1 {
		t.Errorf("%d refusals counted, want 1", got)
	}
	held[0].Close()
	held = held[1:]
	// The freed place goes to the next connection: the server writes its
	// HTTP/2 settings to a connection it serves.
	deadline := time.Now().Add(defaultTestTimeout)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err = c.Read(make([]byte, 1))
		if err == nil {
			c.Close()
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("a closed connection never freed its place")
		}
	}
}

// TestGarbageOnTheListenerIsCounted sends bytes that are neither TLS nor
// HTTP/2: the connection is refused and counted as a malformed frame.
func TestGarbageOnTheListenerIsCounted(t *testing.T) {
	t.Parallel()
	addr, rej := listenIdle(t, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, defaultTestTimeout, "the garbage to be counted", func() bool {
		return rej.Count(security.ListenerSilo, security.ReasonMalformedFrame) == 1
	})
}
