package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/silo/grpcapi"
	"github.com/granaryio/granary/silo/internal/cluster"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/membership"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Config is what the gateway takes from the silo's configuration:
// the silo's GatewayConfig, its name and rejection counters, and the
// gossip configuration of a silo in a cluster (nil for a silo alone).
type Config struct {
	Name       string
	Rejections *security.Rejections
	Membership *membership.Config

	Listen               string
	Advertise            string
	Transport            transport.Config
	Credentials          credentials.TransportCredentials
	Keepalive            keepalive.ServerParameters
	KeepaliveEnforcement keepalive.EnforcementPolicy
	ServerOptions        []grpc.ServerOption
	Services             []*grain.ServiceDesc
	Authenticator        auth.Authenticator
	// StreamTail, when set, serves granary.v1.StreamGateway/Subscribe:
	// the silo's durable streams.
	StreamTail func(ctx context.Context, req *granaryv1.StreamTailRequest, start func(pos uint64) error, send func(*granaryv1.StreamItem) error) error
}

// Gateway is a silo's service to external clients.
type Gateway struct {
	// Cl is the silo's cluster, or nil for a silo alone. Set before the
	// gateway serves.
	Cl  *cluster.Cluster
	s   *local.Runtime
	cfg Config
	log *zap.Logger
	// Addr is the advertised address, or "" when it is each client's own
	// view of it (a silo alone bound to every interface).
	Addr      string
	clusterID string
	self      string // the gateway's ID: the silo's member ID, or unique to this start alone
	Lis       *transport.GRPCListener
	tport     *transport.Transport
	health    *health.Server

	// auth authenticates clients; nil without GatewayConfig.Authenticator.
	auth *gatewayAuth

	homes homes

	// cancels holds what cancels the calls clients may cancel.
	cancels local.CancelTable

	// inflight counts client requests not yet answered: Stop waits for
	// them.
	inflight local.InflightCount
}

// New makes the gateway of a silo whose local runtime is rt and
// binds its listener, so that its address is known before the silo joins
// its cluster.
func New(rt *local.Runtime, cfg Config) (*Gateway, error) {
	g := &Gateway{s: rt, cfg: cfg, log: rt.Log.Named("gateway"), auth: newGatewayAuth(cfg.Authenticator, cfg.Rejections)}
	cfg.Transport.Listener, cfg.Transport.Rejections = security.ListenerGateway, cfg.Rejections
	ka := cfg.Keepalive
	if ka.MaxConnectionIdle == 0 {
		ka.MaxConnectionIdle = cfg.Transport.MaxConnectionIdle
	}
	opts := []grpc.ServerOption{grpc.KeepaliveParams(ka), grpc.KeepaliveEnforcementPolicy(cfg.KeepaliveEnforcement)}
	if cfg.Credentials != nil {
		opts = append(opts, grpc.Creds(security.WatchHandshakes(cfg.Credentials, cfg.Rejections, security.ListenerGateway, "")))
	}
	opts = append(opts, g.authServerOptions()...)
	opts = append(opts, cfg.ServerOptions...)
	g.homes.m = map[string]directory.Entry{}
	gw, err := transport.ListenGRPCService(cfg.Listen, transport.GatewayService, []grpc.MethodDesc{g.gatewaysMethod()}, cfg.Transport, opts...)
	if err != nil {
		return nil, fmt.Errorf("silo: gateway: listening on %s: %w", cfg.Listen, err)
	}
	g.Lis = gw
	g.Addr = cfg.Advertise
	if g.Addr == "" {
		var mcfg membership.Config
		if cfg.Membership != nil {
			mcfg = *cfg.Membership
		}
		g.Addr = cluster.DialableAddr(gw.Addr(), mcfg)
		if g.Addr == "" && cfg.Membership != nil {
			gw.Stop()
			return nil, &local.ConfigError{Field: "Gateway.Advertise",
				Reason: fmt.Sprintf("must be set: the gateway %s is bound to every interface and neither the gossip AdvertiseAddr nor BindAddr names a host clients can dial", gw.Addr())}
		}
	}
	return g, nil
}

