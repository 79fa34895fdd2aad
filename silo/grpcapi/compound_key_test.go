package grpcapi_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/grpcapi"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// compoundTypes are the grain types with compound keys that
// newCompoundGateway serves.
var compoundTypes = []*grain.ServiceDesc{
	&probe.Int64CompoundProbe_ServiceDesc,
	&probe.UUIDCompoundProbe_ServiceDesc,
}

// newCompoundGateway starts a silo alone hosting the compound-keyed probes,
// serves them with Register on a loopback port, and returns a client
// connection to it. All of it stops when the test ends.
func newCompoundGateway(t *testing.T) *grpc.ClientConn {
	t.Helper()
	cfg := silo.DefaultConfig()
	cfg.Name = "grpcapi-compound-test"
	s := startSilo(t, cfg, func(s *silo.Silo) error {
		return errors.Join(
			probe.RegisterInt64CompoundProbeGrain(s, func(grain.ID) probe.Int64CompoundProbeGrain { return compoundProbe{} }),
			probe.RegisterUUIDCompoundProbeGrain(s, func(grain.ID) probe.UUIDCompoundProbeGrain { return compoundProbe{} }),
		)
	})
	srv := grpc.NewServer()
	if err := grpcapi.Register(srv, s, compoundTypes, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	return serveLoopback(t, srv)
}

// compoundProbe replies with the primary key and the extension it reads
// from its ID, "<primary>|<extension>", through the typed accessor of its
// type's key kind.
type compoundProbe struct{}

func (compoundProbe) Call(ctx grain.Context, req *probe.CompoundKeyedRequest) (*probe.Reply, error) {
	id := ctx.ID()
	switch id.Type {
	case probe.Int64CompoundProbeGrainType:
		n, ext, err := id.Int64Compound()
		if err != nil {
			return nil, err
		}
		return &probe.Reply{Text: fmt.Sprintf("%d|%s", n, ext), N: n}, nil
	case probe.UUIDCompoundProbeGrainType:
		u, ext, err := id.UUIDCompound()
		if err != nil {
			return nil, err
		}
		return &probe.Reply{Text: grain.UUIDKey(u) + "|" + ext}, nil
	}
	return nil, grain.Errorf(codes.Internal, "compound probe: unexpected type %s", id.Type)
}

const testUUID = "123e4567-e89b-12d3-a456-426614174000"

// TestCompoundKeyCalls: a plain gRPC call reaches the grain whose compound
// key it sends, in the metadata or the key field, and the grain reads the
// primary key and the extension from its ID.
func TestCompoundKeyCalls(t *testing.T) {
	cc := newCompoundGateway(t)
	ctx := testContext(t)
	tests := []struct {
		name   string
		method string
		req    *probe.CompoundKeyedRequest
		md     []string
		want   string
	}{
		{"int64 compound key in metadata", "/probe.Int64CompoundProbe/Call", &probe.CompoundKeyedRequest{}, []string{grpcapi.KeyHeader, "42+eu-west"}, "42|eu-west"},
		{"int64 compound key in field", "/probe.Int64CompoundProbe/Call", &probe.CompoundKeyedRequest{Key: "-7+a/b"}, nil, "-7|a/b"},
		{"same compound key in both", "/probe.Int64CompoundProbe/Call", &probe.CompoundKeyedRequest{Key: "1+x"}, []string{grpcapi.KeyHeader, "1+x"}, "1|x"},
		{"empty extension", "/probe.Int64CompoundProbe/Call", &probe.CompoundKeyedRequest{}, []string{grpcapi.KeyHeader, "5+"}, "5|"},
		{"extension holding '+'", "/probe.Int64CompoundProbe/Call", &probe.CompoundKeyedRequest{}, []string{grpcapi.KeyHeader, "5++a+"}, "5|+a+"},
		{"non-ASCII extension in field", "/probe.Int64CompoundProbe/Call", &probe.CompoundKeyedRequest{Key: "5+héllo"}, nil, "5|héllo"},
		{"UUID compound key in metadata", "/probe.UUIDCompoundProbe/Call", &probe.CompoundKeyedRequest{}, []string{grpcapi.KeyHeader, testUUID + "+eu"}, testUUID + "|eu"},
		{"UUID compound key in field", "/probe.UUIDCompoundProbe/Call", &probe.CompoundKeyedRequest{Key: testUUID + "+"}, nil, testUUID + "|"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctx
			if len(tt.md) > 0 {
				ctx = metadata.AppendToOutgoingContext(ctx, tt.md...)
			}
			var reply probe.Reply
			if err := cc.Invoke(ctx, tt.method, tt.req, &reply); err != nil {
				t.Fatalf("%s: %v", tt.method, err)
			}
			if reply.GetText() != tt.want {
				t.Errorf("%s: the grain read %q from its ID, want %q", tt.method, reply.GetText(), tt.want)
			}
		})
	}
}

