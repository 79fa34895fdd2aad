package transport

import (
	"unicode/utf8"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The envelope's own encoder. Every call and reply between processes is
// an Envelope, and protobuf's generic marshalling of one, a size pass and
// an encoding pass through its tables, was a third of what a silo spent
// sending a one-way call. The encoder below writes the fields that calls,
// replies and their control envelopes carry straight into the buffer, in
// field-number order as protobuf does, so that its output is protobuf's
// byte for byte (TestEnvelopeEncodingMatchesProtobuf). An envelope with
// anything else set (a call chain, a directory message, a hello, a nil
// header, unknown fields) or with a string that is not UTF-8, which
// protobuf refuses with an error, is left to protobuf.

// Envelope field numbers.
const (
	envKind           = 1
	envCallID         = 2
	envGrainType      = 3
	envGrainKey       = 4
	envMethod         = 5
	envMethodIndex    = 6
	envPayload        = 7
	envTimeoutNanos   = 8
	envHeaders        = 9
	envHops           = 11
	envPlaced         = 12
	envCode           = 13
	envMessage        = 14
	envActivationSilo = 15
	envCancellable    = 19
	envObserver       = 20
	envNotRun         = 21

	headerKey, headerValue = 1, 2
)

// envelopeSize returns the size of env's encoding, and whether
// appendEnvelope encodes it.
func envelopeSize(env *granaryv1.Envelope) (int, bool) {
	if env.Chain != nil || env.Directory != nil || env.DirectoryReply != nil || env.Hello != nil ||
		len(env.ProtoReflect().GetUnknown()) != 0 {
		return 0, false
	}
	if !utf8.ValidString(env.GrainType) || !utf8.ValidString(env.GrainKey) || !utf8.ValidString(env.Method) ||
		!utf8.ValidString(env.Message) || !utf8.ValidString(env.ActivationSilo) {
		return 0, false
	}
	n := varintSize(envKind, uint64(int64(env.Kind))) + varintSize(envCallID, env.CallId) +
		varintSize(envMethodIndex, uint64(env.MethodIndex)) + varintSize(envTimeoutNanos, uint64(env.TimeoutNanos)) +
		varintSize(envHops, uint64(env.Hops)) + boolSize(envPlaced, env.Placed) + varintSize(envCode, uint64(env.Code)) +
		boolSize(envCancellable, env.Cancellable) + boolSize(envObserver, env.Observer) + boolSize(envNotRun, env.NotRun) +
		bytesSize(envPayload, len(env.Payload)) + bytesSize(envGrainType, len(env.GrainType)) +
		bytesSize(envGrainKey, len(env.GrainKey)) + bytesSize(envMethod, len(env.Method)) +
		bytesSize(envMessage, len(env.Message)) + bytesSize(envActivationSilo, len(env.ActivationSilo))
	for _, h := range env.Headers {
		if h == nil || !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) ||
			len(h.ProtoReflect().GetUnknown()) != 0 {
			return 0, false
		}
		n += protowire.SizeTag(envHeaders) + protowire.SizeBytes(headerSize(h))
	}
	return n, true
}

// appendEnvelope appends the encoding of env, for which envelopeSize
// reported true, to b.
func appendEnvelope(b []byte, env *granaryv1.Envelope) []byte {
	b = appendVarint(b, envKind, uint64(int64(env.Kind)))
	b = appendVarint(b, envCallID, env.CallId)
	b = appendString(b, envGrainType, env.GrainType)
	b = appendString(b, envGrainKey, env.GrainKey)
	b = appendString(b, envMethod, env.Method)
	b = appendVarint(b, envMethodIndex, uint64(env.MethodIndex))
	if len(env.Payload) > 0 {
		b = protowire.AppendTag(b, envPayload, protowire.BytesType)
		b = protowire.AppendBytes(b, env.Payload)
	}
	b = appendVarint(b, envTimeoutNanos, uint64(env.TimeoutNanos))
	for _, h := range env.Headers {
		b = protowire.AppendTag(b, envHeaders, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(headerSize(h)))
		b = appendString(b, headerKey, h.Key)
		b = appendString(b, headerValue, h.Value)
	}
	b = appendVarint(b, envHops, uint64(env.Hops))
	b = appendBool(b, envPlaced, env.Placed)
	b = appendVarint(b, envCode, uint64(env.Code))
	b = appendString(b, envMessage, env.Message)
	b = appendString(b, envActivationSilo, env.ActivationSilo)
	b = appendBool(b, envCancellable, env.Cancellable)
	b = appendBool(b, envObserver, env.Observer)
	return appendBool(b, envNotRun, env.NotRun)
}

// headerSize is the size of h's encoding.
func headerSize(h *granaryv1.Header) int {
	return bytesSize(headerKey, len(h.Key)) + bytesSize(headerValue, len(h.Value))
}

// The sizes and encodings of proto3 singular fields, which are left out
// when they hold their zero value.

func varintSize(num int, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(protowire.Number(num)) + protowire.SizeVarint(v)
}

func boolSize(num int, v bool) int {
	if !v {
		return 0
	}
	return protowire.SizeTag(protowire.Number(num)) + 1
}

func bytesSize(num, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(protowire.Number(num)) + protowire.SizeBytes(n)
}

