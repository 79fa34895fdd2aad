package grain_test

import (
	"context"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
)

func TestHeader(t *testing.T) {
	bg := context.Background()
	if got := grain.Header(bg, "trace"); got != "" {
		t.Errorf("Header of a context without headers = %q, want \"\"", got)
	}
	if bg.Value(grainrt.HeaderKey()) != nil {
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
