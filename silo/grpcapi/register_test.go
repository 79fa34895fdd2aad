package grpcapi_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/granaryio/granary/grain"
	bankpb "github.com/granaryio/granary/proto/examples/bank"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/silo/grpcapi"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// These tests build request messages at run time, with key fields that
// protoc-gen-go-granary would refuse or that no test proto has, and drive
// the handlers that Register builds without a network: a registrar keeps
// the service descriptors, and a caller records the calls.

// registrar is a grpc.ServiceRegistrar that keeps what is registered.
type registrar struct {
	sds   []*grpc.ServiceDesc
	impls []any
}

func (r *registrar) RegisterService(sd *grpc.ServiceDesc, impl any) {
	r.sds = append(r.sds, sd)
	r.impls = append(r.impls, impl)
}

// caller is a grain.Caller that records each call and answers with reply
// and err. Any goroutine.
type caller struct {
	reply proto.Message
	err   error

	mu  sync.Mutex
	ids []grain.ID
}

func (c *caller) Invoke(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) (proto.Message, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = append(c.ids, id)
	return c.reply, c.err
}

func (c *caller) InvokeAsync(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) grain.Pending {
	reply, err := c.Invoke(ctx, id, m, req, opts...)
	if err != nil {
		return grain.Failed(err)
	}
	return done{reply}
}

// called returns the IDs of the grains called so far.
func (c *caller) called() []grain.ID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]grain.ID(nil), c.ids...)
}

// done is a Pending that has its reply.
type done struct{ reply proto.Message }

func (d done) Await(context.Context) (proto.Message, error) { return d.reply, nil }

// keyOpt returns field options that carry (granary.v1.key) = on.
func keyOpt(on bool) *descriptorpb.FieldOptions {
	o := &descriptorpb.FieldOptions{}
	proto.SetExtension(o, granaryv1.E_Key, on)
	return o
}

// field returns a singular field of type typ, marked with the key option
// when opts is not nil.
func field(name string, number int32, typ descriptorpb.FieldDescriptorProto_Type, opts *descriptorpb.FieldOptions) *descriptorpb.FieldDescriptorProto {
	return &descriptorpb.FieldDescriptorProto{
		Name:     proto.String(name),
		Number:   proto.Int32(number),
		Type:     typ.Enum(),
		Label:    descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
		JsonName: proto.String(name),
		Options:  opts,
	}
}

// message builds the request message keytest.Req with fields, in a proto2
// file, so that every singular field has presence.
func message(t *testing.T, fields ...*descriptorpb.FieldDescriptorProto) protoreflect.MessageDescriptor {
	t.Helper()
	fdp := &descriptorpb.FileDescriptorProto{
		Name:        proto.String("keytest/req.proto"),
		Package:     proto.String("keytest"),
		Syntax:      proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Req"), Field: fields}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatalf("building keytest.Req: %v", err)
	}
	return fd.Messages().ByName("Req")
}

// grainType returns the grain type keytest.S with one method, M, whose
// request is md and whose response is google.protobuf.Empty.
func grainType(md protoreflect.MessageDescriptor, kind grain.KeyKind, oneWay bool) *grain.ServiceDesc {
	return &grain.ServiceDesc{
		Type: "keytest.S",
		Methods: []grain.MethodDesc{{
			Name:        "M",
			FullName:    "/keytest.S/M",
			NewRequest:  func() proto.Message { return dynamicpb.NewMessage(md) },
			NewResponse: func() proto.Message { return &emptypb.Empty{} },
			OneWay:      oneWay,
		}},
		Options: grain.TypeOptions{KeyKind: kind},
	}
}

