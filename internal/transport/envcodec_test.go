package transport

import (
	"bytes"
	"math/rand/v2"
	"testing"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestEnvelopeEncodingMatchesProtobuf: the envelope's own encoder gives
// protobuf's encoding byte for byte, for envelopes with any mix of the
// fields it encodes, and leaves to protobuf those it does not: a call
// chain, sub-messages, unknown fields and strings that are not UTF-8
// (which protobuf refuses).
func TestEnvelopeEncodingMatchesProtobuf(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	str := func() string {
		if r.IntN(3) == 0 {
			return ""
		}
		return string([]rune("aé/日k0")[:1+r.IntN(6)])
	}
	num := func() uint64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return uint64(r.IntN(128))
		case 2:
			return uint64(r.IntN(1 << 20))
		}
		return r.Uint64()
	}
	own := 0
	for i := range 20000 {
		env := &granaryv1.Envelope{
			Kind: granaryv1.EnvelopeKind(int32(num())), CallId: num(), GrainType: str(), GrainKey: str(), Method: str(),
			MethodIndex: uint32(num()), TimeoutNanos: int64(num()), Hops: uint32(num()), Placed: r.IntN(2) == 0,
			Code: uint32(num()), Message: str(), ActivationSilo: str(), Cancellable: r.IntN(2) == 0,
			Observer: r.IntN(2) == 0, NotRun: r.IntN(2) == 0,
		}
		if r.IntN(2) == 0 {
			env.Payload = []byte(str())
		}
		for range r.IntN(3) {
			env.Headers = append(env.Headers, &granaryv1.Header{Key: str(), Value: str()})
		}
		wantOwn := true
		switch r.IntN(12) {
		case 0:
			env.Chain = []*granaryv1.ChainLink{{Silo: "s", Seq: 3}}
			wantOwn = false
		case 1:
			env.Directory = &granaryv1.DirectoryRequest{}
			wantOwn = false
		case 2:
			env.Headers = append(env.Headers, nil)
			wantOwn = false
		case 3:
			var err error
			if env, err = withUnknownField(env); err != nil {
				t.Fatal(err)
			}
			wantOwn = false
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		size, ok := sizeEnvelope(env)
		if ok != wantOwn {
			t.Fatalf("envelope %d (%v): encoded by its own encoder %v, want %v", i, env, ok, wantOwn)
		}
		if ok {
			own++
		}
		bp, err := encodeSized(env, size, ok)
		if err != nil {
			t.Fatal(err)
		}
		got, n := protowire.ConsumeBytes((*bp)[protowire.SizeTag(batchEnvelopesField):])
		if n < 0 || size != len(want) || !bytes.Equal(got, want) {
			t.Fatalf("envelope %d (%v): size %d, encoding\n%x\nwant size %d, encoding\n%x", i, env, size, got, len(want), want)
		}
		putScratch(bp)
	}
	if own < 10000 {
		t.Fatalf("only %d of 20000 envelopes took the own encoder", own)
	}
	bad := &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, GrainKey: "\xff"}
	if _, _, err := encodeEnvelope(bad); err == nil {
		t.Fatal("an envelope with a key that is not UTF-8 encoded without an error")
	}
}

// withUnknownField returns env decoded from its encoding with a field
// added that Envelope does not declare.
func withUnknownField(env *granaryv1.Envelope) (*granaryv1.Envelope, error) {
	b, err := proto.Marshal(env)
	if err != nil {
		return nil, err
	}
	b = protowire.AppendTag(b, 999, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	out := new(granaryv1.Envelope)
	return out, proto.Unmarshal(b, out)
}
