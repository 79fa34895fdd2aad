package transport

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NotSentError is the error of a call that never left this silo: the peer
// is unknown or gone, could not be dialled, or is in its redial backoff.
// The call did not reach the peer, so the caller may send it elsewhere
// without risk of running it twice. Its gRPC code is Unavailable.
type NotSentError struct {
	Peer string
	// Leaving: the peer said it is shutting down (a GO_AWAY), so it will
	// take nothing more.
	Leaving bool
	Msg     string
}

func (e *NotSentError) Error() string { return "rpc error: code = Unavailable desc = " + e.Msg }

// GRPCStatus makes the error an Unavailable status.
func (e *NotSentError) GRPCStatus() *status.Status { return status.New(codes.Unavailable, e.Msg) }

// Leaving reports whether err says the call was not sent because its
// peer is shutting down.
func Leaving(err error) bool {
	var ns *NotSentError
	return errors.As(err, &ns) && ns.Leaving
}

// NotSent reports whether err says the call never left this silo.
func NotSent(err error) bool {
	var ns *NotSentError
	return errors.As(err, &ns)
}