// Serve starts serving clients: Go clients' streams, every grain type as
// a plain gRPC service calling through caller, reflection and health. cl
// is the silo's cluster, or nil.
func (g *Gateway) Serve(cl *cluster.Cluster, caller grain.Caller) error {
	s := g.s
	tcfg := g.cfg.Transport
	// A silo alone has no member ID; its gateway takes one that is new
	// at each start, as a member ID is, so that clients tell a restarted
	// silo from the one that went away.
	tcfg.ClusterID, tcfg.Self = LocalClusterID, g.cfg.Name+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)
	if cl != nil {
		tcfg.ClusterID, tcfg.Self = cl.Cfg.Membership.ClusterID, cl.SelfID
	}
	if tcfg.Logger == nil {
		tcfg.Logger = g.log.Named("transport")
	}
	if tcfg.Clock == nil {
		tcfg.Clock = s.Clock
	}
	g.clusterID, g.self = tcfg.ClusterID, tcfg.Self
	tcfg.Listener, tcfg.Rejections = security.ListenerGateway, g.cfg.Rejections
	var err error
	if g.tport, err = transport.New(tcfg, noNetwork{}, g); err != nil {
		return fmt.Errorf("silo: gateway: %w", err)
	}
	descs := make([]*grain.ServiceDesc, 0, len(s.Types)+len(g.cfg.Services))
	for _, name := range s.HostedTypes() {
		if name == granaryv1.Stream_ServiceDesc.Type {
			// The runtime's stream grain keeps grains' subscriptions:
			// not a service for clients, who reach streams through the
			// Go client's Publish.
			continue
		}
		descs = append(descs, s.Types[name].Desc)
	}
	for _, d := range g.cfg.Services {
		if s.Types[d.Type] == nil {
			descs = append(descs, d)
		}
	}
	srv := g.Lis.Server()
	// Always: it marks the calls as from outside the silo, for the queue
	// wait limit and latency, and sheds them only when shedding is on.
	caller = shedCaller{Caller: caller, g: g}
	if err := grpcapi.Register(srv, caller, descs, g.log); err != nil {
		return fmt.Errorf("silo: gateway: %w", err)
	}
	if g.cfg.StreamTail != nil {
		srv.RegisterService(g.streamService(), nil)
	}
	g.health = grpcapi.RegisterDiscovery(srv)
	if err := g.Lis.Serve(g.tport); err != nil {
		return fmt.Errorf("silo: gateway: %w", err)
	}
	// Serve registered granary.v1.Gateway after RegisterDiscovery, which
	// set the health of the services before it.
	g.health.SetServingStatus(transport.GatewayService, healthpb.HealthCheckResponse_SERVING)
	g.log.Info("gateway serving clients", zap.String("listen", g.Lis.Addr()), zap.String("advertise", g.Addr))
	return nil
}

// localClusterID is the cluster ID of a silo alone, which its clients
// learn from its gateway.
const LocalClusterID = "local"

// noNetwork is the gateway transport's network: a gateway never dials, it
// only accepts the streams clients open.
type noNetwork struct{}

func (noNetwork) Dial(context.Context, string) (transport.Conn, error) {
	return nil, status.Error(codes.Internal, "granary: a gateway does not dial clients")
}

func (noNetwork) Forget(string) {}

// gatewaysMethod is the unary method that lists the live gateways.
func (g *Gateway) gatewaysMethod() grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: "Gateways",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			var req granaryv1.GatewaysRequest
			if err := dec(&req); err != nil {
				return nil, err
			}
			if interceptor == nil {
				return g.gateways(ctx)
			}
			// Through the interceptors, which authenticate the caller:
			// the list names the cluster's gateways.
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + transport.GatewayService + "/Gateways"}
			return interceptor(ctx, &req, info, func(ctx context.Context, _ any) (any, error) { return g.gateways(ctx) })
		},
	}
}

