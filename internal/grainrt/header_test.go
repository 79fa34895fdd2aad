package grainrt_test

import (
	"context"
	"slices"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
)

// A runtime passes a caller's headers on to the callee by copying the value
// under HeaderKey into the callee's context.
func TestHeaderKeyCarriesHeaders(t *testing.T) {
	caller := grain.WithHeader(grain.WithHeader(context.Background(), "trace", "t1"), "auth", "token")
	callee := context.WithValue(context.Background(), grainrt.HeaderKey(), caller.Value(grainrt.HeaderKey()))
	for key, want := range map[string]string{"trace": "t1", "auth": "token", "other": ""} {
		if got := grain.Header(callee, key); got != want {
			t.Errorf("Header(callee, %q) = %q, want %q", key, got, want)
		}
	}
	// The callee adding a header does not change the caller's.
	grain.WithHeader(callee, "trace", "t9")
	if got := grain.Header(caller, "trace"); got != "t1" {
		t.Errorf("caller's trace header = %q after the callee set its own, want t1", got)
	}
}

func TestHeadersRoundTrip(t *testing.T) {
	ctx := grain.WithHeader(context.Background(), "a", "1")
	ctx = grain.WithHeader(ctx, "b", "2")
	ctx = grain.WithHeader(ctx, "a", "3")
	kv := grainrt.AppendHeaders(nil, ctx.Value(grainrt.HeaderKey()))
	if want := []string{"a", "1", "b", "2", "a", "3"}; !slices.Equal(kv, want) {
		t.Fatalf("AppendHeaders = %q, want %q", kv, want)
	}
	back := context.WithValue(context.Background(), grainrt.HeaderKey(), grainrt.HeadersFromPairs(kv))
	if grain.Header(back, "a") != "3" || grain.Header(back, "b") != "2" {
		t.Fatalf("after a round trip a=%q b=%q, want 3 and 2", grain.Header(back, "a"), grain.Header(back, "b"))
	}
	if grainrt.HeadersFromPairs(nil) != nil || grainrt.AppendHeaders(nil, nil) != nil {
		t.Fatal("no headers should stay nil")
	}
}
