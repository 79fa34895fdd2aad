package transport

import (
	"context"
	"errors"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// SetStatus writes err's gRPC status into env, a response, and returns
// env. A context's error that came back as it is keeps its meaning,
// DeadlineExceeded or Canceled, not Unknown.
func SetStatus(env *granaryv1.Envelope, err error) *granaryv1.Envelope {
	st, ok := status.FromError(err)
	if !ok && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		st = status.FromContextError(err)
	}
	env.Code, env.Message = uint32(st.Code()), st.Message()
	return env
}

// StatusOf is the error a response envelope carries, or nil.
func StatusOf(env *granaryv1.Envelope) error {
	if code := codes.Code(env.Code); code != codes.OK {
		return status.Error(code, env.Message)
	}
	return nil
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