// gateways lists the active silos that serve a gateway. A silo alone, or
// one whose address is each client's own view of it, answers with the
// address the client dialled.
func (g *Gateway) gateways(ctx context.Context) (*granaryv1.GatewaysResponse, error) {
	s := g.s
	resp := &granaryv1.GatewaysResponse{ClusterId: g.clusterID}
	if g.auth != nil {
		resp.ClientIdPrefix = ClientIDPrefix(grain.Principal(ctx))
	}
	self := g.Addr
	if self == "" {
		if md, ok := metadata.FromIncomingContext(ctx); ok && len(md[":authority"]) > 0 {
			self = md[":authority"][0]
		}
	}
	if s.Cl == nil {
		if !s.Stopping.Load() {
			resp.Gateways = append(resp.Gateways, &granaryv1.GatewayEndpoint{Silo: g.self, Address: self})
		}
		return resp, nil
	}
	cl := g.Cl
	cl.ViewMu.Lock()
	if cl.SelfStatus == membership.StatusActive && !s.Stopping.Load() {
		resp.Gateways = append(resp.Gateways, &granaryv1.GatewayEndpoint{Silo: cl.SelfID, Address: self})
	}
	for _, m := range cl.Members {
		if m.Status == membership.StatusActive && m.GatewayAddr != "" {
			resp.Gateways = append(resp.Gateways, &granaryv1.GatewayEndpoint{Silo: m.ID, Address: m.GatewayAddr})
		}
	}
	cl.ViewMu.Unlock()
	slices.SortFunc(resp.Gateways, func(a, b *granaryv1.GatewayEndpoint) int { return strings.Compare(a.Silo, b.Silo) })
	return resp, nil
}

// Deliver takes an envelope from a client: a call, routed as a call from
// another silo is, or the cancellation of one. With an Authenticator,
// each call (and HOME) is authenticated again with its stream's
// credentials. A call's principal header is the one the gateway verified,
// never one the client sent. While the silo sheds load, calls are refused
// with ResourceExhausted (OverloadError); cancellations and HOME are
// not. The stream's reader goroutine; it does not block.
func (g *Gateway) Deliver(from string, env *granaryv1.Envelope, r transport.Responder) {
	switch env.Kind {
	case granaryv1.EnvelopeKind_ENVELOPE_KIND_CANCEL:
		g.cancels.Cancel(local.RemoteCall{From: from, ID: env.CallId})
		return
	case granaryv1.EnvelopeKind_ENVELOPE_KIND_HOME, granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY:
	default:
		if r.Expects() {
			r.Reply(transport.SetStatus(&granaryv1.Envelope{}, status.Errorf(codes.InvalidArgument, "granary: a gateway takes no %v envelopes from clients", env.Kind)))
		}
		return
	}
	s := g.s
	refuse := transport.Refuser(r, g.log, "dropped a one-way call from a client", from)
	var principal string
	if g.auth != nil {
		var err error
		if principal, err = g.auth.clientPrincipal(from); err != nil {
			refuse(codes.Unauthenticated, "%s", status.Convert(err).Message())
			return
		}
	}
	if env.Kind == granaryv1.EnvelopeKind_ENVELOPE_KIND_HOME {
		g.home(from, r)
		return
	}
	if g.sheds() {
		// Every call from a client is new work. The refusal comes after
		// authentication, so that it names the silo only to clients that
		// proved who they are.
		err := g.shed(from, !r.Expects())
		if r.Expects() {
			r.Reply(transport.SetStatus(&granaryv1.Envelope{NotRun: true}, err))
		}
		return
	}
	env.Headers = WithPrincipal(env.Headers, principal)
	id := grain.ID{Type: env.GrainType, Key: env.GrainKey}
	switch {
	case id.Type == "" || strings.Contains(id.Type, "/"):
		refuse(codes.InvalidArgument, "granary: %q is not a grain type", id.Type)
		return
	case id.Key == "":
		refuse(codes.InvalidArgument, "granary: calling a %s grain with an empty key", id.Type)
		return
	case local.RuntimeMethod(env.Method) != nil && !env.Observer:
		// The runtime's own methods: only the silo that owns a reminder,
		// or the activation of a stream, calls them, and other silos take
		// them only from silos.
		s.Cfg.Rejections.Reject(security.ListenerGateway, security.ReasonPermissionDenied, "", errRuntimeMethod)
		refuse(codes.PermissionDenied, "granary: %s is the runtime's method; clients cannot call it", env.Method)
		return
	case id.Type == granaryv1.Stream_ServiceDesc.Type && env.Method != streamPublishMethod && !env.Observer:
		// A stream grain keeps subscriptions of grains, which only
		// grains make; a client may publish.
		s.Cfg.Rejections.Reject(security.ListenerGateway, security.ReasonPermissionDenied, "", errRuntimeMethod)
		refuse(codes.PermissionDenied, "granary: %s is the runtime's; clients may call only its Publish", env.Method)
		return
	}
	var m *grain.MethodDesc
	if env.Observer {
		m = s.RelayMethod(local.RelayKey{Type: id.Type, Method: env.Method, Index: env.MethodIndex, Observer: true})
	} else if t := s.Types[id.Type]; t != nil {
		var err error
		if m, err = t.Method(id, env, codes.Unimplemented); err != nil {
			refuse(status.Code(err), "%s", status.Convert(err).Message())
			return
		}
	} else {
		if s.Cl == nil {
			refuse(codes.NotFound, "granary: no silo hosts grain type %q", id.Type)
			return
		}
		m = s.RelayMethod(local.RelayKey{Type: id.Type, Method: env.Method, Index: env.MethodIndex, Observer: false})
	}
	// Every call from a client is new work, and none has been passed on.
	if !r.Expects() && !env.Observer && s.PostIncoming(env, id, m, 0, true) {
		return
	}
	s.Route(nil, s.Incoming(from, env, id, m, r, local.ClientWaiter, &g.cancels, &g.inflight))
}

