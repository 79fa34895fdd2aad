package transport

import (
	"context"
	"errors"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"go.uber.org/zap"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// SetStatus writes err's gRPC status into env, a response, and returns
// env: its code, its message and, when it has any, its details
// (status.Details), so that they reach the caller as grpc-go would carry
// them. An error that wraps a status (fmt.Errorf with %w) keeps the
// status's code and details, and its own text is the message, as
// status.FromError has it. A context's error that came back as it is
// keeps its meaning, DeadlineExceeded or Canceled, not Unknown. An error
// without details costs no allocation here.
func SetStatus(env *granaryv1.Envelope, err error) *granaryv1.Envelope {
	st, ok := status.FromError(err)
	if !ok && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		st = status.FromContextError(err)
	}
	env.Code, env.Message = uint32(st.Code()), st.Message()
	if st.Code() != codes.OK {
		env.Payload = encodeDetails(st) // an error response has no reply
	}
	return env
}

// The bounds of an error's details on the wire. Details are for a few
// small messages (a BadRequest, an ErrorInfo, a RetryInfo); the bounds
// keep a peer from making a caller decode millions of them, and match
// what a gRPC client takes in the grpc-status-details-bin trailer, whose
// metadata many clients cap at 8 KiB.
const (
	// MaxDetailsSize bounds the encoded details: larger ones are dropped
	// whole, by the sender and by the receiver, and the error keeps its
	// code and message.
	MaxDetailsSize = 8 << 10
	// MaxDetails bounds how many details a receiver decodes; it keeps the
	// first ones.
	MaxDetails = 16
)

// encodeDetails returns the encoding of st's details as a google.rpc.Status
// with only its details field set, or nil when st has none, when they do
// not encode (which only a status built by hand from a bad proto can
// cause), or when they exceed MaxDetailsSize.
func encodeDetails(st *status.Status) []byte {
	// Details decodes each one, but allocates nothing when there are
	// none, which is the path that must stay cheap; Proto, which copies,
	// would allocate on every error.
	if st.Code() == codes.OK || len(st.Details()) == 0 {
		return nil
	}
	b, err := proto.Marshal(&spb.Status{Details: st.Proto().GetDetails()})
	if err != nil || len(b) > MaxDetailsSize {
		return nil
	}
	return b
}

// StatusOf is the error a response envelope carries, or nil. Details
// that do not decode are left out, each alone: the error keeps the code,
// the message and the details that do decode. Details past MaxDetailsSize
// are left out whole, and only the first MaxDetails are read, so a peer
// can cost the caller no more than decoding that much.
func StatusOf(env *granaryv1.Envelope) error {
	code := codes.Code(env.Code)
	if code == codes.OK {
		return nil
	}
	if len(env.Payload) > 0 && len(env.Payload) <= MaxDetailsSize {
		return statusWithDetails(code, env)
	}
	return status.Error(code, env.Message)
}

// statusWithDetails is StatusOf for an envelope that carries details.
func statusWithDetails(code codes.Code, env *granaryv1.Envelope) error {
	details := decodeDetails(env.Payload)
	if len(details) == 0 {
		return status.Error(code, env.Message)
	}
	return status.FromProto(&spb.Status{Code: int32(code), Message: env.Message, Details: details}).Err()
}

// detailsField is the field number of google.rpc.Status's details.
const detailsField = 3

// decodeDetails reads the details of b, an encoded google.rpc.Status,
// one by one: a detail that is not a valid Any is skipped, and damage to
// the encoding itself ends the reading with the details before it. Any
// other field is ignored, and reading stops at MaxDetails details.
func decodeDetails(b []byte) []*anypb.Any {
	var details []*anypb.Any
	for len(b) > 0 && len(details) < MaxDetails {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		if num != detailsField || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				break
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			break
		}
		b = b[n:]
		a := new(anypb.Any)
		if proto.Unmarshal(v, a) == nil {
			details = append(details, a)
		}
	}
	return details
}

// Refuser returns what refuses an envelope that came from from with a
// status: the answer to a request, or, for a one-way call, which expects
// none, a log line saying dropped.
func Refuser(r Responder, log *zap.Logger, dropped, from string) func(code codes.Code, format string, args ...any) {
	return func(code codes.Code, format string, args ...any) {
		err := status.Errorf(code, format, args...)
		if r.Expects() {
			r.Reply(SetStatus(&granaryv1.Envelope{}, err))
		} else {
			log.Warn(dropped, zap.String("from", from), zap.Error(err))
		}
	}
}
