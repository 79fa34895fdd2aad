package grainrt

import (
	"context"
	"slices"
)

type headerKey struct{}

type header struct {
	key, value string
	next       *header
}

// WithHeader implements grain.WithHeader.
func WithHeader(ctx context.Context, key, value string) context.Context {
	prev, _ := ctx.Value(headerKey{}).(*header)
	return context.WithValue(ctx, headerKey{}, &header{key: key, value: value, next: prev})
}

// Header implements grain.Header.
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
// runtime can pass a caller's headers on to the callee's context.
func HeaderKey() any { return headerKey{} }

// AppendHeaders appends the headers in v, the value a context holds under
// HeaderKey, to kv as key, value pairs, the earliest set first, for a
// runtime that carries them to another process.
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
// An odd final key is ignored.
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
