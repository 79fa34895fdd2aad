package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/granaryio/granary/grain"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// KeyHeader is the request metadata key that carries the grain key.
const KeyHeader = "granary-key"

// traceMetadata lists the request metadata that a call carries on to the
// grain as call headers of the same names: the W3C Trace Context
// traceparent and tracestate, and the W3C Baggage baggage.
var traceMetadata = [...]string{"traceparent", "tracestate", "baggage"}

// ErrKeyField is wrapped by the error Register returns when a request
// message marks a field with the key option that cannot carry the key.
var ErrKeyField = errors.New("grpcapi: unusable key field")

// serviceLister is the part of *grpc.Server that tells which services it
// already has. Register uses it, when s has it, to refuse a grain type
// whose name is taken instead of letting grpc end the process.
type serviceLister interface {
	GetServiceInfo() map[string]grpc.ServiceInfo
}

// Register serves each grain type in types on s as a gRPC service of the
// same name and methods, whose calls go to grains through c. It fails
// (naming the type and field) when a type's request message marks an
// unusable key field; the error then wraps ErrKeyField.
//
// Register checks every type before it registers any, so on failure s is
// unchanged. It also fails on a nil caller or type, on a type listed twice
// or already served by s, and on a method whose descriptor is incomplete.
// log receives the package's few messages; nil discards them. Call it
// before s serves, as grpc requires of every registration.
//
// A call carries the request metadata traceparent, tracestate and
// baggage (W3C Trace Context and Baggage) on to the grain as call headers
// of the same names, which grain.Header reads: a client with
// OpenTelemetry propagation sends them, so its span parents the grain's
// server span when the silo traces calls (package silo/tracing).
func Register(s grpc.ServiceRegistrar, c grain.Caller, types []*grain.ServiceDesc, log *zap.Logger) error {
	if c == nil {
		return errors.New("grpcapi: Register without a grain.Caller")
	}
	if log == nil {
		log = zap.NewNop()
	}
	var served map[string]grpc.ServiceInfo
	if l, ok := s.(serviceLister); ok {
		served = l.GetServiceInfo()
	}
	seen := make(map[string]bool, len(types))
	sds := make([]*grpc.ServiceDesc, 0, len(types))
	for i, t := range types {
		if t == nil {
			return fmt.Errorf("grpcapi: grain type %d of %d is nil", i+1, len(types))
		}
		if seen[t.Type] {
			return fmt.Errorf("grpcapi: grain type %s is listed twice", t.Type)
		}
		if _, ok := served[t.Type]; ok {
			return fmt.Errorf("grpcapi: the server already has a service named %s", t.Type)
		}
		seen[t.Type] = true
		sd, err := newServiceDesc(t, c, log)
		if err != nil {
			return err
		}
		sds = append(sds, sd)
	}
	for i, sd := range sds {
		s.RegisterService(sd, types[i])
		log.Debug("grain type served over gRPC", zap.String("type", sd.ServiceName), zap.Int("methods", len(sd.Methods)))
	}
	return nil
}

// newServiceDesc builds the gRPC service of the grain type t: one unary
// method per grain method, each with its own handler.
func newServiceDesc(t *grain.ServiceDesc, c grain.Caller, log *zap.Logger) (*grpc.ServiceDesc, error) {
	if t.Type == "" {
		return nil, errors.New("grpcapi: a grain type has no name")
	}
	sd := &grpc.ServiceDesc{
		ServiceName: t.Type,
		// The server value registered with the service is t, which
		// satisfies the empty interface; the handlers pass it to the
		// interceptor and need nothing else from it.
		HandlerType: (*any)(nil),
		Methods:     make([]grpc.MethodDesc, 0, len(t.Methods)),
		Metadata:    t.File,
	}
	for i := range t.Methods {
		m, err := newMethod(t, &t.Methods[i], c, log)
		if err != nil {
			return nil, err
		}
		sd.Methods = append(sd.Methods, grpc.MethodDesc{MethodName: m.desc.Name, Handler: m.handle})
	}
	return sd, nil
}

