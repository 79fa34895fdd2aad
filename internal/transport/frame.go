package transport

import (
	"sync"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A frame is the encoding of a granaryv1.Batch: each envelope's encoding
// as field 1, length-delimited. Appending an encoded envelope to a frame
// therefore yields a frame, which is what lets callers encode their own
// envelopes and the writer send the concatenation without re-encoding.

const batchEnvelopesField = 1

var marshalCached = proto.MarshalOptions{UseCachedSize: true}

// scratch buffers for encoding envelopes before they are copied into a
// frame under the stream's lock.
var scratchPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// encodeEnvelope returns env's encoding as a Batch field in a pooled
// buffer, and its size as an envelope. The caller returns the buffer with
// putScratch.
func encodeEnvelope(env *granaryv1.Envelope) (*[]byte, int, error) {
	size, own := sizeEnvelope(env)
	bp, err := encodeSized(env, size, own)
	return bp, size, err
}

// sizeEnvelope returns the size of env's encoding, and whether the
// envelope's own encoder encodes it (else proto.Size has cached it).
func sizeEnvelope(env *granaryv1.Envelope) (int, bool) {
	if size, ok := envelopeSize(env); ok {
		return size, true
	}
	return proto.Size(env), false
}

// encodeSized is encodeEnvelope for an env whose size sizeEnvelope just
// took; own is what it reported.
func encodeSized(env *granaryv1.Envelope, size int, own bool) (*[]byte, error) {
	bp := scratchPool.Get().(*[]byte)
	b := protowire.AppendTag((*bp)[:0], batchEnvelopesField, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	if own {
		*bp = appendEnvelope(b, env)
		return bp, nil
	}
	b, err := marshalCached.MarshalAppend(b, env)
	*bp = b
	if err != nil {
		putScratch(bp)
		return nil, err
	}
	return bp, nil
}

func putScratch(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		scratchPool.Put(bp)
	}
}

// splitFrame calls fn with the encoding of each envelope in frame, in
// order. Fields other than the envelopes are skipped, as proto decoding
// would. It returns an error when the frame is malformed; fn has seen the
// envelopes before the damage.
func splitFrame(frame []byte, fn func(b []byte)) error {
	for len(frame) > 0 {
		num, typ, n := protowire.ConsumeTag(frame)
		if n < 0 {
			return protowire.ParseError(n)
		}
		frame = frame[n:]
		if num != batchEnvelopesField || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, frame)
			if n < 0 {
				return protowire.ParseError(n)
			}
			frame = frame[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(frame)
		if n < 0 {
			return protowire.ParseError(n)
		}
		fn(v)
		frame = frame[n:]
	}
	return nil
}

// peekHeader reads the kind and call ID of an envelope that does not
// decode, so that its sender can still be answered. ok is false when not
// even those can be read.
func peekHeader(b []byte) (kind granaryv1.EnvelopeKind, callID uint64, ok bool) {
	const kindField, callIDField = 1, 2
	var sawKind, sawID bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		if typ == protowire.VarintType && (num == kindField || num == callIDField) {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				break
			}
			b = b[n:]
			if num == kindField {
				kind, sawKind = granaryv1.EnvelopeKind(v), true
			} else {
				callID, sawID = v, true
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			break
		}
		b = b[n:]
	}
	return kind, callID, sawKind && sawID
}

// unmarshalEnvelope decodes one envelope.
func unmarshalEnvelope(b []byte, env *granaryv1.Envelope) error { return proto.Unmarshal(b, env) }

// openingHello reads the first frame of a stream: the hello that must open
// it, and the envelopes after it in the same frame. ok is false when the
// frame is malformed or does not open with a hello naming its sender.
func openingHello(frame []byte) (hello *granaryv1.Envelope, rest [][]byte, ok bool) {
	err := splitFrame(frame, func(b []byte) {
		if hello == nil {
			hello = new(granaryv1.Envelope)
			if proto.Unmarshal(b, hello) != nil {
				hello.Reset()
			}
			return
		}
		rest = append(rest, b)
	})
	if err != nil || hello == nil || hello.Kind != granaryv1.EnvelopeKind_ENVELOPE_KIND_HELLO || hello.Hello.GetSilo() == "" {
		return nil, nil, false
	}
	return hello, rest, true
}
