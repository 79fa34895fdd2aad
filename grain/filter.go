package grain

import (
	"context"
	"slices"

	"google.golang.org/protobuf/proto"
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

// SendThrough sends a call to target through the outgoing filters fs, the
// first outermost, with send, which starts the call, innermost; it returns
// the Pending the outermost filter returns. Runtime implementations (a
// silo's callers, the client) only.
func SendThrough(fs []OutgoingFilter, ctx context.Context, target ID, m *MethodDesc, req proto.Message, send Send) Pending {
	for i := len(fs) - 1; i >= 0; i-- {
		f, next := fs[i], send
		send = func(ctx context.Context, req proto.Message) Pending { return f(ctx, target, m, req, next) }
	}
	return send(ctx, req)
}

type headerKey struct{}

type header struct {
	key, value string
	next       *header
}

// WithHeader returns a context whose calls carry the header key=value to
// the callee, where Header reads it. Headers are how filters pass
// credentials and trace IDs; nothing else in a caller's context travels
// with a call.
func WithHeader(ctx context.Context, key, value string) context.Context {
	prev, _ := ctx.Value(headerKey{}).(*header)
	return context.WithValue(ctx, headerKey{}, &header{key: key, value: value, next: prev})
}

// Header returns the value of a call header set by the caller, or "".
func Header(ctx context.Context, key string) string {
	h, _ := ctx.Value(headerKey{}).(*header)
	for ; h != nil; h = h.next {
		if h.key == key {
			return h.value
		}
	}
	return ""
}

// HeaderKey is the context value key under which headers are stored, so a
// runtime can pass a caller's headers on to the callee's context. Runtime
// implementations only.
func HeaderKey() any { return headerKey{} }

// AppendHeaders appends the headers in v, the value a context holds under
// HeaderKey, to kv as key, value pairs, the earliest set first, for a
// runtime that carries them to another process. Runtime implementations
// only.
func AppendHeaders(kv []string, v any) []string {
	h, _ := v.(*header)
	start := len(kv)
	for ; h != nil; h = h.next {
		kv = append(kv, h.value, h.key) // reversed below
	}
	slices.Reverse(kv[start:])
	return kv
}

// HeadersFromPairs is the inverse of AppendHeaders: the value to hold
// under HeaderKey for headers kv (key, value pairs, the earliest first).
// An odd final key is ignored. Runtime implementations only.
func HeadersFromPairs(kv []string) any {
	var h *header
	for i := 0; i+1 < len(kv); i += 2 {
		h = &header{key: kv[i], value: kv[i+1], next: h}
	}
	if h == nil {
		return nil
	}
	return h
}
