package client_test

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/grpc/codes"
)

// hold starts a Slow call on ref that runs until the returned function
// is called, so that later calls to the grain wait in its queue and the
// gateway answers none of them before the client's timer fires.
func hold(t *testing.T, c *cluster, ref probe.ProbeRef) (release func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	f := ref.SlowAsync(ctx, &probe.Request{Tag: "hold"}, grain.WithTimeout(time.Hour))
	if got := recv(t, c.l.started, "the held call to start"); got != "hold" {
		t.Fatalf("started %q, want hold", got)
	}
	return func() {
		cancel()
		if _, err := f.Await(testCtx(t)); grain.Code(err) != codes.Canceled {
			t.Errorf("the held call ended with %v, want Canceled", err)
		}
		recv(t, c.l.cancelled, "the held call's context to end")
	}
}

// TestTimerSettledCalls: calls that only the client's own deadline timer
// ends, many at once, fail with DeadlineExceeded without a data race
// between the timer and the call's start (which once wrote the timer
// field the timer's callback read).
func TestTimerSettledCalls(t *testing.T) {
	c := newCluster(t, "a")
	cl := c.dial()
	ref := probe.NewProbeRef(cl, "busy")
	release := hold(t, c, ref)
	defer release()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 10 {
				_, err := ref.Call(context.Background(), &probe.Request{}, grain.WithTimeout(time.Duration(1+i)*time.Millisecond))
				if grain.Code(err) != codes.DeadlineExceeded {
					t.Errorf("got %v, want DeadlineExceeded", err)
				}
			}
		})
	}
	wg.Wait()
}

// watchedCtx is a cancellable context, with no deadline, that counts the
// context.AfterFunc registrations on it that are neither fired nor
// stopped. It is not a *context.cancelCtx, so context.AfterFunc uses its
// AfterFunc method.
type watchedCtx struct {
	done chan struct{}
	once sync.Once
	live atomic.Int64
	mu   sync.Mutex
	fns  map[*int]func()
}

func newWatchedCtx() *watchedCtx {
	return &watchedCtx{done: make(chan struct{}), fns: map[*int]func(){}}
}

func (w *watchedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (w *watchedCtx) Done() <-chan struct{}       { return w.done }
func (w *watchedCtx) Value(any) any               { return nil }
func (w *watchedCtx) Err() error {
	select {
	case <-w.done:
		return context.Canceled
	default:
		return nil
	}
}

func (w *watchedCtx) cancel() {
	w.once.Do(func() {
		close(w.done)
		w.mu.Lock()
		fns := w.fns
		w.fns = nil
		w.mu.Unlock()
		for _, f := range fns {
			w.live.Add(-1)
			go f()
		}
	})
}

func (w *watchedCtx) AfterFunc(f func()) func() bool {
	k := new(int)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		go f()
		return func() bool { return false }
	}
	w.fns[k] = f
	w.live.Add(1)
	return func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.fns[k]; !ok {
			return false
		}
		delete(w.fns, k)
		w.live.Add(-1)
		return true
	}
}

// TestAsyncTimeoutStopsContextWatch: an asynchronous call that the
// client's timer fails unregisters its watch on the caller's context, so
// a long-lived context does not keep every timed-out call reachable.
func TestAsyncTimeoutStopsContextWatch(t *testing.T) {
	c := newCluster(t, "a")
	cl := c.dial()
	ref := probe.NewProbeRef(cl, "busy")
	release := hold(t, c, ref)
	ctx := newWatchedCtx()
	defer ctx.cancel()
	f := ref.CallAsync(ctx, &probe.Request{}, grain.WithTimeout(50*time.Millisecond))
	_, err := f.Await(testCtx(t))
	n := ctx.live.Load()
	release()
	if grain.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	if n != 0 {
		t.Fatalf("%d watch(es) on the call's context left after the call timed out", n)
	}
}

// TestHugeTimeout: a timeout near math.MaxInt64 is cut to the longest a
// call may have, instead of wrapping the deadline arithmetic negative and
// failing the call at once.
func TestHugeTimeout(t *testing.T) {
	c := newCluster(t, "a")
	cl := c.dial()
	_, err := probe.NewProbeRef(cl, "huge").Call(context.Background(), &probe.Request{}, grain.WithTimeout(math.MaxInt64))
	if err != nil {
		t.Fatalf("a call with the largest timeout: %v", err)
	}
}

// TestDialPastDeadSeeds: seeds that refuse connections fail at once, so
// Dial reaches a live seed shuffled behind three dead ones well within a
// short context.
func TestDialPastDeadSeeds(t *testing.T) {
	c := newCluster(t, "a")
	live := c.silo("a").GatewayAddr()
	for range 4 {
		ctx, cancel := context.WithTimeout(testCtx(t), 2*time.Second)
		start := time.Now()
		cl, err := client.Dial(ctx, client.WithGateways("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", live))
		cancel()
		if err != nil {
			t.Fatalf("Dial with one live seed of four failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
		}
		cl.Close()
	}
}
