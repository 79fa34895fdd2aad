package grpcapi_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/grpcapi"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// refusingCaller refuses its first refusals calls with err, then answers
// each with an empty reply. It counts the calls.
type refusingCaller struct {
	err      error
	refusals int64
	calls    atomic.Int64
}

func (c *refusingCaller) Invoke(_ context.Context, _ grain.ID, m *grain.MethodDesc, _ proto.Message, _ ...grain.CallOption) (proto.Message, error) {
	if c.calls.Add(1) <= c.refusals {
		return nil, c.err
	}
	return m.NewResponse(), nil
}

func (c *refusingCaller) InvokeAsync(context.Context, grain.ID, *grain.MethodDesc, proto.Message, ...grain.CallOption) grain.Pending {
	return grain.Failed(status.Error(codes.Unimplemented, "grpcapi calls Invoke"))
}

// overloaded is a refusal like a silo's that sheds load: ResourceExhausted
// asking the client to wait d.
func overloaded(t *testing.T, d time.Duration) error {
	st, err := status.New(codes.ResourceExhausted, "granary: silo s1 is overloaded").WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(d)},
		&errdetails.ErrorInfo{Reason: "OVERLOADED", Domain: "granary.io", Metadata: map[string]string{"silo": "s1"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// serveCaller serves the keyed probe type through c on a loopback port and
// returns a connection to it.
func serveCaller(t *testing.T, c grain.Caller) *grpc.ClientConn {
	t.Helper()
	srv := grpc.NewServer()
	if err := grpcapi.Register(srv, c, []*grain.ServiceDesc{&probe.KeyedProbe_ServiceDesc}, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	return serveLoopback(t, srv)
}

// TestRetryInfoSetsThePushbackTrailer: a refusal of a call no grain saw
// that carries a RetryInfo reaches a gRPC client with its code and
// details and with the grpc-retry-pushback-ms trailer, in milliseconds
// rounded up; one without a RetryInfo, and a grain's error with one, set
// no such trailer.
func TestRetryInfoSetsThePushbackTrailer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		want  []string
		code  codes.Code
		retry bool
	}{
		{"one second", grpcapi.NotRun(overloaded(t, time.Second)), []string{"1000"}, codes.ResourceExhausted, true},
		{"under a millisecond", grpcapi.NotRun(overloaded(t, 300*time.Microsecond)), []string{"1"}, codes.ResourceExhausted, true},
		{"no RetryInfo", grpcapi.NotRun(status.Error(codes.ResourceExhausted, "full")), nil, codes.ResourceExhausted, false},
		// A grain's error that carries a RetryInfo: the call ran, so the
		// server does not ask for a retry.
		{"a grain's error", overloaded(t, time.Second), nil, codes.ResourceExhausted, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := serveCaller(t, &refusingCaller{err: tc.err, refusals: 1})
			var trailer metadata.MD
			err := cc.Invoke(testContext(t), "/probe.KeyedProbe/Call", &probe.KeyedRequest{Name: "k"}, new(probe.Reply), grpc.Trailer(&trailer))
			if status.Code(err) != tc.code {
				t.Fatalf("error %v, want %v", err, tc.code)
			}
			if got := trailer.Get(grpcapi.PushbackTrailer); !slices.Equal(got, tc.want) {
				t.Fatalf("trailer %s = %q, want %q", grpcapi.PushbackTrailer, got, tc.want)
			}
			var sawRetry bool
			for _, d := range status.Convert(err).Details() {
				_, ok := d.(*errdetails.RetryInfo)
				sawRetry = sawRetry || ok
			}
			if sawRetry != tc.retry {
				t.Fatalf("RetryInfo in the details: %v, want %v", sawRetry, tc.retry)
			}
		})
	}
}
