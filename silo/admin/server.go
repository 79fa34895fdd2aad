package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/granaryio/granary/silo/metrics"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
)

// Defaults of Config's fields.
const (
	DefaultListen         = ":8080"
	DefaultSampleInterval = 5 * time.Second
	DefaultPeerTimeout    = 2 * time.Second
)

// EventInterval is how often the event stream sends the cluster report.
const EventInterval = 2 * time.Second

// Limits of the reports' lists.
const (
	// HotLimit is how many hot grains a silo's report lists.
	HotLimit = 10
	// ErrorLimit is how many recent errors a silo's report lists.
	ErrorLimit = 20
	// ClusterHotLimit and ClusterErrorLimit bound the merged lists of the
	// cluster report.
	ClusterHotLimit   = 20
	ClusterErrorLimit = 50
)

// idleTimeout closes a kept-alive connection that sends no request for
// this long.
const idleTimeout = time.Minute

// maxConnections caps the admin server's connections: operators,
// probes, scrapers and peer silos need far fewer.
const maxConnections = 1024

// readHeaderTimeout bounds how long a client may take to send a request's
// headers, so that idle or slow connections cannot pile up.
const readHeaderTimeout = 10 * time.Second

// Config configures a Server. Zero fields take the defaults given.
type Config struct {
	// Listen is the host:port the server binds. Port 0 picks a free port,
	// which Server.Addr reports. Default ":8080".
	Listen string

	// Gatherer, when set, is served as Prometheus text at /metrics.
	// Nil: /metrics answers 404.
	Gatherer prometheus.Gatherer

	// Drain is called when a drain request names this silo: it should
	// start the silo's graceful leave (signal the host's main loop) and
	// return at once, not wait for the leave. It is called at most once,
	// on the request's goroutine, before the 202 answer. Nil: drain
	// requests for this silo answer 501.
	Drain func()

	// SampleInterval is how often the hot grains and the call and error
	// rates are sampled; the rates reported are those of the last
	// interval. Default 5 s.
	SampleInterval time.Duration

	// PeerTimeout bounds each request to another silo's admin server:
	// gathering the cluster report and forwarding deactivate and drain
	// requests. Default 2 s.
	PeerTimeout time.Duration

	// TLS, when set, makes the server serve HTTPS only, with ALPN h2 and
	// http/1.1 (added when NextProtos is empty). It must give a
	// certificate (Certificates, GetCertificate or GetConfigForClient).
	// Nil: plain HTTP, which sends admin tokens in the clear.
	TLS *tls.Config

	// PeerTLS, when set, is the client configuration for requests to
	// other silos' admin servers (gathering the cluster report,
	// forwarding deactivate and drain): they are made over https, and it
	// presents this silo's certificate when a peer asks for one. Nil:
	// plain HTTP. Every silo of a cluster must agree: a silo serving TLS
	// refuses a peer speaking plain HTTP.
	PeerTLS *tls.Config

	// Tokens, when set, holds the admin tokens: a request bearing one
	// ("Authorization: Bearer TOKEN") is an admin's. With Tokens set, the
	// JSON API, the event stream and deactivate, drain and unpark all
	// need an admin's credentials; the probes, /metrics and the
	// dashboard's static files stay open. Every silo of a cluster should share one
	// token file: a forwarded request carries the caller's token.
	Tokens *auth.TokenFile

	// CertAdmins, when true, makes a client certificate that TLS verified
	// an admin's credentials, whose principal is the certificate's
	// subject common name. It needs TLS to ask for client certificates
	// and verify them (tlsfiles' configurations with a CA file do, in
	// VerifyConnection): Listen refuses a TLS that would pass an
	// unverified certificate. Every certificate of the CA counts, silos'
	// included, which is what lets a silo forward a request it took on a
	// certificate's strength.
	CertAdmins bool

	// Rejections counts and logs the requests refused for want of
	// credentials, and the failed TLS handshakes, as listener "admin".
	// Nil: not counted (the refusals are still answered).
	Rejections *security.Rejections

	// Logger receives the server's logs. Default: a no-op logger.
	Logger *zap.Logger
	// Clock drives the sampler, the event stream and uptimes. Tests pass
	// a fake clock. Default: the real clock.
	Clock clockwork.Clock
}

// ConfigError names the field of a Config that is out of range.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "admin: config: " + e.Field + ": " + e.Reason }