// A method serves one grain method over gRPC. It is built by Register and
// read-only afterwards, so its handler may run on any number of
// goroutines at once.
type method struct {
	typ  string // the grain type
	name string // "type/method", for messages
	desc *grain.MethodDesc
	kind grain.KeyKind
	c    grain.Caller
	log  *zap.Logger

	// reqDesc is the request message's descriptor, against which a
	// request an interceptor hands on is checked.
	reqDesc protoreflect.MessageDescriptor
	// keyField is the request field marked with the key option, or nil.
	keyField protoreflect.FieldDescriptor
	// noKey is the message of the InvalidArgument status for a call that
	// gives no key: it says where the key may go.
	noKey string
	// unary is m.call as a grpc.UnaryHandler, made once so that calls
	// through an interceptor do not each make it again.
	unary grpc.UnaryHandler
}

// newMethod checks the method md of the grain type t and its request's
// key option, and builds its server side.
func newMethod(t *grain.ServiceDesc, md *grain.MethodDesc, c grain.Caller, log *zap.Logger) (*method, error) {
	name := t.Type + "/" + md.Name
	switch {
	case md.Name == "":
		return nil, fmt.Errorf("grpcapi: grain type %s has a method with no name", t.Type)
	case md.FullName != "/"+name:
		return nil, fmt.Errorf("grpcapi: grain method %s has the full name %q, want %q", name, md.FullName, "/"+name)
	case md.NewRequest == nil || md.NewResponse == nil:
		return nil, fmt.Errorf("grpcapi: grain method %s lacks NewRequest or NewResponse", name)
	}
	req := md.NewRequest()
	if req == nil {
		return nil, fmt.Errorf("grpcapi: grain method %s: NewRequest returned nil", name)
	}
	m := &method{
		typ:     t.Type,
		name:    name,
		desc:    md,
		kind:    t.Options.KeyKind,
		c:       c,
		log:     log,
		reqDesc: req.ProtoReflect().Descriptor(),
	}
	f, err := findKeyField(m.reqDesc, m.kind)
	if err != nil {
		return nil, fmt.Errorf("%w: grain type %s, rpc %s: %v", ErrKeyField, t.Type, md.Name, err)
	}
	m.keyField = f
	m.noKey = fmt.Sprintf("granary: %s needs a grain key: send it as request metadata %q", name, KeyHeader+": <key>")
	if f != nil {
		m.noKey = fmt.Sprintf("granary: %s needs a grain key: set the request field %s (%s), or send it as request metadata %q",
			name, f.Name(), f.FullName(), KeyHeader+": <key>")
	}
	m.unary = m.intercepted
	return m, nil
}

// handle is the grpc.MethodDesc handler: it decodes the request and calls
// the grain, through the server's interceptor when there is one. srv is
// the grain type's *grain.ServiceDesc. Any goroutine.
func (m *method) handle(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	req := m.desc.NewRequest()
	if err := dec(req); err != nil {
		// gRPC reports a request that does not unmarshal as Internal, but
		// the fault is in the caller's bytes.
		if status.Code(err) == codes.Internal {
			return nil, status.Errorf(codes.InvalidArgument, "granary: %s: the request does not decode as %s: %s",
				m.desc.FullName, m.reqDesc.FullName(), status.Convert(err).Message())
		}
		return nil, err
	}
	if interceptor == nil {
		return m.call(ctx, req)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: m.desc.FullName}
	return interceptor(ctx, req, info, m.unary)
}

// intercepted is the handler an interceptor calls on: req must still be
// a request of the method's type. Any goroutine.
func (m *method) intercepted(ctx context.Context, req any) (any, error) {
	msg, ok := req.(proto.Message)
	if !ok || msg.ProtoReflect().Descriptor() != m.reqDesc {
		return nil, status.Errorf(codes.Internal, "granary: %s: an interceptor handed on a %T, not a %s", m.name, req, m.reqDesc.FullName())
	}
	return m.call(ctx, msg)
}