// TestRegisterRefuses checks that Register fails, naming the type, the
// message and the field, for each key field that cannot carry a key, and
// that it then registers nothing.
func TestRegisterRefuses(t *testing.T) {
	const (
		str   = descriptorpb.FieldDescriptorProto_TYPE_STRING
		i64   = descriptorpb.FieldDescriptorProto_TYPE_INT64
		u32   = descriptorpb.FieldDescriptorProto_TYPE_UINT32
		bytes = descriptorpb.FieldDescriptorProto_TYPE_BYTES
		dbl   = descriptorpb.FieldDescriptorProto_TYPE_DOUBLE
		s64   = descriptorpb.FieldDescriptorProto_TYPE_SINT64
	)
	repeated := field("ids", 1, str, keyOpt(true))
	repeated.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	tests := []struct {
		name   string
		fields []*descriptorpb.FieldDescriptorProto
		kind   grain.KeyKind
		want   string
	}{
		{"repeated", []*descriptorpb.FieldDescriptorProto{repeated}, grain.KeyString,
			"key field ids is repeated; the key option needs a singular string, int64, int32, uint64 or uint32 field"},
		{"bytes", []*descriptorpb.FieldDescriptorProto{field("id", 1, bytes, keyOpt(true))}, grain.KeyString,
			"key field id is of type bytes; the key option needs"},
		{"double", []*descriptorpb.FieldDescriptorProto{field("id", 1, dbl, keyOpt(true))}, grain.KeyInt64,
			"key field id is of type double; the key option needs"},
		{"sint64", []*descriptorpb.FieldDescriptorProto{field("id", 1, s64, keyOpt(true))}, grain.KeyInt64,
			"key field id is of type sint64; the key option needs"},
		{"two key fields", []*descriptorpb.FieldDescriptorProto{field("a", 1, str, keyOpt(true)), field("b", 2, str, nil), field("c", 3, str, keyOpt(true))}, grain.KeyString,
			"2 fields have the key option (a, c); at most one may carry the grain key"},
		{"integer for string keys", []*descriptorpb.FieldDescriptorProto{field("id", 1, i64, keyOpt(true))}, grain.KeyString,
			"key field id is of type int64, but the grain type's keys are string keys, of the form <non-empty string>: the key field must be a string"},
		{"integer for UUID keys", []*descriptorpb.FieldDescriptorProto{field("id", 1, u32, keyOpt(true))}, grain.KeyUUID,
			"key field id is of type uint32, but the grain type's keys are uuid keys, of the form <canonical UUID>: the key field must be a string"},
		{"string for int64 keys", []*descriptorpb.FieldDescriptorProto{field("id", 1, str, keyOpt(true))}, grain.KeyInt64,
			"key field id is of type string, but the grain type's keys are int64 keys: the key field must be an int64, int32, uint64 or uint32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := grainType(message(t, tt.fields...), tt.kind, false)
			r := &registrar{}
			// The good type comes first: nothing is registered all the same.
			err := grpcapi.Register(r, &caller{}, []*grain.ServiceDesc{&bankpb.Account_ServiceDesc, bad}, zap.NewNop())
			if !errors.Is(err, grpcapi.ErrKeyField) {
				t.Fatalf("Register: got %v, want an error wrapping ErrKeyField", err)
			}
			want := "grpcapi: unusable key field: grain type keytest.S, rpc M: request keytest.Req: " + tt.want
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Register: got\n%v\nwant it to begin with\n%s", err, want)
			}
			if len(r.sds) != 0 {
				t.Errorf("Register failed but registered %d services", len(r.sds))
			}
		})
	}
}

