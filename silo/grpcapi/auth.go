package grpcapi

import (
	"context"

	"github.com/granaryio/granary/security/auth"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// AuthorizationHeader is the request metadata key of bearer tokens:
// "authorization: Bearer TOKEN".
const AuthorizationHeader = "authorization"

// AuthRequest returns the credentials of the gRPC call whose server
// context ctx is, for an auth.Authenticator: the values of its
// authorization metadata, and the client's certificate chain when the
// connection is TLS and the client presented one. The chain is the one
// crypto/tls verified when there is one (VerifiedChains), else the one the
// client sent (PeerCertificates), which a server configured by tlsfiles
// has verified itself; see auth.Request for what a server must verify.
// Any goroutine.
func AuthRequest(ctx context.Context) *auth.Request {
	r := &auth.Request{}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		r.Authorization = md.Get(AuthorizationHeader)
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			switch {
			case len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0:
				r.PeerCertificates = ti.State.VerifiedChains[0]
			case len(ti.State.PeerCertificates) > 0:
				r.PeerCertificates = ti.State.PeerCertificates
			}
		}
	}
	return r
}