// withDefaults returns c with its zero fields set to their defaults, or
// an error naming a field out of range.
func (c Config) withDefaults() (Config, error) {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return c, bad("Listen", "%q is not host:port", c.Listen)
	}
	switch {
	case c.SampleInterval < 0:
		return c, bad("SampleInterval", "%v must not be negative", c.SampleInterval)
	case c.SampleInterval == 0:
		c.SampleInterval = DefaultSampleInterval
	}
	switch {
	case c.PeerTimeout < 0:
		return c, bad("PeerTimeout", "%v must not be negative", c.PeerTimeout)
	case c.PeerTimeout == 0:
		c.PeerTimeout = DefaultPeerTimeout
	}
	if c.CertAdmins {
		switch {
		case c.TLS == nil:
			return c, bad("CertAdmins", "client certificates need TLS; set TLS (admin.tls.mode tls or mtls, with admin.tls.ca_file)")
		case !verifiesClientCerts(c.TLS):
			return c, bad("CertAdmins", "TLS does not verify client certificates (ClientAuth %v and no VerifyConnection); set admin.tls.ca_file", c.TLS.ClientAuth)
		}
	}
	if c.TLS != nil && len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil && c.TLS.GetConfigForClient == nil {
		return c, bad("TLS", "no certificate: set Certificates or GetCertificate (admin.tls.cert_file and admin.tls.key_file)")
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c, nil
}

// Server is a silo's admin HTTP server. Its methods may be called from
// any goroutine.
type Server struct {
	cfg   Config
	log   *zap.Logger
	clock clockwork.Clock
	lis   net.Listener
	srv   *http.Server
	// peers asks other silos' admin servers; its transport's idle
	// connections are closed by Stop.
	peers     *http.Client
	transport *http.Transport
	// metricsHandler serves Config.Gatherer; nil without one.
	metricsHandler http.Handler
	// certsVerifiedByCallback: Config.TLS verifies client certificates in
	// a callback, so a certificate present on a request was verified
	// though VerifiedChains is empty (certPrincipal).
	certsVerifiedByCallback bool

	// att is set once, by Attach.
	att atomic.Pointer[attachment]

	mu      sync.Mutex // guards stopped, closed and handlers.Add
	stopped bool
	// closed is set once the HTTP server is shut: a request a closing
	// connection still delivers is refused, so no handler starts after
	// Stop began to wait for them.
	closed bool

	drainOnce sync.Once
	// stopc is closed when Stop begins; event streams end on it.
	stopc    chan struct{}
	stopOnce sync.Once
	stopErr  error
	// handlers counts running request handlers; serveDone is closed when
	// the accept loop has returned.
	handlers  sync.WaitGroup
	serveDone chan struct{}
}

// attachment is the silo a Server reports on.
type attachment struct {
	sl      *silo.Silo
	m       *metrics.Metrics // may be nil
	sampler *sampler         // nil when attached after Stop
}

// Listen validates cfg, binds cfg.Listen and serves at once. Until
// Attach, /healthz answers 200 and the rest 503.
func Listen(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("admin: config: Listen: %w", err)
	}
	// Bytes that are neither TLS nor HTTP are counted, and connections
	// capped: net/http answers garbage with a 400 and says nothing.
	lis = security.Listen(lis, security.ListenerOptions{
		Name: security.ListenerAdmin, Rejections: cfg.Rejections,
		MaxConnections: maxConnections, Expect: security.LooksLikeHTTP,
	})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // silos speak to each other directly
	if cfg.PeerTLS != nil {
		tr.TLSClientConfig = cfg.PeerTLS.Clone()
		// A TLSClientConfig of our own turns HTTP/2 off unless asked.
		tr.ForceAttemptHTTP2 = true
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		clock:     cfg.Clock,
		lis:       lis,
		transport: tr,
		peers:     &http.Client{Transport: tr},
		stopc:     make(chan struct{}),
		serveDone: make(chan struct{}),

		certsVerifiedByCallback: verifiesByCallback(cfg.TLS),
	}
	if cfg.Gatherer != nil {
		s.metricsHandler = promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
			ErrorLog:      zap.NewStdLog(s.log.Named("metrics")),
			ErrorHandling: promhttp.ContinueOnError,
		})
	}
	s.srv = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: readHeaderTimeout,
		// A kept-alive connection idle between requests is closed, so
		// idle ones cannot hold the connection cap against probes.
		IdleTimeout: idleTimeout,
		ErrorLog:    newHTTPErrorLog(s.log.Named("http"), cfg.Rejections),
	}
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		if len(tc.NextProtos) == 0 {
			tc.NextProtos = []string{"h2", "http/1.1"}
		}
		s.srv.TLSConfig = tc
	}
	go func() {
		defer close(s.serveDone)
		var err error
		if cfg.TLS != nil {
			// ServeTLS sets HTTP/2 up; the certificate is TLSConfig's.
			err = s.srv.ServeTLS(lis, "", "")
		} else {
			err = s.srv.Serve(lis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin server stopped serving", zap.Error(err))
		}
	}()
	s.log.Info("admin server listening", zap.String("addr", s.Addr()), zap.Bool("tls", cfg.TLS != nil),
		zap.Bool("admin_tokens", cfg.Tokens != nil), zap.Bool("cert_admins", cfg.CertAdmins))
	return s, nil
}