// errRuntimeMethod is why a client's call to one of the runtime's methods
// is refused, for the count.
var errRuntimeMethod = errors.New("a client called one of the runtime's methods")

// streamPublishMethod is the one method of stream grains that clients may
// call.
var streamPublishMethod = granaryv1.Stream_ServiceDesc.Methods[0].Name

// Reply answers a client's call; settle calls it once the outcome is in.
// Calls a grain's filter refused as unauthenticated or forbidden are
// counted here, at the edge, once each, wherever the grain ran.
func (g *Gateway) Reply(c *local.Call) {
	defer g.inflight.Done()
	if c.Err != nil {
		g.countRefused("", c.Err)
	}
	cluster.Answer(c, "")
}

// goAwayTimeout bounds the wait for clients to answer a go-away: a client
// that does not answer (frozen, or cut off) is not waited for longer, and
// its calls, if it sends any, are refused as the silo stops.
const goAwayTimeout = 5 * time.Second

// stopGrace bounds the wait for the gateway's plain gRPC calls and
// streams (a load balancer's health watch, above all) to end once the
// client streams are closed; then they are cut.
const stopGrace = 500 * time.Millisecond

// GoAway tells the health service and every client that the gateway is
// going: clients send no new call here and move the calls they have not
// sent to other gateways. It waits until each client has answered, or
// ctx ends. Stop calls it first.
func (g *Gateway) GoAway(ctx context.Context) {
	if g.health != nil {
		g.health.Shutdown()
	}
	if g.tport == nil {
		return
	}
	g.leaveHomes()
	ctx, cancel := context.WithTimeout(ctx, goAwayTimeout)
	defer cancel()
	if err := g.tport.GoAway(ctx); err != nil {
		g.log.Warn("clients did not answer the gateway's go-away in time", zap.Error(err))
	}
}

// Finish waits until every client call is answered, writes the last
// answers out and stops the gateway's server, or gives up when ctx ends.
func (g *Gateway) Finish(ctx context.Context) error {
	err := g.inflight.Drain(ctx, "client calls")
	if g.tport != nil {
		if serr := g.tport.Shutdown(ctx); serr != nil && err == nil {
			err = serr
		}
	}
	gctx, cancel := context.WithTimeout(ctx, stopGrace)
	defer cancel()
	g.Lis.GracefulStop(gctx)
	return err
}

// CancelCalls cancels the contexts of the clients' calls still running:
// the silo is closing.
func (g *Gateway) CancelCalls() { g.cancels.CancelAll() }

// Close stops the gateway at once: client streams end and what waits on
// them fails. Idempotent.
func (g *Gateway) Close() {
	g.cancels.CancelAll()
	if g.tport != nil {
		g.tport.Close()
	}
	g.Lis.Stop()
}
