package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// An Option changes how Dial connects and how the client calls.
type Option func(*options)

type options struct {
	seeds        []string
	dnsSeed      string
	log          *zap.Logger
	creds        credentials.TransportCredentials
	callTimeout  time.Duration
	keepalive    keepalive.ClientParameters
	refresh      time.Duration
	maxMessage   int
	dialOptions  []grpc.DialOption
	lookupHost   func(host string) ([]string, error)
	gatewayRetry time.Duration
	outgoing     []grain.OutgoingFilter
	clock        clockwork.Clock

	// token is the bearer token sent with every call and stream, "" for
	// none; insecureToken lets it go over plaintext.
	token         string
	insecureToken bool
	// tlsFiles are the PEM files of WithTLSFiles, loaded at Dial.
	tlsFiles *tlsfiles.Files
	// tlsServerName is WithTLSServerName's.
	tlsServerName string
}

func defaultOptions() options {
	return options{
		log:          zap.NewNop(),
		callTimeout:  30 * time.Second,
		keepalive:    keepalive.ClientParameters{Time: 20 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true},
		refresh:      30 * time.Second,
		maxMessage:   4 << 20,
		lookupHost:   net.LookupHost,
		gatewayRetry: time.Second,
		clock:        clockwork.NewRealClock(),
	}
}

// WithGateways names gateways to learn the cluster from, host:port each.
// The client asks them for the live gateway list and from then on keeps
// that list fresh on its own; they need not be every gateway.
func WithGateways(addrs ...string) Option {
	return func(o *options) { o.seeds = append(o.seeds, addrs...) }
}

// WithGatewayDNS names the gateways by a DNS name and port, host:port,
// such as a Kubernetes headless service: every address the name resolves
// to is a gateway to learn the cluster from. It is resolved again each
// time the client needs its seeds.
func WithGatewayDNS(hostport string) Option {
	return func(o *options) { o.dnsSeed = hostport }
}

