package grainrt

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"
)

// CallOption is grain.CallOption, which is an alias of it: one call's
// option, made by grain.WithTimeout, grain.OneWay,
// grain.AllowCallChainReentrancy and grain.SuppressCallChainReentrancy.
type CallOption struct {
	timeout time.Duration
	oneWay  bool
	reentry ChainReentry
	outside bool
}

// ChainReentry is a call's call-chain reentrancy scope: whether calls that
// come back, along the call's chain, to the grain that made it may run
// there while the request that made it waits (Orleans'
// RequestContext.AllowCallChainReentrancy and
// SuppressCallChainReentrancy). The scope belongs to the calling grain: it
// says nothing about the other grains of the chain.
type ChainReentry uint8

const (
	// ChainReentryDefault: the call sets no scope. The scope of an outer
	// call of the same activation on the chain decides, else the
	// calling grain's type (grain.TypeOptions.CallChainReentrant).
	ChainReentryDefault ChainReentry = iota
	// ChainReentryAllow: calls back along the chain are admitted.
	ChainReentryAllow
	// ChainReentrySuppress: calls back along the chain are refused as
	// deadlocks when they cannot start at once, as on a type without
	// call-chain reentrancy.
	ChainReentrySuppress
)

// WithTimeout implements grain.WithTimeout.
func WithTimeout(d time.Duration) CallOption { return CallOption{timeout: d} }

// OneWay implements grain.OneWay.
func OneWay() CallOption { return CallOption{oneWay: true} }

// FromOutside marks a call a silo's gateway makes for a client of its
// plain gRPC services: the silo bounds and times its wait for its turn as
// it does a request that came from outside (the silo's QueueLimits.Wait).
// Runtimes other than a silo's ignore it; it is not part of grain's API.
func FromOutside() CallOption { return CallOption{outside: true} }

// AllowCallChainReentrancy implements grain.AllowCallChainReentrancy.
func AllowCallChainReentrancy() CallOption { return CallOption{reentry: ChainReentryAllow} }

// SuppressCallChainReentrancy implements grain.SuppressCallChainReentrancy.
func SuppressCallChainReentrancy() CallOption {
	return CallOption{reentry: ChainReentrySuppress}
}

// CallOptions is what a list of CallOptions comes to, with a method's own
// options applied first. Callers' implementations use it.
type CallOptions struct {
	Timeout time.Duration // 0: the runtime's default
	OneWay  bool
	// ChainReentry is the call's call-chain reentrancy scope: the last
	// Allow or Suppress given wins. Runtimes that make no call chain (a
	// client's) ignore it.
	ChainReentry ChainReentry
	// Outside: FromOutside was given.
	Outside bool
}

// ResolveCallOptions applies the options of the method called (its
// grain.MethodDesc's Timeout and OneWay), then opts.
func ResolveCallOptions(timeout time.Duration, oneWay bool, opts []CallOption) CallOptions {
	o := CallOptions{Timeout: timeout, OneWay: oneWay}
	for _, op := range opts {
		if op.timeout > 0 {
			o.Timeout = op.timeout
		}
		if op.oneWay {
			o.OneWay = true
		}
		if op.reentry != ChainReentryDefault {
			o.ChainReentry = op.reentry
		}
		if op.outside {
			o.Outside = true
		}
	}
	return o
}

// SendThrough sends a call to target through the outgoing filters fs
// (grain.OutgoingFilter), the first outermost, with send (a grain.Send),
// which starts the call, innermost; it returns the grain.Pending the
// outermost filter returns. It is generic over grain's types, which
// grainrt cannot import.
func SendThrough[F ~func(context.Context, I, M, proto.Message, S) P, S ~func(context.Context, proto.Message) P, I, M, P any](fs []F, ctx context.Context, target I, m M, req proto.Message, send S) P {
	for i := len(fs) - 1; i >= 0; i-- {
		f, next := fs[i], send
		send = func(ctx context.Context, req proto.Message) P { return f(ctx, target, m, req, next) }
	}
	return send(ctx, req)
}
