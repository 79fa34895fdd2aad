package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/silo/membership"
	"go.uber.org/zap"
)

// peerGate admits members to the cluster view only once they have proved,
// with a TLS handshake to the gRPC address they gossip, that they hold a
// silo certificate of the cluster's CA. Gossip is not TLS: a silo with the
// gossip key but a certificate from another CA would otherwise be seen as
// a member, placed grains on and given directory ranges, and every call
// routed to it would fail. Until the handshake succeeds the member is
// pending: the view, placement, the directory ring and the transport know
// nothing of it. A failed handshake is counted and warned of (the other
// side counts it too) and tried again, at growing intervals up to
// maxGateRetry, while the member is alive.
//
// The gate is only made with Cluster.ServerTLS; without TLS every member
// is admitted at once, as before.
type peerGate struct {
	cl  *Cluster
	tls *tls.Config // DialTLS, offering h2 as gRPC does
	// timeout bounds one handshake: the transport's DialTimeout.
	timeout time.Duration
	retry   time.Duration // the first wait after a failed handshake

	// pending holds the latest event of each member being verified;
	// verified the members admitted. viewMu.
	pending  map[string]membership.Member
	verified map[string]bool
	stopped  bool // close began: no verification starts

	// ctx ends when the gate closes: it ends the waits and handshakes in
	// flight.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// maxGateRetry bounds the wait between two handshakes with a member that
// failed one.
const maxGateRetry = 30 * time.Second

func newPeerGate(cl *Cluster, dial *tls.Config, timeout, retry time.Duration) *peerGate {
	c := dial.Clone()
	if len(c.NextProtos) == 0 {
		c.NextProtos = []string{"h2"}
	}
	g := &peerGate{
		cl: cl, tls: c, timeout: timeout, retry: retry,
		pending:  map[string]membership.Member{},
		verified: map[string]bool{},
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g
}

// admitLocked reports whether ev may be applied to the view now. A member
// not yet verified is held pending, and its verification started, instead.
// viewMu held.
func (g *peerGate) admitLocked(ev membership.Event) bool {
	id := ev.Member.ID
	if ev.Kind == membership.EventLeft || ev.Kind == membership.EventFailed {
		_, waiting := g.pending[id]
		delete(g.pending, id)
		was := g.verified[id]
		delete(g.verified, id) // a return is verified again
		// A member never admitted is unknown to the view: nothing to undo.
		return was || !waiting
	}
	if g.verified[id] {
		return true
	}
	_, probing := g.pending[id]
	g.pending[id] = ev.Member
	if !probing && !g.stopped {
		g.wg.Add(1)
		go g.verify(id)
	}
	return false
}

// verify shakes hands with member id until it passes, it leaves, or the
// silo stops; on success it applies the member's latest event. It owns no
// lock while it waits.
func (g *peerGate) verify(id string) {
	defer g.wg.Done()
	wait := g.retry
	for {
		g.cl.ViewMu.Lock()
		m, ok := g.pending[id]
		g.cl.ViewMu.Unlock()
		if !ok {
			return
		}
		err := g.handshake(g.ctx, m.GRPCAddr)
		if err == nil {
			g.cl.ViewMu.Lock()
			m, ok = g.pending[id]
			if ok && !g.cl.Closed.Load() {
				delete(g.pending, id)
				g.verified[id] = true
				g.cl.log.Info("silo verified by mutual TLS: admitted to the cluster", zap.String("member", id), zap.String("grpc", m.GRPCAddr))
				g.cl.applyLocked(membership.Event{Kind: membership.EventJoined, Member: m})
			}
			g.cl.ViewMu.Unlock()
			return
		}
		var ne *net.OpError
		if errors.As(err, &ne) && ne.Op == "dial" {
			// Not up yet, or gone: not a refusal.
			g.cl.log.Debug("cannot reach a silo to verify it yet", zap.String("member", id), zap.Error(err))
		} else {
			g.cl.s.Cfg.Rejections.Reject(security.ListenerDial, security.HandshakeReason(err), m.GRPCAddr,
				errors.New("silo "+id+" is kept out of the cluster: "+err.Error()))
		}
		select {
		case <-g.ctx.Done():
			return
		case <-g.cl.s.Clock.After(wait):
		}
		wait = min(2*wait, maxGateRetry)
	}
}

// verifyNow shakes hands with each of members at once, waiting for all
// (each bounded by the handshake timeout, all by ctx), and admits those
// that pass: a starting silo learns its peers before it serves. Those
// that fail are verified in the background like any new member.
func (g *peerGate) verifyNow(ctx context.Context, members []membership.Member) {
	var wg sync.WaitGroup
	passed := make([]bool, len(members))
	for i, m := range members {
		if m.ID == g.cl.SelfID {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			passed[i] = g.handshake(ctx, m.GRPCAddr) == nil
		}()
	}
	wg.Wait()
	g.cl.ViewMu.Lock()
	defer g.cl.ViewMu.Unlock()
	for i, m := range members {
		if passed[i] {
			g.verified[m.ID] = true
		}
	}
}

// handshake runs one TLS handshake with the silo at addr, within ctx,
// the handshake timeout and the gate's life.
func (g *peerGate) handshake(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	defer context.AfterFunc(g.ctx, cancel)()
	d := tls.Dialer{Config: g.tls}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	// TLS 1.3 tells a client its certificate was refused only on the
	// first read after the handshake: read until the server has spoken
	// (its HTTP/2 settings) or refused.
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { conn.Close() })() // a closing gate ends the read
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	_, err = conn.Read(make([]byte, 1))
	return err
}

// close stops the verifications and waits for them; none starts after
// it, whatever membership events still arrive.
func (g *peerGate) close() {
	g.cl.ViewMu.Lock()
	g.stopped = true
	g.cl.ViewMu.Unlock()
	g.cancel()
	g.wg.Wait()
}
