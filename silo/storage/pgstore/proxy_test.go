package pgstore

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// proxy forwards TCP connections to a server. Frozen, it holds every
// byte in both directions without closing a connection, as a server that
// has stopped answering, or a partitioned network, would; killed, it
// closes every connection and refuses new ones, as a server that is gone
// would.
type proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the proxy's goroutines
	once   sync.Once      // kill

	mu     sync.Mutex
	thawed *sync.Cond // signalled when frozen or killed changes
	frozen bool
	killed bool
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.thawed = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.kill)
	return p
}

func (p *proxy) addr() (host string, port uint16) {
	a := p.ln.Addr().(*net.TCPAddr)
	return a.IP.String(), uint16(a.Port)
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// track registers c, to be closed by kill; false, having closed it, if
// the proxy was killed.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *proxy) serve(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, defaultTestTimeout)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(server) {
		client.Close()
		return
	}
	p.wg.Go(func() { p.pipe(client, server) })
	p.pipe(server, client)
}

// pipe copies src to dst, holding the bytes while the proxy is frozen,
// until either fails; then it closes both.
func (p *proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitThawed() {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitThawed waits while the proxy is frozen; false if it was killed.
func (p *proxy) waitThawed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.frozen && !p.killed {
		p.thawed.Wait()
	}
	return !p.killed
}

func (p *proxy) setFrozen(frozen bool) {
	p.mu.Lock()
	p.frozen = frozen
	p.thawed.Broadcast()
	p.mu.Unlock()
}

// kill closes every connection, refuses new ones, and waits for the
// proxy's goroutines. Idempotent.
func (p *proxy) kill() {
	p.once.Do(func() {
		p.mu.Lock()
		p.killed = true
		p.thawed.Broadcast()
		conns := p.conns
		p.mu.Unlock()
		p.ln.Close()
		for _, c := range conns {
			c.Close()
		}
		p.wg.Wait()
	})
}

// TestServerStopsAnswering: operations on a store whose server stops
// answering fail when their context ends, the store recovers when it
// answers again, and operations on a store whose server is gone fail at
// once.
func TestServerStopsAnswering(t *testing.T) {
	dsn := pgtest.DSN(t)
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(pc.ConnConfig.Host, "/") {
		t.Skipf("%s names a Unix socket; this test needs a TCP address to proxy", pgtest.EnvDSN)
	}
	p := startProxy(t, net.JoinHostPort(pc.ConnConfig.Host, strconv.Itoa(int(pc.ConnConfig.Port))))
	pc.ConnConfig.Host, pc.ConnConfig.Port = p.addr()
	pc.ConnConfig.Fallbacks = nil
	pc.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the proxy dies, then the pool closes.
	t.Cleanup(pool.Close)
	t.Cleanup(p.kill)
	ctx := testCtx(t)
	service := pgtest.ServiceID(t)
	s, err := Open(ctx, Config{Pool: pool, ServiceID: service})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	// direct reaches the server directly, and deletes the test's rows.
	direct := openStore(t, Config{ServiceID: service})
	id := grain.NewID("t.G", "k")
	e, err := s.WriteState(ctx, id, "s", []byte("x"), "")
	if err != nil {
		t.Fatal(err)
	}

	p.setFrozen(true)
	const opTimeout = 300 * time.Millisecond
	// The first operation finds a pooled connection that hangs; later ones
	// need a new connection, whose start-up hangs.
	for i := range 3 {
		opCtx, cancel := context.WithTimeout(ctx, opTimeout)
		start := time.Now()
		_, err := s.ReadState(opCtx, id, "s")
		elapsed := time.Since(start)
		cancel()
		if err == nil {
			t.Fatalf("read %d from a silent server succeeded", i)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("read %d: %v, want it to wrap context.DeadlineExceeded", i, err)
		}
		if elapsed > opTimeout+time.Second {
			t.Fatalf("read %d returned %v after its context ended: %v", i, elapsed-opTimeout, err)
		}
		t.Logf("read %d failed after %v: %v", i, elapsed.Round(time.Millisecond), err)
	}

	p.setFrozen(false)
	r, err := s.ReadState(ctx, id, "s")
	if err != nil || r.ETag != e {
		t.Fatalf("read once the server answers again: %+v, %v; want ETag %q", r, err, e)
	}

	p.kill()
	start := time.Now()
	_, err = s.WriteState(ctx, id, "s", []byte("y"), e)
	if err == nil {
		t.Fatal("write to a server that is gone succeeded")
	}
	if elapsed := time.Since(start); elapsed > time.Second || ctx.Err() != nil {
		t.Fatalf("write to a server that is gone failed after %v: %v", elapsed, err)
	}
	t.Logf("write to a server that is gone: %v", err)
	if r, err := direct.ReadState(ctx, id, "s"); err != nil || r.ETag != e {
		t.Fatalf("read from the server directly: %+v, %v; want ETag %q", r, err, e)
	}
}
