package client

import (
	"context"

	"github.com/granaryio/granary/grain"
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
	fc := &filterChain{c: c, id: id, m: m, opts: opts}
	return fc.send(0)(ctx, req)
}

// filterChain is one call on its way through the outgoing filters.
type filterChain struct {
	c    *Client
	id   grain.ID
	m    *grain.MethodDesc
	opts []grain.CallOption
}

// send returns the Send that runs filter i and the ones after it, or,
// past the last, that starts the call.
func (fc *filterChain) send(i int) grain.Send {
	fs := fc.c.o.outgoing
	if i == len(fs) {
		return func(ctx context.Context, req proto.Message) grain.Pending {
			return fc.c.startAsync(ctx, fc.id, fc.m, req, fc.opts)
		}
	}
	return func(ctx context.Context, req proto.Message) grain.Pending {
		return fs[i](ctx, fc.id, fc.m, req, fc.send(i+1))
	}
}
