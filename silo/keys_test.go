package silo

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// compoundKeyGrain is a grain of either compound-keyed probe type. It
// reads its ID's key back through the typed accessor of its type's key
// kind and replies "<primary>|<extension>", with the number of calls its
// activation has run as n and the activation's ID.
type compoundKeyGrain struct {
	silo  string
	calls int64
}

func (g *compoundKeyGrain) Call(ctx grain.Context, req *probe.CompoundKeyedRequest) (*probe.Reply, error) {
	g.calls++
	var text string
	switch id := ctx.ID(); id.Type {
	case probe.Int64CompoundProbeGrainType:
		n, ext, err := id.Int64Compound()
		if err != nil {
			return nil, grain.Errorf(codes.Internal, "compound probe %v: %v", id, err)
		}
		text = fmt.Sprintf("%d|%s", n, ext)
	case probe.UUIDCompoundProbeGrainType:
		u, ext, err := id.UUIDCompound()
		if err != nil {
			return nil, grain.Errorf(codes.Internal, "compound probe %v: %v", id, err)
		}
		text = grain.UUIDKey(u) + "|" + ext
	default:
		return nil, grain.Errorf(codes.Internal, "compound probe: unexpected type %s", id.Type)
	}
	if g.silo != "" {
		text += "@" + g.silo
	}
	return &probe.Reply{Text: text, N: g.calls, Activation: ctx.ActivationID()}, nil
}

// registerCompoundProbes registers both compound-keyed probe types on s,
// whose grains add "@silo" to their replies when silo is not empty.
func registerCompoundProbes(t *testing.T, s *Silo, silo string) {
	t.Helper()
	if err := probe.RegisterInt64CompoundProbeGrain(s, func(grain.ID) probe.Int64CompoundProbeGrain { return &compoundKeyGrain{silo: silo} }); err != nil {
		t.Fatal(err)
	}
	if err := probe.RegisterUUIDCompoundProbeGrain(s, func(grain.ID) probe.UUIDCompoundProbeGrain { return &compoundKeyGrain{silo: silo} }); err != nil {
		t.Fatal(err)
	}
}

// startCompoundSilo starts a silo alone hosting the compound-keyed probes,
// stopped when the test ends.
func startCompoundSilo(t *testing.T) *Silo {
	t.Helper()
	s, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	registerCompoundProbes(t, s, "")
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

var compoundTestUUID = [16]byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}

// TestCompoundKeyedGrainSeesTypedKey: a call through a reference made from
// a primary key and an extension reaches the grain whose ID gives both
// back, and each pair, including those that share a primary key or differ
// only in an empty extension, is a grain of its own.
func TestCompoundKeyedGrainSeesTypedKey(t *testing.T) {
	s := startCompoundSilo(t)
	ctx := testCtx(t)
	const uuid = "123e4567-e89b-12d3-a456-426614174000"
	call := func(ref interface {
		Call(context.Context, *probe.CompoundKeyedRequest, ...grain.CallOption) (*probe.Reply, error)
	}) *probe.Reply {
		t.Helper()
		r, err := ref.Call(ctx, &probe.CompoundKeyedRequest{})
		if err != nil {
			t.Fatalf("Call: %v", err)
		}
		return r
	}
	tests := []struct {
		ref  interface{ ID() grain.ID }
		key  string // the ID's key
		want string // what the grain reads from its ID
	}{
		{probe.NewInt64CompoundProbeRef(s, 42, "eu"), "42+eu", "42|eu"},
		{probe.NewInt64CompoundProbeRef(s, 42, "us"), "42+us", "42|us"},
		{probe.NewInt64CompoundProbeRef(s, 42, ""), "42+", "42|"},
		{probe.NewInt64CompoundProbeRef(s, -7, "a+b/c"), "-7+a+b/c", "-7|a+b/c"},
		{probe.NewUUIDCompoundProbeRef(s, compoundTestUUID, "eu"), uuid + "+eu", uuid + "|eu"},
		{probe.NewUUIDCompoundProbeRef(s, compoundTestUUID, ""), uuid + "+", uuid + "|"},
	}
	activations := map[uint64]string{}
	for _, tt := range tests {
		if got := tt.ref.ID().Key; got != tt.key {
			t.Errorf("reference key %q, want %q", got, tt.key)
		}
		var r *probe.Reply
		switch ref := tt.ref.(type) {
		case probe.Int64CompoundProbeRef:
			r = call(ref)
		case probe.UUIDCompoundProbeRef:
			r = call(ref)
		}
		if r.GetText() != tt.want || r.GetN() != 1 {
			t.Errorf("grain %v read %q on call %d, want %q on its first call", tt.ref.ID(), r.GetText(), r.GetN(), tt.want)
		}
		if other, ok := activations[r.GetActivation()]; ok {
			t.Errorf("grains %v and %s share activation %d", tt.ref.ID(), other, r.GetActivation())
		}
		activations[r.GetActivation()] = tt.ref.ID().String()
	}

	// The same pair again is the same grain.
	r := call(probe.NewInt64CompoundProbeRef(s, 42, "eu"))
	if r.GetN() != 2 || activations[r.GetActivation()] != probe.Int64CompoundProbeGrainType+"/42+eu" {
		t.Errorf("second call to 42+eu ran as call %d of activation %d, want call 2 of the first one", r.GetN(), r.GetActivation())
	}
}

