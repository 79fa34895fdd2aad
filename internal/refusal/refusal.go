// Package refusal is the shape of Granary's refusals that ask a caller to
// come back later: a ResourceExhausted status with a google.rpc.RetryInfo
// and a google.rpc.ErrorInfo naming the refusing silo. The silo writes
// them and the Go client and tools read them by the same constants, so
// the two sides cannot drift apart.
//
// It imports only grpc's status packages and the protobuf well-known
// types.
package refusal

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The ErrorInfo's Domain, the Metadata key naming the refusing silo, and
// the Reasons: Overloaded for a silo that sheds load (its gateway or its
// silo-to-silo receiver refused the request), ConcurrencyLimited for one
// that runs as many new requests as its latency limit allows (the silo
// the grain lives on refused it).
const (
	Domain             = "granary.io"
	SiloKey            = "silo"
	Overloaded         = "OVERLOADED"
	ConcurrencyLimited = "CONCURRENCY_LIMITED"
)

// New is a ResourceExhausted error with message msg, a RetryInfo of retry
// and an ErrorInfo of reason in Domain naming silo under SiloKey.
func New(msg string, retry time.Duration, reason, silo string) error {
	st := status.New(codes.ResourceExhausted, msg)
	withDetails, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)},
		&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: map[string]string{SiloKey: silo}},
	)
	if err != nil { // only a detail that does not marshal fails, and these do
		return st.Err()
	}
	return withDetails.Err()
}
