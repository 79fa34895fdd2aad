package client

import (
	"context"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// checkCall refuses a call that names no method or no grain, before any
// filter sees it.
func checkCall(id grain.ID, m *grain.MethodDesc) error {
	switch {
	case m == nil:
		return status.Errorf(codes.InvalidArgument, "granary: call to %s without a method", id)
	case id.Type == "" || id.Key == "":
		return status.Errorf(codes.InvalidArgument, "granary: call to %q, which is not a grain", id.String())
	}
	return nil
}

// filtered sends a call through the outgoing filters (WithOutgoingFilters)
// and returns the Pending the outermost one returns. The innermost Send
// starts the call as InvokeAsync does, so its context and deadline end
// it whether or not anyone awaits. The caller's goroutine.
func (c *Client) filtered(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts []grain.CallOption) grain.Pending {
	if err := checkCall(id, m); err != nil {
		return grain.Failed(err)
	}
	return grainrt.SendThrough(c.o.outgoing, ctx, id, m, req, func(ctx context.Context, req proto.Message) grain.Pending {
		return c.startAsync(ctx, id, m, req, opts)
	})
}