// Attach makes the server report on sl, with the call counts of m (which
// may be nil: no call or error counts), and starts the sampler. Call it
// once, after silo.New; before or after sl.Start. Attaching a nil silo or
// attaching twice is a programming error and panics.
func (s *Server) Attach(sl *silo.Silo, m *metrics.Metrics) {
	if sl == nil {
		panic("admin: Attach: nil silo")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.att.Load() != nil {
		panic("admin: Attach called twice")
	}
	a := &attachment{sl: sl, m: m}
	if !s.stopped {
		a.sampler = newSampler(sl, m, s.clock, s.cfg.SampleInterval)
	}
	s.att.Store(a)
}

// Addr returns the address the server listens on, with the port it
// picked when Config.Listen gave port 0.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Stop ends the event streams, shuts the HTTP server down gracefully
// (waiting for the requests under way, up to ctx's end, then closing the
// connections left), stops the sampler and waits for every goroutine the
// server started. It returns ctx's error when the graceful shutdown did
// not finish in time. Later calls return the first call's result.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		close(s.stopc)
		if err := s.srv.Shutdown(ctx); err != nil {
			s.stopErr = fmt.Errorf("admin: stop: %w", err)
			s.srv.Close()
		}
		<-s.serveDone
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.handlers.Wait()
		if a := s.att.Load(); a != nil && a.sampler != nil {
			a.sampler.stop()
		}
		s.transport.CloseIdleConnections()
		s.log.Info("admin server stopped")
	})
	return s.stopErr
}

// attached returns the attachment, or answers 503 and returns nil.
func (s *Server) attached(w http.ResponseWriter) *attachment {
	a := s.att.Load()
	if a == nil {
		writeError(w, http.StatusServiceUnavailable, codes.Unavailable, "not attached: the silo is not made yet")
	}
	return a
}

// routes returns the server's handler.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	// Each path's access (auth.go): probes, metrics and the dashboard's
	// static files open; what tells of the cluster read; what changes it
	// write.
	handle := func(path string, level access, h http.HandlerFunc) { mux.HandleFunc(path, s.guard(level, h)) }
	handle(adminapi.PathHealthz, accessOpen, s.handleHealthz)
	handle(adminapi.PathReadyz, accessOpen, s.handleReadyz)
	handle(adminapi.PathMetrics, accessOpen, s.handleMetrics)
	handle(adminapi.PathSilo, accessRead, s.handleSilo)
	handle(adminapi.PathCluster, accessRead, s.handleCluster)
	handle(adminapi.PathEvents, accessRead, s.handleEvents)
	handle(adminapi.PathLookup, accessRead, s.handleLookup)
	handle(adminapi.PathDeactivate, accessWrite, s.handleDeactivate)
	handle(adminapi.PathDrain, accessWrite, s.handleDrain)
	handle(adminapi.PathStreams, accessRead, s.handleStreams)
	handle(adminapi.PathSiloStreams, accessRead, s.handleSiloStreams)
	handle(adminapi.PathUnpark, accessWrite, s.handleUnpark)
	handle("/api/", accessRead, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, codes.NotFound, "no API path %q", r.URL.Path)
	})
	handle(adminapi.PathDashboard, accessOpen, s.handleDashboard)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			writeError(w, http.StatusServiceUnavailable, codes.Unavailable, "the admin server is stopping")
			return
		}
		s.handlers.Add(1)
		s.mu.Unlock()
		defer s.handlers.Done()
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	writeText(w, http.StatusOK, "ok")
}

func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	if a := s.attached(w); a == nil || !ready(w, a) {
		return
	}
	writeText(w, http.StatusOK, "ok")
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	if s.metricsHandler == nil {
		writeError(w, http.StatusNotFound, codes.NotFound, "this silo serves no metrics: no gatherer configured")
		return
	}
	s.metricsHandler.ServeHTTP(w, r)
}

func (s *Server) handleSilo(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	a := s.attached(w)
	if a == nil {
		return
	}
	writeJSON(w, http.StatusOK, s.siloReport(a))
}

func (s *Server) handleCluster(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	a := s.attached(w)
	if a == nil {
		return
	}
	writeJSON(w, http.StatusOK, s.clusterReport(r.Context(), a, callerOf(r).token))
}

// peerClient returns a client of the admin server at addr that sends
// token ("" for none) and speaks https when Config.PeerTLS is set.
func (s *Server) peerClient(addr, token string) (*adminapi.Client, error) {
	return adminapi.NewClientWith(addr, adminapi.ClientOptions{HTTPClient: s.peers, TLS: s.cfg.PeerTLS, Token: token})
}

// peerContext bounds one request to another silo.
func (s *Server) peerContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.PeerTimeout)
}
