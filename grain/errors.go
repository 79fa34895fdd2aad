package grain

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var errNoCall = errors.New("grain: await of a Future that holds no call")

// Code returns the gRPC code an error carries across a call: the code of a
// status error (wrapped or not), OK for nil, Unknown otherwise.
func Code(err error) codes.Code { return status.Code(err) }

// Errorf returns an application error with a gRPC code, which keeps its
// code and message across calls. It is status.Errorf.
func Errorf(c codes.Code, format string, args ...any) error {
	return status.Errorf(c, format, args...)
}
