package gateway

import (
	"slices"
	"testing"

	"github.com/granaryio/granary/grain"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWithPrincipalStripsClientHeaders checks the filter the gateway runs
// over every envelope's headers.
func TestWithPrincipalStripsClientHeaders(t *testing.T) {
	t.Parallel()
	h := func(kv ...string) []*granaryv1.Header {
		var out []*granaryv1.Header
		for i := 0; i < len(kv); i += 2 {
			out = append(out, &granaryv1.Header{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	P := grain.PrincipalHeader
	for _, tt := range []struct {
		in        []*granaryv1.Header
		principal string
		want      []*granaryv1.Header
	}{
		{nil, "", nil},
		{nil, "alice", h(P, "alice")},
		{h(P, "root"), "", nil},
		{h(P, "root", "trace", "t", P, "x"), "alice", h("trace", "t", P, "alice")},
		{h("trace", "t"), "", h("trace", "t")},
		{h("Granary-Principal", "root"), "", h("Granary-Principal", "root")}, // not the reserved key: grain.Principal never reads it
	} {
		got := WithPrincipal(slices.Clone(tt.in), tt.principal)
		if len(got) != len(tt.want) {
			t.Errorf("withPrincipal(%v, %q) = %v, want %v", tt.in, tt.principal, got, tt.want)
			continue
		}
		for i := range got {
			if !proto.Equal(got[i], tt.want[i]) {
				t.Errorf("withPrincipal(%v, %q) = %v, want %v", tt.in, tt.principal, got, tt.want)
				break
			}
		}
	}
}
