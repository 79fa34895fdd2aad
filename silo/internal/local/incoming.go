package local

import (
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Method returns the method of t that env names, or the error that
// refuses the call: missing, for a method t does not have, or
// InvalidArgument, for a key not of t's kind.
func (t *GrainType) Method(id grain.ID, env *granaryv1.Envelope, missing codes.Code) (*grain.MethodDesc, error) {
	idx := int(env.MethodIndex)
	if idx >= len(t.Desc.Methods) || t.Desc.Methods[idx].Name != env.Method {
		return nil, status.Errorf(missing, "granary: grain type %s has no method %q at index %d", id.Type, env.Method, env.MethodIndex)
	}
	if err := t.Opts.KeyKind.CheckKey(id.Key); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "granary: calling %s: %v (type %s takes %s keys)", id, err, id.Type, t.Opts.KeyKind)
	}
	return &t.Desc.Methods[idx], nil
}

// Incoming makes the call record of a request or one-way call that came
// from another process (a silo, or a client through the gateway): its
// request stays encoded for its turn to decode; a request is answered
// through r by waiter, counted in inflight, and, when its sender may
// cancel it, given a context in cancels.
func (s *Runtime) Incoming(from string, env *granaryv1.Envelope, id grain.ID, m *grain.MethodDesc, r transport.Responder, waiter WaiterKind, cancels *CancelTable, inflight *InflightCount) *Call {
	oneWay := !r.Expects()
	refs := int32(2)
	if oneWay {
		refs = 1
	}
	c := s.NewCall(refs)
	c.ID, c.Method, c.Raw, c.OneWay = id, m, env.Payload, oneWay
	if c.Raw == nil {
		c.Raw = []byte{}
	}
	now := s.CallNow()
	c.Due = now + s.CallTimeout(time.Duration(env.TimeoutNanos))
	c.Arrived = max(now, 1) // 0 is a call from inside the silo
	c.Headers = headersOf(env)
	if !oneWay {
		c.Waiter, c.Responder = waiter, r
		if env.Cancellable {
			cancels.Add(c, RemoteCall{From: from, ID: env.CallId})
		}
		inflight.Add()
	}
	return c
}

// PostIncoming sends a one-way call that came from another process (a
// silo, or a client through the gateway) with no call chain through its
// activation's inbox, as postOneWay does a call made inside the silo (see
// inboxOf), its request still encoded; hops is its record's Hops. fresh
// says the call is new work for this silo (see the cluster's fresh),
// which only the ordinary path times and limits: the queue wait limit,
// the latency measure and the limiter of new requests; when any of those
// is on, a fresh call is not posted. It reports false when the call must
// take the ordinary path, Incoming and Route. The stream's reader.
func (s *Runtime) PostIncoming(env *granaryv1.Envelope, id grain.ID, m *grain.MethodDesc, hops uint32, fresh bool) bool {
	if len(env.Chain) > 0 || fresh && (s.Cfg.Limiter != nil || s.Cfg.MeasureLatency) {
		return false
	}
	a := s.inboxOf(id, m)
	if a == nil || fresh && a.typ.Limits.Wait > 0 {
		return false
	}
	p := getPost()
	p.method, p.raw, p.hops = m, env.Payload, hops
	if p.raw == nil {
		p.raw = []byte{} // non-nil: the request is to be decoded
	}
	p.due = s.CallNow() + s.CallTimeout(time.Duration(env.TimeoutNanos))
	p.headers = headersOf(env)
	a.post(p)
	return true
}

// headersOf returns the call headers env carries, as Call.Headers holds
// them.
func headersOf(env *granaryv1.Envelope) any {
	if len(env.Headers) == 0 {
		return nil
	}
	kv := make([]string, 0, 2*len(env.Headers))
	for _, h := range env.Headers {
		kv = append(kv, h.Key, h.Value)
	}
	return grainrt.HeadersFromPairs(kv)
}
