package transport

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// testDetails are one of each kind of detail the tests send.
func testDetails() []protoadapt.MessageV1 {
	return []protoadapt.MessageV1{
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "amount", Description: "must be positive"}}},
		&errdetails.ErrorInfo{Reason: "INSUFFICIENT_FUNDS", Domain: "bank.example", Metadata: map[string]string{"balance": "0"}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)},
	}
}

// withDetails is a status error with code, msg and details.
func withDetails(t testing.TB, code codes.Code, msg string, details ...protoadapt.MessageV1) error {
	t.Helper()
	st, err := status.New(code, msg).WithDetails(details...)
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// wantStatus fails the test unless err has code, message msg and exactly
// the details want, in order.
func wantStatus(t *testing.T, err error, code codes.Code, msg string, want ...protoadapt.MessageV1) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code || st.Message() != msg {
		t.Fatalf("error = %v, want %v %q", err, code, msg)
	}
	got := st.Details()
	if len(got) != len(want) {
		t.Fatalf("error %v has details %v, want %v", err, got, want)
	}
	for i, d := range got {
		m, ok := d.(protoadapt.MessageV1)
		if !ok || !proto.Equal(protoadapt.MessageV2Of(m), protoadapt.MessageV2Of(want[i])) {
			t.Errorf("detail %d of %v = %v, want %v", i, err, d, want[i])
		}
	}
}

func TestStatusCrossesAnEnvelopeWithItsDetails(t *testing.T) {
	t.Parallel()
	details := testDetails()
	tests := []struct {
		name    string
		err     error
		code    codes.Code
		msg     string
		details []protoadapt.MessageV1
	}{
		{name: "no error", err: nil, code: codes.OK},
		{name: "no details", err: status.Error(codes.NotFound, "no such grain"), code: codes.NotFound, msg: "no such grain"},
		{name: "details", err: withDetails(t, codes.InvalidArgument, "bad", details...), code: codes.InvalidArgument, msg: "bad", details: details},
		{
			// As status.FromError has it: the wrapper's text is the
			// message, the wrapped status gives the code and details.
			name: "wrapped", err: fmt.Errorf("withdrawing: %w", withDetails(t, codes.FailedPrecondition, "broke", details[1])),
			code: codes.FailedPrecondition, msg: "withdrawing: rpc error: code = FailedPrecondition desc = broke", details: details[1:2],
		},
		{name: "deadline", err: fmt.Errorf("waiting: %w", context.DeadlineExceeded), code: codes.DeadlineExceeded, msg: "waiting: context deadline exceeded"},
		{name: "plain error", err: fmt.Errorf("oops"), code: codes.Unknown, msg: "oops"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := SetStatus(&granaryv1.Envelope{}, tt.err)
			if len(tt.details) == 0 && env.Payload != nil {
				t.Errorf("SetStatus wrote details %x for an error without any", env.Payload)
			}
			// Across the wire, as the transport encodes it.
			b, err := proto.Marshal(env)
			if err != nil {
				t.Fatal(err)
			}
			got := new(granaryv1.Envelope)
			if err := proto.Unmarshal(b, got); err != nil {
				t.Fatal(err)
			}
			out := StatusOf(got)
			if tt.code == codes.OK {
				if out != nil {
					t.Fatalf("StatusOf = %v, want nil", out)
				}
				return
			}
			wantStatus(t, out, tt.code, tt.msg, tt.details...)
		})
	}
}

// encodeStatus encodes a google.rpc.Status with details as raw Anys, so
// that a test can send ones that do not decode.
func encodeStatus(t *testing.T, details ...*anypb.Any) []byte {
	t.Helper()
	var b []byte
	for _, a := range details {
		ab, err := proto.MarshalOptions{AllowPartial: true}.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		b = protowire.AppendTag(b, detailsField, protowire.BytesType)
		b = protowire.AppendBytes(b, ab)
	}
	return b
}

// badUTF8Any is an Any whose type URL is not UTF-8: it does not encode
// through proto.Marshal, so it is written by hand.
func badUTF8Any() []byte {
	var a []byte
	a = protowire.AppendTag(a, 1, protowire.BytesType)
	a = protowire.AppendBytes(a, []byte("type.googleapis.com/\xff\xfe"))
	var b []byte
	b = protowire.AppendTag(b, detailsField, protowire.BytesType)
	return protowire.AppendBytes(b, a)
}