// WithLogger sets the logger. Default: none.
func WithLogger(l *zap.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithTransportCredentials secures the connections to the gateways.
// Default: plaintext.
func WithTransportCredentials(c credentials.TransportCredentials) Option {
	return func(o *options) { o.creds, o.tlsFiles = c, nil }
}

// WithTLS secures the connections to the gateways with TLS under cfg.
func WithTLS(cfg *tls.Config) Option {
	return WithTransportCredentials(credentials.NewTLS(cfg))
}

// WithTLSFiles secures the connections to the gateways with TLS from PEM
// files, re-read when they change (package security/tlsfiles): ca is the
// bundle the gateways' certificates must chain to ("": the system's
// roots), and cert and key, when given, the client's certificate for a
// gateway that asks for one (mutual TLS, or a gateway that takes
// certificates as credentials). The gateway's certificate must be for
// the host name or IP address the client dials. It replaces
// WithTransportCredentials and WithTLS.
func WithTLSFiles(ca, cert, key string) Option {
	return func(o *options) {
		o.tlsFiles = &tlsfiles.Files{CA: ca, Cert: cert, Key: key}
		o.creds = nil
	}
}

// WithTLSServerName makes WithTLSFiles check the gateways' certificates
// against name instead of the address dialled: for gateways that
// advertise addresses their certificates cannot name, such as Kubernetes
// pods' IPs under one service name.
func WithTLSServerName(name string) Option {
	return func(o *options) { o.tlsServerName = name }
}

// WithToken sends token as a bearer token ("authorization: Bearer
// TOKEN" metadata) with every call and stream, for a gateway that
// authenticates clients by token (silo.GatewayConfig.Authenticator with
// auth.Bearer). A token is a secret: Dial refuses to send it over
// plaintext unless WithInsecureToken is given too.
func WithToken(token string) Option {
	return func(o *options) { o.token = token }
}

// WithInsecureToken lets WithToken's token travel over plaintext, for
// tests and for networks whose links are encrypted beneath gRPC. Anyone
// who can read the traffic can then call as the token's principal.
func WithInsecureToken() Option {
	return func(o *options) { o.insecureToken = true }
}

// WithCallTimeout bounds every call whose method, call options and
// context set no tighter bound. Default 30 s, as a silo's.
func WithCallTimeout(d time.Duration) Option {
	return func(o *options) { o.callTimeout = d }
}

// WithKeepalive sets how the client pings its gateways to find one that
// died without closing its connections. Default: a ping after 20 s of
// silence, failing after 10 s more. A gateway enforces how often it may
// be pinged (silo.GatewayConfig.KeepaliveEnforcement, 10 s by default).
func WithKeepalive(p keepalive.ClientParameters) Option {
	return func(o *options) { o.keepalive = p }
}

// WithGatewayRefresh sets how often the client asks for the live gateway
// list. It also asks as soon as a gateway fails or goes away. Default
// 30 s.
func WithGatewayRefresh(d time.Duration) Option {
	return func(o *options) { o.refresh = d }
}

// WithClock sets the clock behind the client's own timing: call
// deadlines and their timers, the gateway list's refresh, how long a
// failed gateway is avoided, the pause between attempts to move home, and
// the deadlines of observer calls and of the gateway transport. Tests
// pass a fake clock and advance it. gRPC's own timing (keepalive,
// connection backoff) stays on the real clock, and so does a caller's
// context: with a fake clock, bound calls by call options rather than by
// a context deadline. Default: the real clock.
func WithClock(c clockwork.Clock) Option {
	return func(o *options) {
		if c != nil {
			o.clock = c
		}
	}
}

// WithMaxMessageSize bounds the size of a request the client sends and
// a reply it accepts, in bytes. Default 4 MiB, as a gateway's.
func WithMaxMessageSize(n int) Option {
	return func(o *options) { o.maxMessage = n }
}

// WithDialOptions adds gRPC dial options to the gateway connections:
// interceptors, a custom dialer, and the like.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// WithOutgoingFilters adds filters that run around every call the client
// sends, with the contract of a silo's OutgoingFilters (see
// grain.OutgoingFilter): in the order given, the first outermost, on the
// caller's goroutine, when the call is sent. They may add headers with
// grain.WithHeader, refuse the call by returning grain.Failed, or wrap the
// Pending to see the reply; a synchronous Invoke awaits the Pending they
// return. Calls with no method or no grain fail before any filter runs.
func WithOutgoingFilters(fs ...grain.OutgoingFilter) Option {
	return func(o *options) { o.outgoing = append(o.outgoing, fs...) }
}

// ConfigError names the option that Dial refused.
type ConfigError struct {
	Option string
	Reason string
}

func (e *ConfigError) Error() string { return "client: " + e.Option + ": " + e.Reason }

func (o *options) validate() error {
	bad := func(opt, format string, args ...any) error {
		return &ConfigError{Option: opt, Reason: fmt.Sprintf(format, args...)}
	}
	if len(o.seeds) == 0 && o.dnsSeed == "" {
		return errors.New("client: Dial needs gateways to start from: pass WithGateways or WithGatewayDNS")
	}
	for i, a := range o.seeds {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return bad("WithGateways", "address %d, %q, is not host:port", i, a)
		}
	}
	if o.dnsSeed != "" {
		if host, port, err := net.SplitHostPort(o.dnsSeed); err != nil || host == "" || port == "" {
			return bad("WithGatewayDNS", "%q is not host:port", o.dnsSeed)
		}
	}
	for i, f := range o.outgoing {
		if f == nil {
			return bad("WithOutgoingFilters", "filter %d is nil", i)
		}
	}
	if o.tlsServerName != "" && o.tlsFiles == nil {
		return bad("WithTLSServerName", "applies to WithTLSFiles, which is not given")
	}
	if o.tlsFiles != nil && o.tlsFiles.Empty() {
		return bad("WithTLSFiles", "names no file: give at least the CA bundle, or cert and key")
	}
	if o.token != "" {
		if strings.ContainsAny(o.token, " \t\r\n") {
			return bad("WithToken", "the token holds white space")
		}
		if !o.insecureToken && o.tlsFiles == nil && (o.creds == nil || o.creds.Info().SecurityProtocol == "insecure") {
			return bad("WithToken", "a bearer token is sent only over TLS: add WithTLSFiles, WithTLS or WithTransportCredentials, or WithInsecureToken to send it in plaintext")
		}
	}
	switch {
	case o.callTimeout <= 0:
		return bad("WithCallTimeout", "%v must be positive", o.callTimeout)
	case o.refresh <= 0:
		return bad("WithGatewayRefresh", "%v must be positive", o.refresh)
	case o.maxMessage < 1024:
		return bad("WithMaxMessageSize", "%d must be at least 1024", o.maxMessage)
	case o.keepalive.Time < 0 || o.keepalive.Timeout < 0:
		return bad("WithKeepalive", "times must not be negative")
	}
	return nil
}

// dialCredentials returns the transport credentials and the per-RPC
// credentials the options ask for: the TLS files loaded, the token.
func (o *options) dialCredentials() ([]grpc.DialOption, error) {
	var out []grpc.DialOption
	creds := o.creds
	if o.tlsFiles != nil {
		src, err := tlsfiles.Load(*o.tlsFiles, tlsfiles.Options{Logger: o.log.Named("tls")})
		if err != nil {
			return nil, &ConfigError{Option: "WithTLSFiles", Reason: err.Error()}
		}
		creds = src.ClientCredentials(tlsfiles.ClientOptions{ServerName: o.tlsServerName})
	}
	if creds != nil {
		out = append(out, grpc.WithTransportCredentials(creds))
	}
	if o.token != "" {
		out = append(out, grpc.WithPerRPCCredentials(bearer{token: o.token, secure: !o.insecureToken}))
	}
	return out, nil
}

// bearer sends a bearer token with each call and stream.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity makes gRPC refuse to send the token on a
// connection without TLS, unless WithInsecureToken said otherwise.
func (b bearer) RequireTransportSecurity() bool { return b.secure }
