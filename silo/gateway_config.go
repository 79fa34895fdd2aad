package silo

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/transport"
	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/silo/internal/gateway"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// GatewayConfig makes a silo serve external clients on a gRPC server of
// its own. The server carries three things: the streams of Go clients
// (client.Dial), which batch calls as silos do among themselves; every
// grain type registered on the silo as an ordinary gRPC service of the
// same proto, for clients in any language, with the grain key in the
// "granary-key" request metadata or a request field marked as the key;
// and gRPC server reflection and the gRPC health service, so grpcurl and
// load balancers work with no Granary library. Start from
// DefaultGatewayConfig.
type GatewayConfig struct {
	// Listen is where the gateway listens, host:port; port 0 picks a
	// free port. Default ":30000".
	Listen string

	// Advertise is the address clients are told to dial, host:port: what
	// the silo gossips to the cluster and gateways list to clients.
	// Default: Listen as bound, with the gossip advertise or bind address
	// as its host when Listen is bound to every interface (a silo alone
	// then advertises the address each client reached it at).
	Advertise string

	// Transport sets the limits of client streams (the largest message,
	// batching, the send queue) and of the gateway's connections (the
	// handshake deadline, the cap on connections and on streams of one,
	// idle connections closed). Its ClusterID, Self and Rejections are
	// filled in.
	// MaxMessageSize also bounds the requests of plain gRPC clients.
	Transport transport.Config

	// Credentials secure the gateway, with TLS for instance. Nil serves
	// plaintext.
	Credentials credentials.TransportCredentials

	// Keepalive is how the gateway pings idle client connections (its
	// MaxConnectionIdle, when 0, is Transport's), and
	// KeepaliveEnforcement how often clients may ping it. The default
	// enforcement lets clients ping every 10 s, also without calls in
	// flight, which is what client.Dial does.
	Keepalive            keepalive.ServerParameters
	KeepaliveEnforcement keepalive.EnforcementPolicy

	// ServerOptions are added to the gateway's gRPC server options:
	// interceptors, say. They apply to the plain gRPC grain services.
	// Interceptors added with grpc.ChainUnaryInterceptor and
	// grpc.ChainStreamInterceptor run after the gateway's authentication
	// and see the verified principal (grain.Principal of their context);
	// one set with grpc.UnaryInterceptor or grpc.StreamInterceptor runs
	// before it, on calls not yet authenticated.
	ServerOptions []grpc.ServerOption

	// Services are grain types the gateway serves over plain gRPC besides
	// those registered on the silo: types that other silos of the
	// cluster host, so that a client in any language reaches every grain
	// through any gateway. Pass the generated descriptors
	// (bankpb.Account_ServiceDesc). A call to a type no live silo hosts
	// fails with NotFound.
	Services []*grain.ServiceDesc

	// Authenticator tells who is calling: every call from a client (but
	// the health service's) must prove a principal to it, or is refused
	// with Unauthenticated; the principal reaches grains as
	// grain.Principal, which incoming filters authorize with. Build it
	// with package auth: auth.Chain(auth.ClientCert(),
	// auth.Bearer(tokenFile)) takes a client certificate's common name,
	// else a bearer token from a token file; append auth.Anonymous() to
	// let callers without credentials in as "" and leave the decision to
	// filters. It needs Credentials: tokens and certificates are not for
	// plaintext. Nil: no authentication, every caller is anonymous ("").
	// Either way a client cannot name its own principal: the gateway
	// removes grain.PrincipalHeader from what clients send.
	Authenticator auth.Authenticator
}

// DefaultGatewayConfig returns the gateway configuration described on
// each field.
func DefaultGatewayConfig() GatewayConfig {
	return GatewayConfig{
		Listen:               ":30000",
		Transport:            transport.DefaultConfig(),
		KeepaliveEnforcement: keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true},
	}
}

func (c *GatewayConfig) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: "Gateway." + field, Reason: fmt.Sprintf(format, args...)}
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return bad("Listen", "%q is not host:port: %v", c.Listen, err)
	}
	if c.Advertise != "" {
		if _, port, err := net.SplitHostPort(c.Advertise); err != nil || port == "" || port == "0" {
			return bad("Advertise", "%q is not a dialable host:port", c.Advertise)
		}
	}
	if c.Authenticator != nil && (c.Credentials == nil || c.Credentials.Info().SecurityProtocol == "insecure") {
		return bad("Authenticator", "needs Credentials with TLS: bearer tokens would cross the network in the clear, and plaintext has no client certificates")
	}
	for i, d := range c.Services {
		if d == nil || d.Type == "" || d.Observer {
			return bad(fmt.Sprintf("Services[%d]", i), "is not the descriptor of a grain type")
		}
	}
	tc := c.Transport
	tc.ClusterID, tc.Self = "-", "-" // filled in at Start
	var te *transport.ConfigError
	if err := tc.Validate(); errors.As(err, &te) {
		return bad("Transport."+te.Field, "%s", te.Reason)
	} else if err != nil {
		return bad("Transport", "%v", err)
	}
	return nil
}

// listenGateway binds the gateway's listener, so that its address is
// known before the silo joins its cluster. Start calls it.
func (s *Silo) listenGateway() error {
	c := s.cfg.Gateway
	p := gateway.Config{
		Name:                 s.cfg.Name,
		Rejections:           s.cfg.Rejections,
		Listen:               c.Listen,
		Advertise:            c.Advertise,
		Transport:            c.Transport,
		Credentials:          c.Credentials,
		Keepalive:            c.Keepalive,
		KeepaliveEnforcement: c.KeepaliveEnforcement,
		ServerOptions:        c.ServerOptions,
		Services:             c.Services,
		Authenticator:        c.Authenticator,
	}
	if s.streams != nil {
		p.StreamTail = s.streams.Tail
	}
	if s.cfg.Cluster != nil {
		p.Membership = &s.cfg.Cluster.Membership
	}
	g, err := gateway.New(s.rt, p)
	if err != nil {
		return configError(err)
	}
	s.gw = g
	s.rt.Gw = g
	return nil
}

// startGateway serves clients. Start calls it once the silo is ready.
func (s *Silo) startGateway() error {
	return s.gw.Serve(s.cl, s.rt)
}

// GatewayAddr returns the address the gateway listens on (a port 0 in the
// configuration shows as the port picked), or "" when the silo serves no
// gateway. Valid once Start has returned.
func (s *Silo) GatewayAddr() string {
	if s.gw == nil {
		return ""
	}
	return s.gw.Lis.Addr()
}

// ClientIDPrefix is the prefix that the client IDs of principal must
// start with at a gateway that authenticates: derived from the principal
// alone, so every gateway of the cluster agrees without asking another,
// and told to the client in the gateway list before it opens a stream. A
// principal therefore cannot open a stream under another's client ID at
// any gateway, nor register itself as the home of another's observers.
func ClientIDPrefix(principal string) string { return gateway.ClientIDPrefix(principal) }