func TestStatusOfMalformedDetailsKeepsCodeAndMessage(t *testing.T) {
	t.Parallel()
	good, err := anypb.New(&errdetails.ErrorInfo{Reason: "R"})
	if err != nil {
		t.Fatal(err)
	}
	unknown := &anypb.Any{TypeUrl: "type.googleapis.com/nobody.Knows", Value: []byte{0x0a, 0x01, 'x'}}
	garbage := &anypb.Any{TypeUrl: "type.googleapis.com/google.rpc.ErrorInfo", Value: []byte{0xff, 0xff, 0xff}}
	tests := []struct {
		name    string
		details []byte
		want    int // how many details the error keeps
	}{
		{name: "not protobuf", details: []byte{0xff, 0xff, 0xff, 0xff}},
		{name: "truncated", details: encodeStatus(t, good)[:5]},
		{name: "valid then truncated", details: append(encodeStatus(t, good), 0x1a, 0x40, 0x01), want: 1},
		{name: "type URL not UTF-8", details: badUTF8Any()},
		{name: "bad Any beside a good one", details: append(badUTF8Any(), encodeStatus(t, good)...), want: 1},
		{name: "unknown type", details: encodeStatus(t, unknown, good), want: 2},
		{name: "value does not decode", details: encodeStatus(t, garbage), want: 1},
		{name: "other fields", details: protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5)},
		{name: "wrong wire type", details: protowire.AppendVarint(protowire.AppendTag(nil, detailsField, protowire.VarintType), 5)},
		{name: "at the size bound", details: encodeStatus(t, &anypb.Any{TypeUrl: "type.googleapis.com/x.Big", Value: make([]byte, MaxDetailsSize-64)}), want: 1},
		{name: "past the size bound", details: encodeStatus(t, &anypb.Any{TypeUrl: "type.googleapis.com/x.Big", Value: make([]byte, MaxDetailsSize)})},
		{name: "many empty details", details: bytes.Repeat([]byte{0x1a, 0x00}, MaxDetailsSize/2), want: MaxDetails},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := &granaryv1.Envelope{Code: uint32(codes.Aborted), Message: "from a peer", Payload: tt.details}
			err := StatusOf(env)
			st := status.Convert(err)
			if st.Code() != codes.Aborted || st.Message() != "from a peer" {
				t.Fatalf("StatusOf = %v, want Aborted %q", err, "from a peer")
			}
			if got := len(st.Details()); got != tt.want {
				t.Errorf("StatusOf kept %d details (%v), want %d", got, st.Details(), tt.want)
			}
			// What a gRPC server does with it: grpc-status-details-bin.
			if _, err := proto.Marshal(st.Proto()); err != nil {
				t.Errorf("the status does not encode for a gRPC trailer: %v", err)
			}
			// And what a silo does when it passes the error on.
			if again := StatusOf(SetStatus(&granaryv1.Envelope{}, err)); len(status.Convert(again).Details()) != tt.want {
				t.Errorf("passed on, the error has details %v, want %d", status.Convert(again).Details(), tt.want)
			}
		})
	}
}

func FuzzStatusOf(f *testing.F) {
	good, _ := proto.Marshal(&spb.Status{Details: []*anypb.Any{{TypeUrl: "type.googleapis.com/google.rpc.ErrorInfo"}}})
	f.Add(good)
	f.Add([]byte{0x1a, 0x02, 0x0a, 0xff})
	f.Add(badUTF8Any())
	f.Fuzz(func(t *testing.T, details []byte) {
		err := StatusOf(&granaryv1.Envelope{Code: uint32(codes.Internal), Message: "m", Payload: details})
		st := status.Convert(err)
		if st.Code() != codes.Internal || st.Message() != "m" {
			t.Fatalf("StatusOf = %v, want Internal m", err)
		}
		_ = st.Details()
		if _, err := proto.Marshal(st.Proto()); err != nil {
			t.Fatalf("the status does not encode: %v", err)
		}
	})
}

func TestStatusWithoutDetailsAllocatesNothing(t *testing.T) {
	plain := status.Error(codes.NotFound, "no such grain")
	env := new(granaryv1.Envelope)
	if n := testing.AllocsPerRun(100, func() { SetStatus(env, plain) }); n != 0 {
		t.Errorf("SetStatus of an error without details allocates %v times, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { SetStatus(env, nil) }); n != 0 {
		t.Errorf("SetStatus of no error allocates %v times, want 0", n)
	}
	ok := new(granaryv1.Envelope)
	if n := testing.AllocsPerRun(100, func() { _ = StatusOf(ok) }); n != 0 {
		t.Errorf("StatusOf of a success allocates %v times, want 0", n)
	}
}

// statusSink keeps the benchmarks' errors escaping, as they do in the
// transport.
var statusSink error

func BenchmarkStatus(b *testing.B) {
	for _, bc := range []struct {
		name string
		err  error
	}{
		{"ok", nil},
		{"no-details", status.Error(codes.NotFound, "no such grain")},
		{"details", withDetails(b, codes.InvalidArgument, "bad", testDetails()...)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			env := new(granaryv1.Envelope)
			for b.Loop() {
				statusSink = StatusOf(SetStatus(env, bc.err))
			}
		})
	}
}

func TestReplyTooLargeWithDetailsKeepsCodeAndMessage(t *testing.T) {
	t.Parallel()
	p := newPair(t, func(c *Config) { c.MaxMessageSize = 4096 })
	big := &errdetails.ErrorInfo{Reason: strings.Repeat("x", 5000)}
	small := &errdetails.ErrorInfo{Reason: "small"}
	p.hb.mu.Lock()
	p.hb.answer = func(req *granaryv1.Envelope) *granaryv1.Envelope {
		d := small
		if string(req.Payload) == "big" {
			d = big
		}
		return SetStatus(&granaryv1.Envelope{}, withDetails(t, codes.InvalidArgument, "bad "+string(req.Payload), d))
	}
	p.hb.mu.Unlock()

	r := wait(t, call(p.a, "b", "small", time.Time{}))
	if r.err != nil {
		t.Fatal(r.err)
	}
	wantStatus(t, StatusOf(r.env), codes.InvalidArgument, "bad small", small)

	// Too large with its details: the status comes without them.
	r = wait(t, call(p.a, "b", "big", time.Time{}))
	if r.err != nil {
		t.Fatal(r.err)
	}
	wantStatus(t, StatusOf(r.env), codes.InvalidArgument, "bad big")
}
