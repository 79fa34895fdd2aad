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
	own := 0
	for i := range 20000 {
		env, wantOwn := randomEnvelope(t, r)
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

// randomEnvelope returns an envelope with a random mix of the fields the
// envelope's own codec handles, and whether it has only those: now and
// then a call chain, a sub-message, a nil header or an unknown field.
func randomEnvelope(t testing.TB, r *rand.Rand) (*granaryv1.Envelope, bool) {
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
	switch r.IntN(12) {
	case 0:
		env.Chain = []*granaryv1.ChainLink{{Silo: "s", Seq: 3}}
	case 1:
		env.Directory = &granaryv1.DirectoryRequest{}
	case 2:
		env.Headers = append(env.Headers, nil)
	case 3:
		env, err := withUnknownField(env)
		if err != nil {
			t.Fatal(err)
		}
		return env, false
	default:
		return env, true
	}
	return env, false
}

// TestEnvelopeDecodingMatchesProtobuf: the envelope's own decoder, into
// one envelope reused throughout as the stream's reader does, gives what
// protobuf gives for every encoding: those of random envelopes, whole, cut
// short or with a byte changed, and those of names that are not UTF-8.
func TestEnvelopeDecodingMatchesProtobuf(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	var got granaryv1.Envelope
	var ns names
	check := func(b []byte) {
		t.Helper()
		want := new(granaryv1.Envelope)
		wantErr := proto.Unmarshal(b, want)
		err := decodeEnvelope(b, &got, &ns)
		if (err != nil) != (wantErr != nil) || err == nil && !proto.Equal(&got, want) {
			t.Fatalf("decoding %x: %v, error %v; protobuf gives %v, error %v", b, &got, err, want, wantErr)
		}
	}
	for range 20000 {
		env, _ := randomEnvelope(t, r)
		b, err := proto.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		check(b)
		if len(b) > 0 {
			check(b[:r.IntN(len(b))])
			c := append([]byte(nil), b...)
			c[r.IntN(len(c))] = byte(r.Uint32())
			check(c)
		}
	}
	for _, num := range []protowire.Number{envGrainType, envGrainKey, envMethod, envMessage, envActivationSilo} {
		check(protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), "a\xffb"))
	}
	check(protowire.AppendBytes(protowire.AppendTag(nil, envHeaders, protowire.BytesType),
		protowire.AppendString(protowire.AppendTag(nil, headerValue, protowire.BytesType), "\xff")))
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

// FuzzEnvelopeDecoding: for any bytes, the envelope's own decoder gives
// what protobuf gives, and an envelope it decodes encodes as protobuf
// encodes it.
func FuzzEnvelopeDecoding(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 16 {
		env, _ := randomEnvelope(f, r)
		b, err := proto.Marshal(env)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	var got granaryv1.Envelope
	var ns names
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(granaryv1.Envelope)
		wantErr := proto.Unmarshal(b, want)
		err := decodeEnvelope(b, &got, &ns)
		if (err != nil) != (wantErr != nil) || err == nil && !proto.Equal(&got, want) {
			t.Fatalf("decoding %x: %v, error %v; protobuf gives %v, error %v", b, &got, err, want, wantErr)
		}
		if err != nil {
			return
		}
		bp, _, err := encodeEnvelope(&got)
		if err != nil {
			t.Fatal(err)
		}
		defer putScratch(bp)
		enc, _ := protowire.ConsumeBytes((*bp)[protowire.SizeTag(batchEnvelopesField):])
		if want, err := (proto.MarshalOptions{Deterministic: true}).Marshal(&got); err != nil || !bytes.Equal(enc, want) {
			t.Fatalf("%v encodes as %x, protobuf as %x (error %v)", &got, enc, want, err)
		}
	})
}
