package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/grpc/codes"
)

// TestCancelDuringOfferReachesTheGrain: a call cancelled after its request
// went out but before the client recorded where it went (the grain may
// already run) still has its cancellation sent, and the grain's context
// ends. The offer hook holds the client in exactly that gap. Not
// parallel: the hook is package-wide.
func TestCancelDuringOfferReachesTheGrain(t *testing.T) {
	c := newCluster(t, "a")
	cl := c.dial()
	ctx, cancel := context.WithCancel(testCtx(t))
	outcome := make(chan error, 1)
	looked := make(chan struct{}, 1)
	defer client.SetCancelHook(func() { looked <- struct{}{} })()
	defer client.SetOfferHook(func(attempt int) {
		if attempt != 1 {
			return
		}
		// The grain runs, and the call's cancellation looks for where it
		// went, before the offer is recorded.
		testwait.Recv(t, c.l.started, testTimeout, "the grain to start")
		cancel()
		testwait.Recv(t, looked, testTimeout, "the cancellation to look for the offer")
		outcome <- nil
	})()
	var f grain.Future[*probe.Reply]
	sent := make(chan struct{})
	go func() {
		f = probe.NewProbeRef(cl, "gap").SlowAsync(ctx, &probe.Request{Tag: "gap"}, grain.WithTimeout(time.Hour))
		close(sent)
	}()
	testwait.Recv(t, outcome, testTimeout, "the offer hook")
	testwait.Recv(t, sent, testTimeout, "the call to be offered")
	if _, err := f.Await(testCtx(t)); grain.Code(err) != codes.Canceled {
		t.Fatalf("the cancelled call returned %v, want Canceled", err)
	}
	if got := testwait.Recv(t, c.l.cancelled, testTimeout, "the grain's context to end"); got != "gap: context canceled" {
		t.Fatalf("the grain reported %q", got)
	}
}
