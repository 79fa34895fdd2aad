package grain

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/granaryio/granary/internal/grainrt"
)

// Invocation continues an incoming call: the next filter, or at the end of
// the chain the grain method itself.
type Invocation func(ctx Context, req proto.Message) (proto.Message, error)

// An IncomingFilter runs around every request a grain receives, on the
// grain's turn, in registration order: the first one registered is the
// outermost. It may inspect or change the request and the reply, refuse the
// call by returning an error without calling next, or time it. It sees
// method descriptors, never a reflection of the grain.
type IncomingFilter func(ctx Context, m *MethodDesc, req proto.Message, next Invocation) (proto.Message, error)

// Send continues an outgoing call: the next filter, or at the end of the
// chain the runtime, which sends the call.
type Send func(ctx context.Context, req proto.Message) Pending

// An OutgoingFilter runs around every call that a silo's Caller sends,
// in registration order, on the caller's goroutine, when the call is sent.
// It may add headers with WithHeader, refuse the call by returning Failed,
// or wrap the Pending to see the reply.
type OutgoingFilter func(ctx context.Context, target ID, m *MethodDesc, req proto.Message, next Send) Pending

// WithHeader returns a context whose calls carry the header key=value to
// the callee, where Header reads it. Headers are how filters pass
// credentials and trace IDs; nothing else in a caller's context travels
// with a call.
func WithHeader(ctx context.Context, key, value string) context.Context {
	return grainrt.WithHeader(ctx, key, value)
}

// Header returns the value of a call header set by the caller, or "".
func Header(ctx context.Context, key string) string { return grainrt.Header(ctx, key) }