func appendVarint(b []byte, num int, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, protowire.Number(num), protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBool(b []byte, num int, v bool) []byte {
	if !v {
		return b
	}
	b = protowire.AppendTag(b, protowire.Number(num), protowire.VarintType)
	return append(b, 1)
}

func appendString(b []byte, num int, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, protowire.Number(num), protowire.BytesType)
	return protowire.AppendString(b, s)
}

// The envelope's own decoder, the encoder's inverse, for the stream's
// reader: it decodes the same fields, and gives up on anything else (a
// field it does not decode, a wire type protobuf would keep as unknown,
// a string that is not UTF-8, damage) for protobuf to decode or refuse
// as ever (TestEnvelopeDecodingMatchesProtobuf). A grain type, a method
// and a silo's name come from a small set, so the reader keeps one copy
// of each (names) instead of allocating it with every envelope.

// maxNames and maxNameLen bound the names a reader keeps: past them, a
// name it has not kept is allocated as protobuf would, so a peer sending
// names without end costs no more than it would anyway.
const (
	maxNames   = 4096
	maxNameLen = 256
)

// names is a reader's copies of the names it has decoded. Its reader only.
type names map[string]string

// name returns v as a string, a kept copy when there is one, and whether
// v is UTF-8.
func (ns *names) name(v []byte) (string, bool) {
	if s, ok := (*ns)[string(v)]; ok {
		return s, true
	}
	if !utf8.Valid(v) {
		return "", false
	}
	s := string(v)
	if *ns == nil {
		*ns = names{}
	}
	if len(*ns) < maxNames && len(s) <= maxNameLen {
		(*ns)[s] = s
	}
	return s, true
}

// decodeEnvelope decodes b into env, which it resets first, as
// proto.Unmarshal would. The reader goroutine only, with its names.
func decodeEnvelope(b []byte, env *granaryv1.Envelope, ns *names) error {
	clearEnvelope(env)
	if decodeOwn(b, env, ns) {
		return nil
	}
	proto.Reset(env)
	return proto.Unmarshal(b, env)
}

// clearEnvelope zeroes the fields decodeOwn sets, leaving env's protobuf
// state alone: env came from decodeEnvelope, or is new.
func clearEnvelope(env *granaryv1.Envelope) {
	if env.Chain != nil || env.Directory != nil || env.DirectoryReply != nil || env.Hello != nil ||
		len(env.ProtoReflect().GetUnknown()) != 0 {
		proto.Reset(env)
		return
	}
	env.Kind, env.CallId, env.GrainType, env.GrainKey, env.Method, env.MethodIndex = 0, 0, "", "", "", 0
	env.Payload, env.TimeoutNanos, env.Headers, env.Hops, env.Placed = nil, 0, nil, 0, false
	env.Code, env.Message, env.ActivationSilo = 0, "", ""
	env.Cancellable, env.Observer, env.NotRun = false, false, false
}

// decodeOwn decodes b into env, whose fields are zero, and reports
// whether it could; when it could not, env holds part of b.
func decodeOwn(b []byte, env *granaryv1.Envelope, ns *names) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || !setVarint(env, num, v) {
				return false
			}
			b = b[n:]
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !setBytes(env, num, v, ns) {
				return false
			}
			b = b[n:]
		default:
			return false
		}
	}
	return true
}

// setVarint sets env's varint field num to v, as protobuf decodes it,
// and reports whether num is one that decodeOwn decodes.
func setVarint(env *granaryv1.Envelope, num protowire.Number, v uint64) bool {
	switch num {
	case envKind:
		env.Kind = granaryv1.EnvelopeKind(int32(v))
	case envCallID:
		env.CallId = v
	case envMethodIndex:
		env.MethodIndex = uint32(v)
	case envTimeoutNanos:
		env.TimeoutNanos = int64(v)
	case envHops:
		env.Hops = uint32(v)
	case envPlaced:
		env.Placed = v != 0
	case envCode:
		env.Code = uint32(v)
	case envCancellable:
		env.Cancellable = v != 0
	case envObserver:
		env.Observer = v != 0
	case envNotRun:
		env.NotRun = v != 0
	default:
		return false
	}
	return true
}

// setBytes sets env's length-delimited field num to v, as protobuf
// decodes it, and reports whether it could.
func setBytes(env *granaryv1.Envelope, num protowire.Number, v []byte, ns *names) bool {
	ok := true
	switch num {
	case envGrainType:
		env.GrainType, ok = ns.name(v)
	case envMethod:
		env.Method, ok = ns.name(v)
	case envActivationSilo:
		env.ActivationSilo, ok = ns.name(v)
	case envGrainKey:
		env.GrainKey, ok = string(v), utf8.Valid(v)
	case envMessage:
		env.Message, ok = string(v), utf8.Valid(v)
	case envPayload:
		env.Payload = append([]byte(nil), v...)
	case envHeaders:
		h := new(granaryv1.Header)
		env.Headers = append(env.Headers, h)
		return decodeHeader(v, h)
	default:
		return false
	}
	return ok
}

// decodeHeader decodes b into h, and reports whether it could.
func decodeHeader(b []byte, h *granaryv1.Header) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || num != headerKey && num != headerValue {
			return false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 || !utf8.Valid(v) {
			return false
		}
		b = b[n:]
		if num == headerKey {
			h.Key = string(v)
		} else {
			h.Value = string(v)
		}
	}
	return true
}