// TestMalformedCompoundKeyIsRefused: a reference made from an ID whose key
// is not of its type's compound form fails with InvalidArgument, naming
// the form, and activates nothing.
func TestMalformedCompoundKeyIsRefused(t *testing.T) {
	s := startCompoundSilo(t)
	ctx := testCtx(t)
	tests := []struct {
		id   grain.ID
		want string
	}{
		{grain.NewID(probe.Int64CompoundProbeGrainType, "42"), `"42" is not of the form <decimal int64>+<extension>: it has no '+'`},
		{grain.NewID(probe.Int64CompoundProbeGrainType, "042+eu"), `"042" is not a decimal int64`},
		{grain.NewID(probe.Int64CompoundProbeGrainType, grain.UUIDCompoundKey(compoundTestUUID, "eu")), "is not of the form <decimal int64>+<extension>"},
		{grain.NewID(probe.UUIDCompoundProbeGrainType, grain.Int64CompoundKey(42, "eu")), `"42" is not a canonical UUID`},
		{grain.NewID(probe.UUIDCompoundProbeGrainType, grain.UUIDKey(compoundTestUUID)), "is not of the form <canonical UUID>+<extension>: it has no '+'"},
	}
	for _, tt := range tests {
		var err error
		if tt.id.Type == probe.Int64CompoundProbeGrainType {
			_, err = probe.Int64CompoundProbeRefFromID(s, tt.id).Call(ctx, &probe.CompoundKeyedRequest{})
		} else {
			_, err = probe.UUIDCompoundProbeRefFromID(s, tt.id).Call(ctx, &probe.CompoundKeyedRequest{})
		}
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.want) {
			t.Errorf("calling %v = %v, want InvalidArgument with %q", tt.id, err, tt.want)
		}
		if a := localActivation(s, tt.id.Type, tt.id.Key); a != nil {
			t.Errorf("calling %v activated it", tt.id)
		}
	}
}

// TestCompoundKeyCrossesSilos: a compound-keyed grain that only another
// silo hosts is reached with its key whole, extension included.
func TestCompoundKeyCrossesSilos(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{register: func(s *Silo, name string) {
		if name == "b" {
			registerCompoundProbes(t, s, name)
		}
	}})
	a := tc.silo("a")
	testwait.For(t, defaultTestTimeout, "silo a to see the compound probes hosted", func() bool {
		return hostsOf(a, probe.Int64CompoundProbeGrainType) == 1 && hostsOf(a, probe.UUIDCompoundProbeGrainType) == 1
	})
	ctx := testCtx(t)
	r, err := probe.NewInt64CompoundProbeRef(a, 9, "eu west+1").Call(ctx, &probe.CompoundKeyedRequest{})
	if err != nil || r.GetText() != "9|eu west+1@b" {
		t.Errorf("int64 compound call through a = %v, %v; want 9|eu west+1@b", r, err)
	}
	r, err = probe.NewUUIDCompoundProbeRef(a, compoundTestUUID, "").Call(ctx, &probe.CompoundKeyedRequest{})
	if want := grain.UUIDKey(compoundTestUUID) + "|@b"; err != nil || r.GetText() != want {
		t.Errorf("UUID compound call through a = %v, %v; want %s", r, err, want)
	}
	_, err = probe.Int64CompoundProbeRefFromID(a, grain.NewID(probe.Int64CompoundProbeGrainType, "9")).Call(ctx, &probe.CompoundKeyedRequest{})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "<decimal int64>+<extension>") {
		t.Errorf("malformed key through a = %v, want InvalidArgument naming the form", err)
	}
}
