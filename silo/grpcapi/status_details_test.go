package grpcapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/proctest"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// statusDetails are the details of detailsError(reason).
func statusDetails(reason string) []protoadapt.MessageV1 {
	return []protoadapt.MessageV1{
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "text", Description: "refused"}}},
		&errdetails.ErrorInfo{Reason: reason, Domain: "probe.example"},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)},
	}
}

// detailsError is the keyed probe's error with details: InvalidArgument
// "refused" with statusDetails(reason).
func detailsError(reason string) error {
	st, err := status.New(codes.InvalidArgument, "refused").WithDetails(statusDetails(reason)...)
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// TestGrainStatusDetailsReachGRPCClients: the details of a grain's error
// status reach a plain gRPC client in the grpc-status-details-bin
// trailer, also when the grain wrapped the status with %w, and grpcurl
// prints them.
func TestGrainStatusDetailsReachGRPCClients(t *testing.T) {
	g := newGateway(t)
	tests := []struct {
		name, tag, reason, msg string
	}{
		{name: "status", tag: "details", reason: "R1", msg: "refused"},
		{name: "wrapped status", tag: "wrapped", reason: "R2", msg: "keyed probe: rpc error: code = InvalidArgument desc = refused"},
		{name: "large details", tag: "details", reason: strings.Repeat("r", 2<<10), msg: "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reply probe.Reply
			err := g.invoke(testContext(t), "/probe.KeyedProbe/Call", &probe.KeyedRequest{Name: "k", Tag: tt.tag, Text: tt.reason}, &reply)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || st.Message() != tt.msg {
				t.Fatalf("error %v, want InvalidArgument %q", err, tt.msg)
			}
			got, want := st.Details(), statusDetails(tt.reason)
			if len(got) != len(want) {
				t.Fatalf("details %v, want %v", got, want)
			}
			for i, d := range got {
				m, ok := d.(protoadapt.MessageV1)
				if !ok || !proto.Equal(protoadapt.MessageV2Of(m), protoadapt.MessageV2Of(want[i])) {
					t.Errorf("detail %d is %v, want %v", i, d, want[i])
				}
			}
		})
	}

	t.Run("grpcurl", func(t *testing.T) {
		bin := proctest.Grpcurl(t)
		r := grpcurl(t, bin, "", "-plaintext", "-d", `{"name": "k", "tag": "details", "text": "SHOWN_BY_GRPCURL"}`, g.addr, "probe.KeyedProbe/Call")
		if r.exit == 0 {
			t.Fatalf("grpcurl succeeded, want InvalidArgument:\n%v", r)
		}
		for _, want := range []string{
			"Code: InvalidArgument\n",
			"type.googleapis.com/google.rpc.BadRequest",
			`"reason": "SHOWN_BY_GRPCURL"`,
			"type.googleapis.com/google.rpc.RetryInfo",
		} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("grpcurl printed no %q:\n%v", want, r)
			}
		}
	})
}
