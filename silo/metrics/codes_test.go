package metrics

import (
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The code label takes at most the 17 named gRPC codes: a grain that
// returns codes past Unauthenticated (mapped from HTTP statuses, say, or
// another system's error numbers) has its calls counted as Unknown, not
// one new series per value.
func TestCodeLabelIsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	var ctx grain.Context = &fakeCtx{id: grain.NewID("t.T", "k")}
	md := &grain.MethodDesc{Name: "Get", FullName: "/t.T/Get"}
	for c := 100; c < 600; c++ {
		_, _ = m.IncomingFilter()(ctx, md, nil, answer(nil, status.Error(codes.Code(c), "upstream said no")))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "granary_grain_calls_total" {
			continue
		}
		if n := len(mf.GetMetric()); n != 1 {
			t.Fatalf("granary_grain_calls_total has %d series for one method, want 1", n)
		}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			if l.GetName() == "code" && l.GetValue() != "Unknown" {
				t.Errorf("code label %q, want Unknown", l.GetValue())
			}
		}
	}
}
