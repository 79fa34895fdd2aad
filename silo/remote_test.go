package silo

import (
	"strings"
	"testing"

	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/silo/internal/local"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCallChainWithRemoteLinks: a call that came from another silo has
// links with no local activation; its Context's CallChain names them
// instead of dereferencing a nil activation.
func TestCallChainWithRemoteLinks(t *testing.T) {
	t.Parallel()
	c := &local.Call{}
	c.Ctx.C = c
	c.Chain = &local.ChainLink{Remote: &granaryv1.ChainLink{Silo: "s-1", Grain: "bank.Account/alice"}}
	c.Depth = 1
	if got := c.Ctx.CallChain(); len(got) != 1 || got[0].String() != "bank.Account/alice" {
		t.Fatalf("CallChain = %v, want [bank.Account/alice]", got)
	}
}

// TestStatusThroughEnvelope: an error sent in a response envelope comes
// back with its code and its message once, not wrapped in a second
// "rpc error" prefix.
func TestStatusThroughEnvelope(t *testing.T) {
	t.Parallel()
	err := status.Errorf(codes.NotFound, "granary: grain type x has no method %q", "Y")
	got := transport.StatusOf(transport.SetStatus(&granaryv1.Envelope{}, err))
	if status.Code(got) != codes.NotFound || got.Error() != err.Error() || strings.Count(got.Error(), "rpc error") != 1 {
		t.Fatalf("round trip of %v = %v", err, got)
	}
	if transport.StatusOf(&granaryv1.Envelope{}) != nil {
		t.Fatal("an envelope with code 0 should carry no error")
	}
}
