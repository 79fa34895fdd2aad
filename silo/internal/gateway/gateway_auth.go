package gateway

// Who is calling: the gateway's authentication.
//
// A gateway with an Authenticator authenticates every call that reaches it
// from outside, except the health service's Check (load balancers probe it
// without credentials): the unary and streaming methods of its gRPC server
// in interceptors, and, since one Connect stream carries many calls, every
// request a Go client sends on its stream again, in Deliver, so that a
// token revoked from the token file stops working on streams already open
// within the file's check interval. A refusal is Unauthenticated, counted
// by the silo's Rejections as ReasonUnauthenticated; the calls that grains'
// filters refuse with PermissionDenied (or Unauthenticated) are counted as
// the gateway answers them.
//
// The principal reaches the grain in the reserved call header
// grain.PrincipalHeader, which the gateway writes, and only the gateway:
// it removes that header from every envelope a client sends (with or
// without an Authenticator), and the plain gRPC services take no call
// headers from client metadata but the trace ones. Between silos the
// header travels as any call header does; silos trust each other.
//
// Deliver knows a stream's calls only by the client ID the stream's hello
// named, which the client chose. So that one client cannot borrow another
// one's ID to be credited with its principal, the Connect interceptor
// reads the hello as the stream opens and binds the ID to the stream's
// principal: a second stream under a bound ID must prove the same
// principal, or it is refused with PermissionDenied. The binding ends
// with the ID's last stream.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/silo/grpcapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// connectMethod is the full name of the Go clients' stream method.
const connectMethod = "/" + transport.GatewayService + "/Connect"

// healthService prefixes the unary methods served without
// authentication (Check).
const healthService = "/grpc.health.v1.Health/"

// gatewayAuth is the gateway's authentication state. Nil when the gateway
// has no Authenticator.
type gatewayAuth struct {
	a   auth.Authenticator
	rej *security.Rejections

	mu sync.RWMutex
	// clients binds the client IDs of open Connect streams to the
	// principal they proved, with the streams; mu guards it.
	clients map[string]*clientBinding
}

// clientBinding is one client ID's principal and its open streams, the
// newest last, whose credentials Deliver checks again.
type clientBinding struct {
	principal string
	streams   []*authedStream
}

func newGatewayAuth(a auth.Authenticator, rej *security.Rejections) *gatewayAuth {
	if a == nil {
		return nil
	}
	return &gatewayAuth{a: a, rej: rej, clients: map[string]*clientBinding{}}
}

// authServerOptions are the gateway server's interceptors: they come
// before GatewayConfig.ServerOptions' own, so that those see the verified
// principal (grain.Principal of the handler's context).
func (g *Gateway) authServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(g.unaryInterceptor),
		grpc.ChainStreamInterceptor(g.streamInterceptor),
	}
}

// authenticate authenticates the gRPC call of ctx, or returns the
// Unauthenticated error that refuses it, counted. Any goroutine.
func (ga *gatewayAuth) authenticate(ctx context.Context, r *auth.Request) (string, error) {
	p, err := ga.a.Authenticate(r)
	if err != nil {
		return "", ga.refuse(remoteOf(ctx), err)
	}
	return p, nil
}

// refuse counts the refusal of a caller at remote whose credentials
// failed with err, and returns the status the caller gets.
func (ga *gatewayAuth) refuse(remote string, err error) error {
	ga.rej.Reject(security.ListenerGateway, security.ReasonUnauthenticated, remote, err)
	return status.Errorf(codes.Unauthenticated, "granary: the gateway does not know who is calling: %s", strings.TrimPrefix(err.Error(), "auth: "))
}

func remoteOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// unaryInterceptor authenticates a unary call (the gateway list, a grain
// method over plain gRPC) and gives the handler the verified principal
// as the context's grain.PrincipalHeader. It counts the refusals that
// come back from grains. Any goroutine.
func (g *Gateway) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, healthService) {
		return handler(ctx, req)
	}
	if ga := g.auth; ga != nil {
		p, err := ga.authenticate(ctx, grpcapi.AuthRequest(ctx))
		if err != nil {
			return nil, err
		}
		ctx = grain.WithPrincipal(ctx, p)
	}
	resp, err := handler(ctx, req)
	if err != nil {
		g.countRefused(remoteOf(ctx), err)
	}
	return resp, err
}

// countRefused counts a call that a grain's filter (or the gateway)
// refused as unauthenticated or forbidden.
func (g *Gateway) countRefused(remote string, err error) {
	switch status.Code(err) {
	case codes.PermissionDenied:
		g.s.Cfg.Rejections.Reject(security.ListenerGateway, security.ReasonPermissionDenied, remote, err)
	case codes.Unauthenticated:
		g.s.Cfg.Rejections.Reject(security.ListenerGateway, security.ReasonUnauthenticated, remote, err)
	}
}

