package placement

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The errors Place returns wrap one of these sentinels, for errors.Is, and
// carry a gRPC code, for status.Code and for the caller on another silo.
var (
	// ErrNoSilo: no active silo hosts the grain type (Unavailable; silos
	// may join).
	ErrNoSilo = errors.New("placement: no active silo hosts the grain type")
	// ErrNoSiloWithRole: silos host the grain type, but none has the role
	// its SiloRole placement asks for (FailedPrecondition).
	ErrNoSiloWithRole = errors.New("placement: no active silo with the role hosts the grain type")
	// ErrBadRequest: the request itself is malformed (InvalidArgument).
	ErrBadRequest = errors.New("placement: bad request")
)

// Error is a placement failure: a message naming the grain type, a gRPC
// code and the sentinel it wraps.
type Error struct {
	Code codes.Code
	Msg  string
	kind error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the sentinel (ErrNoSilo, ErrNoSiloWithRole or
// ErrBadRequest).
func (e *Error) Unwrap() error { return e.kind }

// GRPCStatus makes status.Code and status.FromError see e's code.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Msg) }

func noSilo(req Request) error {
	return &Error{
		Code: codes.Unavailable,
		Msg:  "placement: no active silo hosts grain type " + req.Grain.Type,
		kind: ErrNoSilo,
	}
}

func noSiloWithRole(req Request) error {
	return &Error{
		Code: codes.FailedPrecondition,
		Msg:  fmt.Sprintf("placement: no active silo hosts grain type %s with role %q", req.Grain.Type, req.Role),
		kind: ErrNoSiloWithRole,
	}
}

func badRequest(req Request, reason string) error {
	return &Error{
		Code: codes.InvalidArgument,
		Msg:  "placement: grain type " + req.Grain.Type + ": " + reason,
		kind: ErrBadRequest,
	}
}

func badCandidate(req Request, i int) error {
	return badRequest(req, fmt.Sprintf("Candidates[%d] has an empty ID", i))
}