// TestRegisterRefusesTypes checks Register's other refusals.
func TestRegisterRefusesTypes(t *testing.T) {
	srv := grpc.NewServer()
	defer srv.Stop()
	if err := grpcapi.Register(srv, &caller{}, []*grain.ServiceDesc{&bankpb.Account_ServiceDesc}, nil); err != nil {
		t.Fatalf("Register: %v", err)
	}
	renamed := bankpb.Transfer_ServiceDesc
	renamed.Methods = append([]grain.MethodDesc(nil), renamed.Methods...)
	renamed.Methods[0].FullName = "/bank.Transfer/Go"
	tests := []struct {
		name  string
		c     grain.Caller
		types []*grain.ServiceDesc
		want  string
	}{
		{"no caller", nil, []*grain.ServiceDesc{&bankpb.Transfer_ServiceDesc}, "grpcapi: Register without a grain.Caller"},
		{"nil type", &caller{}, []*grain.ServiceDesc{&bankpb.Transfer_ServiceDesc, nil}, "grpcapi: grain type 2 of 2 is nil"},
		{"type twice", &caller{}, []*grain.ServiceDesc{&bankpb.Transfer_ServiceDesc, &bankpb.Transfer_ServiceDesc}, "grpcapi: grain type bank.Transfer is listed twice"},
		{"type already served", &caller{}, []*grain.ServiceDesc{&bankpb.Account_ServiceDesc}, "grpcapi: the server already has a service named bank.Account"},
		{"wrong full name", &caller{}, []*grain.ServiceDesc{&renamed}, `grpcapi: grain method bank.Transfer/Run has the full name "/bank.Transfer/Go", want "/bank.Transfer/Run"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := grpcapi.Register(srv, tt.c, tt.types, nil)
			if err == nil || err.Error() != tt.want {
				t.Errorf("Register: got %v, want %q", err, tt.want)
			}
		})
	}
	if got := len(srv.GetServiceInfo()); got != 1 {
		t.Errorf("server has %d services after the refusals, want 1", got)
	}
}

// serve registers typ on a registrar with c and returns the handler of
// its method M, which calls with req (a message of the method's request
// type) and the interceptor ic, if not nil.
func serve(t *testing.T, typ *grain.ServiceDesc, c grain.Caller, log *zap.Logger) func(ctx context.Context, req proto.Message, ic grpc.UnaryServerInterceptor) (any, error) {
	t.Helper()
	r := &registrar{}
	if err := grpcapi.Register(r, c, []*grain.ServiceDesc{typ}, log); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if len(r.sds) != 1 || len(r.sds[0].Methods) != 1 {
		t.Fatalf("Register registered %d services, want 1 with 1 method", len(r.sds))
	}
	sd := r.sds[0]
	if sd.ServiceName != typ.Type || sd.Metadata != typ.File || sd.Methods[0].MethodName != "M" || len(sd.Streams) != 0 || r.impls[0] != typ {
		t.Fatalf("Register built %+v for %s", sd, typ.Type)
	}
	return func(ctx context.Context, req proto.Message, ic grpc.UnaryServerInterceptor) (any, error) {
		dec := func(v any) error { proto.Merge(v.(proto.Message), req); return nil }
		return sd.Methods[0].Handler(r.impls[0], ctx, dec, ic)
	}
}

// TestKeyFields checks which key each kind of key field gives, with and
// without the metadata.
func TestKeyFields(t *testing.T) {
	type kind = descriptorpb.FieldDescriptorProto_Type
	const (
		str = descriptorpb.FieldDescriptorProto_TYPE_STRING
		i64 = descriptorpb.FieldDescriptorProto_TYPE_INT64
		i32 = descriptorpb.FieldDescriptorProto_TYPE_INT32
		u64 = descriptorpb.FieldDescriptorProto_TYPE_UINT64
		u32 = descriptorpb.FieldDescriptorProto_TYPE_UINT32
	)
	tests := []struct {
		name  string
		typ   kind
		kind  grain.KeyKind
		value any // the field's value; nil leaves it unset
		md    string
		want  string // the key, or a part of the InvalidArgument message
		fails bool
	}{
		{name: "string", typ: str, kind: grain.KeyString, value: "ann", want: "ann"},
		{name: "UUID string", typ: str, kind: grain.KeyUUID, value: "00112233-4455-6677-8899-aabbccddeeff", want: "00112233-4455-6677-8899-aabbccddeeff"},
		{name: "bad UUID string", typ: str, kind: grain.KeyUUID, value: "0011", want: `granary: keytest.S takes uuid keys: grain: bad key: "0011" is not a canonical UUID`, fails: true},
		{name: "int64", typ: i64, kind: grain.KeyInt64, value: int64(math.MinInt64), want: "-9223372036854775808"},
		{name: "int64 zero, set", typ: i64, kind: grain.KeyInt64, value: int64(0), want: "0"},
		{name: "int64 zero, set, and metadata", typ: i64, kind: grain.KeyInt64, value: int64(0), md: "3", want: `two grain keys that differ: "0" in the request field id and "3"`, fails: true},
		{name: "int64 unset, metadata", typ: i64, kind: grain.KeyInt64, md: "3", want: "3"},
		{name: "int32", typ: i32, kind: grain.KeyInt64, value: int32(-12), want: "-12"},
		{name: "uint32", typ: u32, kind: grain.KeyInt64, value: uint32(math.MaxUint32), want: "4294967295"},
		{name: "uint64", typ: u64, kind: grain.KeyInt64, value: uint64(math.MaxInt64), want: "9223372036854775807"},
		{name: "uint64 beyond int64", typ: u64, kind: grain.KeyInt64, value: uint64(math.MaxUint64), want: `granary: keytest.S takes int64 keys: grain: bad key: "18446744073709551615" is not a decimal int64`, fails: true},
		{name: "unset, no metadata", typ: i64, kind: grain.KeyInt64, want: `granary: keytest.S/M needs a grain key: set the request field id (keytest.Req.id), or send it as request metadata "granary-key: <key>"`, fails: true},
		{name: "empty string, set, and metadata", typ: str, kind: grain.KeyString, value: "", md: "bea", want: "bea"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := message(t, field("id", 1, tt.typ, keyOpt(true)), field("note", 2, str, keyOpt(false)))
			c := &caller{}
			call := serve(t, grainType(md, tt.kind, false), c, nil)
			req := dynamicpb.NewMessage(md)
			if tt.value != nil {
				req.Set(md.Fields().ByName("id"), protoreflect.ValueOf(tt.value))
			}
			ctx := context.Background()
			if tt.md != "" {
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(grpcapi.KeyHeader, tt.md))
			}
			reply, err := call(ctx, req, nil)
			if tt.fails {
				if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.want) {
					t.Errorf("got %v, want InvalidArgument with %q", err, tt.want)
				}
				if ids := c.called(); len(ids) != 0 {
					t.Errorf("the call reached grains %v", ids)
				}
				return
			}
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if !proto.Equal(reply.(proto.Message), &emptypb.Empty{}) {
				t.Errorf("replied %v, want an empty response", reply)
			}
			if ids := c.called(); len(ids) != 1 || ids[0] != grain.NewID("keytest.S", tt.want) {
				t.Errorf("called %v, want keytest.S/%s", ids, tt.want)
			}
		})
	}
}

// TestKeyOptionAsUnknownBytes checks that a key option that a descriptor
// holds as unknown bytes, as one parsed without granary/v1/options.proto
// would, is found.
func TestKeyOptionAsUnknownBytes(t *testing.T) {
	opts := &descriptorpb.FieldOptions{}
	raw := protowire.AppendTag(nil, protowire.Number(granaryv1.E_Key.TypeDescriptor().Number()), protowire.VarintType)
	raw = protowire.AppendVarint(raw, 1)
	opts.ProtoReflect().SetUnknown(raw)
	md := message(t, field("id", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, opts))
	c := &caller{}
	call := serve(t, grainType(md, grain.KeyString, false), c, nil)
	req := dynamicpb.NewMessage(md)
	if _, err := call(context.Background(), req, nil); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "set the request field id") {
		t.Errorf("call without a key: got %v, want InvalidArgument naming the field id", err)
	}
	req.Set(md.Fields().ByName("id"), protoreflect.ValueOfString("lee"))
	if _, err := call(context.Background(), req, nil); err != nil {
		t.Fatalf("call: %v", err)
	}
	if ids := c.called(); len(ids) != 1 || ids[0].Key != "lee" {
		t.Errorf("called %v, want keytest.S/lee", ids)
	}
}

// TestReplies checks what a handler makes of what the caller returns.
func TestReplies(t *testing.T) {
	md := message(t)
	errBroken := errors.New("broken caller")
	tests := []struct {
		name   string
		oneWay bool
		reply  proto.Message
		err    error
		want   proto.Message // the reply, when code is OK
		code   codes.Code
		warns  int // log lines at warn level
	}{
		{name: "reply", reply: &bankpb.Balance{Amount: 3}, want: &bankpb.Balance{Amount: 3}},
		{name: "nil reply", want: &emptypb.Empty{}},
		{name: "one-way", oneWay: true, reply: &bankpb.Balance{Amount: 3}, want: &emptypb.Empty{}},
		{name: "status", err: status.Error(codes.NotFound, "gone"), code: codes.NotFound},
		{name: "context deadline", err: context.DeadlineExceeded, code: codes.DeadlineExceeded},
		{name: "context canceled", err: context.Canceled, code: codes.Canceled},
		{name: "plain error", err: errBroken, code: codes.Unknown, warns: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			c := &caller{reply: tt.reply, err: tt.err}
			call := serve(t, grainType(md, grain.KeyString, tt.oneWay), c, zap.New(core))
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcapi.KeyHeader, "max"))
			reply, err := call(ctx, dynamicpb.NewMessage(md), nil)
			if got := status.Code(err); got != tt.code {
				t.Fatalf("got %v, want code %v", err, tt.code)
			}
			if tt.code == codes.OK && !proto.Equal(reply.(proto.Message), tt.want) {
				t.Errorf("replied %v, want %v", reply, tt.want)
			}
			if got := logs.Len(); got != tt.warns {
				t.Errorf("logged %d warnings, want %d: %v", got, tt.warns, logs.All())
			}
		})
	}
}

// TestInterceptorInfo checks the grpc.UnaryServerInfo a handler gives the
// interceptor, and that an interceptor which hands on a request of another
// type gets Internal rather than a grain call.
func TestInterceptorInfo(t *testing.T) {
	md := message(t)
	typ := grainType(md, grain.KeyString, false)
	c := &caller{}
	call := serve(t, typ, c, nil)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcapi.KeyHeader, "ned"))

	var info *grpc.UnaryServerInfo
	record := func(ctx context.Context, req any, i *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		info = i
		return h(ctx, req)
	}
	if _, err := call(ctx, dynamicpb.NewMessage(md), record); err != nil {
		t.Fatalf("call: %v", err)
	}
	if info == nil || info.FullMethod != "/keytest.S/M" || info.Server != typ {
		t.Errorf("interceptor got %+v, want FullMethod /keytest.S/M and the grain type", info)
	}

	swap := func(ctx context.Context, req any, i *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, &bankpb.DepositRequest{})
	}
	if _, err := call(ctx, dynamicpb.NewMessage(md), swap); status.Code(err) != codes.Internal {
		t.Errorf("interceptor swapped the request: got %v, want Internal", err)
	}
	if ids := c.called(); len(ids) != 1 {
		t.Errorf("called %v, want only the first call", ids)
	}
}