// streamInterceptor authenticates a streaming call: a Go client's
// Connect stream, whose client ID it binds to the principal, server
// reflection, or the health service's Watch. Only the health service's
// unary Check is open, for load balancers: an open Watch would hold a
// stream, and so its connection past MaxConnectionIdle, for nobody
// known. Any goroutine.
func (g *Gateway) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ga := g.auth
	if ga == nil {
		return handler(srv, ss)
	}
	ctx := ss.Context()
	r := grpcapi.AuthRequest(ctx)
	p, err := ga.authenticate(ctx, r)
	if err != nil {
		return err
	}
	if info.FullMethod != connectMethod {
		return handler(srv, ss)
	}
	st := &authedStream{ServerStream: ss, ga: ga, principal: p, req: r, remote: remoteOf(ctx)}
	defer st.unbind()
	return handler(srv, st)
}

// authedStream is an authenticated Connect stream. Its first RecvMsg,
// which returns the frame that opens with the hello, binds the hello's
// client ID to the stream's principal. The stream's reader only, but for
// unbind, which runs once the handler has returned.
type authedStream struct {
	grpc.ServerStream
	ga        *gatewayAuth
	principal string
	req       *auth.Request
	remote    string

	client string // the bound client ID, once bound
	bound  bool
}

func (st *authedStream) RecvMsg(m any) error {
	if err := st.ServerStream.RecvMsg(m); err != nil || st.bound {
		return err
	}
	client, ok := transport.StreamHello(m)
	if !ok {
		// The transport refuses the stream too; refuse it here so that
		// nothing unbound is ever delivered.
		return status.Error(codes.InvalidArgument, "granary: a client stream must open with a hello")
	}
	if err := st.ga.bind(client, st); err != nil {
		st.ga.rej.Reject(security.ListenerGateway, security.ReasonPermissionDenied, st.remote, err)
		return err
	}
	st.client, st.bound = client, true
	return nil
}

// ClientIDPrefix is the prefix that the client IDs of principal must
// start with at a gateway that authenticates: derived from the principal
// alone, so every gateway of the cluster agrees without asking another,
// and told to the client in the gateway list before it opens a stream. A
// principal therefore cannot open a stream under another's client ID at
// any gateway, nor register itself as the home of another's observers.
func ClientIDPrefix(principal string) string {
	sum := sha256.Sum256([]byte(principal))
	return "p" + hex.EncodeToString(sum[:8]) + "-"
}

// bind binds client to st's principal and counts st among its streams,
// or refuses st when the client ID is not its principal's or is bound to
// another principal.
func (ga *gatewayAuth) bind(client string, st *authedStream) error {
	if !strings.HasPrefix(client, ClientIDPrefix(st.principal)) {
		return status.Errorf(codes.PermissionDenied, "granary: client ID %s is not one of this principal's: a client must take the client ID prefix the gateway list gives", client)
	}
	ga.mu.Lock()
	defer ga.mu.Unlock()
	b := ga.clients[client]
	if b == nil {
		b = &clientBinding{principal: st.principal}
		ga.clients[client] = b
	} else if b.principal != st.principal {
		return status.Errorf(codes.PermissionDenied, "granary: client ID %s is in use by another principal", client)
	}
	b.streams = append(b.streams, st)
	return nil
}

// unbind forgets st; the binding goes with its client's last stream. The
// transport delivers nothing from st by now: the handler has returned.
func (st *authedStream) unbind() {
	if !st.bound {
		return
	}
	ga := st.ga
	ga.mu.Lock()
	defer ga.mu.Unlock()
	b := ga.clients[st.client]
	if b == nil {
		return
	}
	for i, o := range b.streams {
		if o == st {
			b.streams = append(b.streams[:i], b.streams[i+1:]...)
			break
		}
	}
	if len(b.streams) == 0 {
		delete(ga.clients, st.client)
	}
}

// clientPrincipal authenticates a request that arrived on client's
// stream again, with the credentials of the client's newest stream, and
// returns its principal, or the Unauthenticated error that refuses it
// (counted). The stream's reader goroutine; it does not block unless the
// Authenticator does.
func (ga *gatewayAuth) clientPrincipal(client string) (string, error) {
	ga.mu.RLock()
	var st *authedStream
	if b := ga.clients[client]; b != nil && len(b.streams) > 0 {
		st = b.streams[len(b.streams)-1]
	}
	ga.mu.RUnlock()
	if st == nil {
		// Every Connect stream is bound before it delivers; a broken
		// invariant, refused rather than let through.
		return "", ga.refuse("", errUnbound)
	}
	p, err := ga.a.Authenticate(st.req)
	switch {
	case err != nil:
		return "", ga.refuse(st.remote, err)
	case p != st.principal:
		return "", ga.refuse(st.remote, errPrincipalChanged)
	}
	return p, nil
}

var (
	errUnbound          = errors.New("auth: the client's stream was never authenticated")
	errPrincipalChanged = errors.New("auth: the stream's credentials now prove another principal; reconnect")
)

// WithPrincipal returns hs without any grain.PrincipalHeader a client
// put there, and with principal's when it is not "": a client never
// chooses its principal. It filters hs in place.
func WithPrincipal(hs []*granaryv1.Header, principal string) []*granaryv1.Header {
	out := hs[:0]
	for _, h := range hs {
		if h.GetKey() != grain.PrincipalHeader {
			out = append(out, h)
		}
	}
	clear(hs[len(out):])
	if principal != "" {
		out = append(out, &granaryv1.Header{Key: grain.PrincipalHeader, Value: principal})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