// call finds the grain key of req and calls the grain. Any goroutine.
func (m *method) call(ctx context.Context, req proto.Message) (any, error) {
	key, err := m.key(ctx, req)
	if err != nil {
		return nil, err
	}
	reply, err := m.c.Invoke(withTraceHeaders(ctx), grain.NewID(m.typ, key), m.desc, req)
	if err != nil {
		return nil, m.status(ctx, err)
	}
	if reply == nil || m.desc.OneWay {
		return m.desc.NewResponse(), nil
	}
	return reply, nil
}

// status returns err as a gRPC status error. A Caller's errors already
// are, and one that asks the client to wait (a RetryInfo) sets the call's
// PushbackTrailer; a context's error gets its code, and anything else,
// which is a Caller's bug, is logged and becomes Unknown. ctx is the
// call's server context. Any goroutine.
func (m *method) status(ctx context.Context, err error) error {
	if st, ok := status.FromError(err); ok {
		var nr notRun
		if errors.As(err, &nr) {
			setPushback(ctx, st)
		}
		return st.Err()
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	m.log.Warn("grain call failed with an error that carries no gRPC status",
		zap.String("method", m.desc.FullName), zap.Error(err))
	return status.Error(codes.Unknown, err.Error())
}

// withTraceHeaders returns ctx with the traceMetadata of the incoming
// request as call headers. A key sent several times becomes one header,
// its values joined with commas as the W3C formats allow (tracestate and
// baggage are comma-separated lists); traceparent takes its first value.
// Any goroutine.
func withTraceHeaders(ctx context.Context) context.Context {
	for _, k := range traceMetadata {
		vs := metadata.ValueFromIncomingContext(ctx, k)
		switch {
		case len(vs) == 0:
		case len(vs) == 1 || k == "traceparent":
			ctx = grain.WithHeader(ctx, k, vs[0])
		default:
			ctx = grain.WithHeader(ctx, k, strings.Join(vs, ","))
		}
	}
	return ctx
}

// PushbackTrailer is the trailer in which a gRPC server tells a client
// how many milliseconds to wait before it retries a call (gRFC A6): a
// gRPC client whose retry policy covers the call's code waits that long
// instead of its own backoff. A silo that sheds load refuses calls with
// ResourceExhausted and a RetryInfo (NotRun), which becomes this trailer.
const PushbackTrailer = "grpc-retry-pushback-ms"

// NotRun marks err, a gRPC status error, as the refusal of a call that no
// grain saw (the silo sheds load): such a call may be sent again, so its
// RetryInfo, if any, becomes PushbackTrailer. A grain's own errors are
// never marked, whatever details they carry: a call that ran must not be
// retried on the server's word.
func NotRun(err error) error { return notRun{err} }

type notRun struct{ error }

func (e notRun) GRPCStatus() *status.Status { return status.Convert(e.error) }
func (e notRun) Unwrap() error              { return e.error }

// setPushback sets PushbackTrailer on the call whose server context ctx
// is, when st, its error, carries a google.rpc.RetryInfo: the delay it
// asks for, in milliseconds rounded up, so that a wait under one
// millisecond is not taken for none.
func setPushback(ctx context.Context, st *status.Status) {
	for _, d := range st.Details() {
		ri, ok := d.(*errdetails.RetryInfo)
		if !ok || ri.GetRetryDelay() == nil {
			continue
		}
		delay := max(ri.GetRetryDelay().AsDuration(), 0)
		ms := (delay + time.Millisecond - 1) / time.Millisecond
		// Only a call that already sent its trailer fails, and this one
		// has not: its handler is returning.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(PushbackTrailer, strconv.FormatInt(int64(ms), 10)))
		return
	}
}
