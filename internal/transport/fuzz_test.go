package transport

import (
	"testing"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protowire"
)

// FuzzDeliverFrame feeds arbitrary bytes to both ends of a stream as a
// frame: whatever arrives, the transport must not panic, and what it
// answers must itself be a well-formed frame.
func FuzzDeliverFrame(f *testing.F) {
	req, _, _ := encodeEnvelope(&granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, CallId: 9, Payload: []byte("x")})
	resp, _, _ := encodeEnvelope(&granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_RESPONSE, CallId: 1})
	goAway, _, _ := encodeEnvelope(&granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_GO_AWAY})
	f.Add(append([]byte(nil), *req...))
	f.Add(append([]byte(nil), *resp...))
	f.Add(append([]byte(nil), *goAway...))
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0x0f})
	f.Add(protowire.AppendTag(nil, 1, protowire.BytesType))
	f.Add([]byte{0x0a, 0x04, 0x08, 0x02, 0x10})
	f.Fuzz(func(t *testing.T, frame []byte) {
		cfg := DefaultConfig()
		cfg.ClusterID, cfg.Self, cfg.Logger = "fuzz", "me", zap.NewNop()
		tr := &Transport{cfg: cfg, h: newEcho(), log: cfg.Logger, peers: map[string]*peer{}, dialed: map[*endpoint]bool{}, accepted: map[string]map[*endpoint]bool{}}
		for _, dialed := range []bool{false, true} {
			ep := newEndpoint(tr, "peer", "addr", dialed)
			if dialed {
				ep.pending[1] = &pendingCall{done: func(*granaryv1.Envelope, error) {}}
			}
			ep.deliverFrame(frame)
			// Whatever it queued in answer parses as a frame of envelopes.
			for _, out := range append(ep.frames, ep.cur) {
				if err := splitFrame(out, func(b []byte) {
					if err := unmarshalEnvelope(b, new(granaryv1.Envelope)); err != nil {
						t.Fatalf("the transport queued an envelope that does not decode: %v", err)
					}
				}); err != nil {
					t.Fatalf("the transport queued a malformed frame: %v", err)
				}
			}
		}
	})
}
