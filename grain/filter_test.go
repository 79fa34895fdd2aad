package grain_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/granaryio/granary/grain"
	"google.golang.org/protobuf/proto"
)

func TestHeader(t *testing.T) {
	bg := context.Background()
	if got := grain.Header(bg, "trace"); got != "" {
		t.Errorf("Header of a context without headers = %q, want \"\"", got)
	}
	if bg.Value(grain.HeaderKey()) != nil {
		t.Error("a context without headers has a value under HeaderKey")
	}

	a := grain.WithHeader(bg, "trace", "t1")
	b := grain.WithHeader(a, "auth", "token")
	c := grain.WithHeader(b, "trace", "t2")
	d, cancel := context.WithCancel(c)
	defer cancel()
	e := grain.WithHeader(d, "auth", "")

	tests := []struct {
		name string
		ctx  context.Context
		key  string
		want string
	}{
		{"set", a, "trace", "t1"},
		{"absent key", a, "auth", ""},
		{"outer context keeps its headers", b, "trace", "t1"},
		{"second key", b, "auth", "token"},
		{"latest value wins", c, "trace", "t2"},
		{"parent unchanged by a child", a, "trace", "t1"},
		{"earlier key still seen past a later one", c, "auth", "token"},
		{"through a derived context", d, "trace", "t2"},
		{"an empty value replaces", e, "auth", ""},
		{"other key past an empty value", e, "trace", "t2"},
		{"key match is exact", c, "Trace", ""},
		{"empty key absent", c, "", ""},
	}
	for _, tt := range tests {
		if got := grain.Header(tt.ctx, tt.key); got != tt.want {
			t.Errorf("%s: Header(%q) = %q, want %q", tt.name, tt.key, got, tt.want)
		}
	}
}

// A runtime passes a caller's headers on to the callee by copying the value
// under HeaderKey into the callee's context.
func TestHeaderKeyCarriesHeaders(t *testing.T) {
	caller := grain.WithHeader(grain.WithHeader(context.Background(), "trace", "t1"), "auth", "token")
	callee := context.WithValue(context.Background(), grain.HeaderKey(), caller.Value(grain.HeaderKey()))
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
	kv := grain.AppendHeaders(nil, ctx.Value(grain.HeaderKey()))
	if want := []string{"a", "1", "b", "2", "a", "3"}; !slices.Equal(kv, want) {
		t.Fatalf("AppendHeaders = %q, want %q", kv, want)
	}
	back := context.WithValue(context.Background(), grain.HeaderKey(), grain.HeadersFromPairs(kv))
	if grain.Header(back, "a") != "3" || grain.Header(back, "b") != "2" {
		t.Fatalf("after a round trip a=%q b=%q, want 3 and 2", grain.Header(back, "a"), grain.Header(back, "b"))
	}
	if grain.HeadersFromPairs(nil) != nil || grain.AppendHeaders(nil, nil) != nil {
		t.Fatal("no headers should stay nil")
	}
}

// SendThrough runs the filters in order, the first outermost, each
// handing on what it was given, and the innermost Send last.
func TestSendThroughOrder(t *testing.T) {
	var order []string
	filter := func(name string) grain.OutgoingFilter {
		return func(ctx context.Context, target grain.ID, m *grain.MethodDesc, req proto.Message, next grain.Send) grain.Pending {
			order = append(order, name+">"+target.String())
			p := next(grain.WithHeader(ctx, name, "1"), req)
			order = append(order, "<"+name)
			return p
		}
	}
	id := grain.NewID("t.T", "k")
	sent := grain.Failed(errors.New("sent"))
	p := grain.SendThrough([]grain.OutgoingFilter{filter("a"), filter("b")}, context.Background(), id, &grain.MethodDesc{Name: "M"}, nil,
		func(ctx context.Context, req proto.Message) grain.Pending {
			order = append(order, "send a="+grain.Header(ctx, "a")+" b="+grain.Header(ctx, "b"))
			return sent
		})
	if p != sent {
		t.Error("SendThrough did not return the innermost Pending")
	}
	if got, want := strings.Join(order, ","), "a>t.T/k,b>t.T/k,send a=1 b=1,<b,<a"; got != want {
		t.Errorf("order %s, want %s", got, want)
	}
}
