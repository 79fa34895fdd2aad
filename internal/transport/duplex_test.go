package transport

import (
	"testing"
	"time"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// watchingEcho is an echo that records StreamsEnded, and tells entered
// the payload of each envelope as its delivery begins.
type watchingEcho struct {
	*echo
	ended   chan string
	entered chan string
}

func newWatchingEcho() watchingEcho {
	return watchingEcho{newEcho(), make(chan string, 4), make(chan string, 16)}
}

func (w watchingEcho) StreamsEnded(peer string) { w.ended <- peer }

func (w watchingEcho) Deliver(from string, env *granaryv1.Envelope, r Responder) {
	w.entered <- string(env.Payload)
	w.echo.Deliver(from, env, r)
}

// TestCallOnAcceptedStream: the end that accepted a stream calls the end
// that dialled it on that stream (a gateway calling a client), the
// dialling end answers, and a peer with no stream up is refused as not
// sent. When the stream ends, both ends' watchers hear of it.
func TestCallOnAcceptedStream(t *testing.T) {
	t.Parallel()
	net := NewMemNetwork()
	ha, hb := newWatchingEcho(), newWatchingEcho()
	mk := func(self string, h Handler) *Transport {
		cfg := DefaultConfig()
		cfg.ClusterID, cfg.Self = "test", self
		tr, err := New(cfg, net.From(self), h)
		if err != nil {
			t.Fatal(err)
		}
		net.Listen(self, tr)
		return tr
	}
	a, b := mk("a", ha), mk("b", hb)
	defer func() {
		a.Close()
		b.Close()
		net.Unlisten("a")
		net.Unlisten("b")
		net.Wait()
	}()
	call := func(do func(done func(*granaryv1.Envelope, error))) (*granaryv1.Envelope, error) {
		type result struct {
			env *granaryv1.Envelope
			err error
		}
		ch := make(chan result, 1)
		do(func(env *granaryv1.Envelope, err error) {
			if env != nil {
				env = &granaryv1.Envelope{Payload: env.Payload, Code: env.Code}
			}
			ch <- result{env, err}
		})
		select {
		case r := <-ch:
			return r.env, r.err
		case <-time.After(defaultTestTimeout):
			t.Fatal("no answer")
			return nil, nil
		}
	}
	deadline := time.Now().Add(defaultTestTimeout)
	// b has no stream from a yet.
	if _, err := call(func(done func(*granaryv1.Envelope, error)) {
		b.CallAccepted("a", &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST}, deadline, done)
	}); !NotSent(err) {
		t.Fatalf("calling a peer with no stream: %v, want not sent", err)
	}
	a.SetPeer("b", "b")
	if env, err := call(func(done func(*granaryv1.Envelope, error)) {
		a.Call("b", &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, Payload: []byte("up")}, deadline, done)
	}); err != nil || string(env.Payload) != "up" {
		t.Fatalf("a to b: %v %v", env, err)
	}
	// Now b calls back on the stream a dialled.
	env, err := call(func(done func(*granaryv1.Envelope, error)) {
		b.CallAccepted("a", &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, Payload: []byte("back")}, deadline, done)
	})
	if err != nil || string(env.Payload) != "back" {
		t.Fatalf("b to a on a's stream: %v %v", env, err)
	}
	env, err = call(func(done func(*granaryv1.Envelope, error)) {
		b.CallAccepted("a", &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, Payload: []byte("fail")}, deadline, done)
	})
	if err != nil || codes.Code(env.Code) != codes.FailedPrecondition {
		t.Fatalf("an error answer: %v %v", env, err)
	}
	if err := b.SendAccepted("a", &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY, Payload: []byte("one")}, deadline); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ha.got:
		if got != "b:one" {
			t.Fatalf("a got %q", got)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("the one-way call did not arrive")
	}
	// b's call in flight, held by a's handler, fails when the stream
	// ends, and each end hears that its stream with the other ended.
	hold := make(chan struct{})
	ha.mu.Lock()
	ha.block = hold
	ha.mu.Unlock()
	pending := make(chan error, 1)
	b.CallAccepted("a", &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, Payload: []byte("lost")}, deadline, func(_ *granaryv1.Envelope, err error) { pending <- err })
	for got := ""; got != "lost"; {
		select {
		case got = <-ha.entered:
		case <-time.After(defaultTestTimeout):
			t.Fatal("a never began to deliver the call")
		}
	}
	a.RemovePeer("b", "test", false)
	close(hold)
	for _, w := range []struct {
		h    watchingEcho
		want string
	}{{ha, "b"}, {hb, "a"}} {
		select {
		case peer := <-w.h.ended:
			if peer != w.want {
				t.Fatalf("a watcher heard that its streams with %q ended, want %q", peer, w.want)
			}
		case <-time.After(defaultTestTimeout):
			t.Fatal("a watcher did not hear the stream end")
		}
	}
	select {
	case err := <-pending:
		if status.Code(err) != codes.Unavailable || NotSent(err) {
			t.Fatalf("a call in flight on a broken stream: %v, want Unavailable, not a not-sent error", err)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("the call on the broken stream never ended")
	}
}