// TestMalformedCompoundKeys: a compound key not of its type's form fails
// with InvalidArgument naming the form expected and what is wrong, and
// never reaches a grain (whose reply would be OK).
func TestMalformedCompoundKeys(t *testing.T) {
	cc := newCompoundGateway(t)
	ctx := testContext(t)
	tests := []struct {
		name   string
		method string
		req    proto.Message
		md     []string
		msg    string
	}{
		{
			name:   "int64 key without extension",
			method: "/probe.Int64CompoundProbe/Call",
			req:    &probe.CompoundKeyedRequest{},
			md:     []string{grpcapi.KeyHeader, "42"},
			msg:    `granary: probe.Int64CompoundProbe takes int64_compound keys: grain: bad key: "42" is not of the form <decimal int64>+<extension>: it has no '+'`,
		},
		{
			name:   "int64 primary with a leading zero",
			method: "/probe.Int64CompoundProbe/Call",
			req:    &probe.CompoundKeyedRequest{Key: "042+eu"},
			msg:    `granary: probe.Int64CompoundProbe takes int64_compound keys: grain: bad key: "042+eu" is not of the form <decimal int64>+<extension>: "042" is not a decimal int64`,
		},
		{
			name:   "primary that is not a number",
			method: "/probe.Int64CompoundProbe/Call",
			req:    &probe.CompoundKeyedRequest{},
			md:     []string{grpcapi.KeyHeader, "eu+42"},
			msg:    `"eu+42" is not of the form <decimal int64>+<extension>: "eu" is not a decimal int64`,
		},
		{
			name:   "UUID key without extension",
			method: "/probe.UUIDCompoundProbe/Call",
			req:    &probe.CompoundKeyedRequest{Key: testUUID},
			msg:    `granary: probe.UUIDCompoundProbe takes uuid_compound keys: grain: bad key: "` + testUUID + `" is not of the form <canonical UUID>+<extension>: it has no '+'`,
		},
		{
			name:   "upper-case UUID primary",
			method: "/probe.UUIDCompoundProbe/Call",
			req:    &probe.CompoundKeyedRequest{},
			md:     []string{grpcapi.KeyHeader, strings.ToUpper(testUUID) + "+eu"},
			msg:    `is not of the form <canonical UUID>+<extension>: "` + strings.ToUpper(testUUID) + `" is not a canonical UUID`,
		},
		{
			name:   "int64 compound key sent to a UUID compound type",
			method: "/probe.UUIDCompoundProbe/Call",
			req:    &probe.CompoundKeyedRequest{Key: "42+eu"},
			msg:    `"42+eu" is not of the form <canonical UUID>+<extension>: "42" is not a canonical UUID`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctx
			if len(tt.md) > 0 {
				ctx = metadata.AppendToOutgoingContext(ctx, tt.md...)
			}
			err := cc.Invoke(ctx, tt.method, tt.req, &probe.Reply{})
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.msg) {
				t.Errorf("%s: %v, want InvalidArgument with %q", tt.method, err, tt.msg)
			}
		})
	}
}
