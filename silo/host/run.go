package host

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin"
	"github.com/granaryio/granary/silo/metrics"
	"github.com/granaryio/granary/silo/tracing"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
)

// finalGrace is the least time the steps after the silo's stop (flushing
// traces, stopping the admin server) get when the shutdown budget is
// spent, and their bound when Run fails before the silo starts.
const finalGrace = 2 * time.Second

// Main runs a silo host for a program's main function: it loads the
// configuration from the command line and the environment (see Load),
// registers the program's grain types with register, and runs the silo
// until SIGTERM or SIGINT, then stops it gracefully. A second signal
// during the stop exits at once. It exits with status 0 after a clean
// stop (or --help), 2 when the configuration is wrong, and 1 when the
// silo fails or its stop runs out of shutdown.timeout; the error goes to
// standard error.
func Main(register func(*silo.Silo) error) {
	cfg, err := Load(os.Args[1:], os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal ends ctx. From then on a second one exits at once,
	// without waiting for the graceful stop.
	again := make(chan os.Signal, 1)
	context.AfterFunc(ctx, func() {
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		go func() {
			sig := <-again
			fmt.Fprintf(os.Stderr, "granary: a second signal (%v) during the graceful stop: exiting at once\n", sig)
			os.Exit(1)
		}()
	})
	if err := Run(ctx, cfg, register); err != nil {
		fmt.Fprintln(os.Stderr, "granary:", err)
		os.Exit(1)
	}
}

// Option changes how Run runs the silo: for tests, and for programs that
// embed a host in a larger process.
type Option func(*runOptions)

type runOptions struct {
	logger   *zap.Logger
	registry *prometheus.Registry
	started  func(*silo.Silo)
}

// WithLogger makes Run log to l instead of a logger built from
// Config.Log.
func WithLogger(l *zap.Logger) Option { return func(o *runOptions) { o.logger = l } }

// WithRegistry makes Run register the silo's metrics with reg, which the
// admin server serves at /metrics, instead of a fresh registry with the
// Go and process collectors. The caller chooses reg's other collectors.
func WithRegistry(reg *prometheus.Registry) Option {
	return func(o *runOptions) { o.registry = reg }
}

// WithStarted makes Run call f with the silo once it has started (joined
// its cluster, serving calls), before Run waits for the end. Run waits
// for f, so f must not block for long.
func WithStarted(f func(*silo.Silo)) Option { return func(o *runOptions) { o.started = f } }

// Run runs the silo cfg describes until ctx ends or a drain request names
// it, then stops it gracefully within cfg.Shutdown.Timeout. In order, it:
//
//   - validates cfg and builds the logger;
//   - opens the admin server (unless admin.listen is empty), which answers
//     /healthz at once and /readyz with 503 until the silo is ready, so a
//     long join does not look like a dead process;
//   - builds the metrics (their incoming filter outermost) and, when
//     tracing.exporter is not none, the tracing filters;
//   - opens storage, makes the silo, calls register to register grain
//     types, and starts the silo, which joins its cluster;
//   - waits, then stops the silo gracefully, flushes traces, stops the
//     admin server and closes storage.
//
// Run returns nil after a clean stop, including one asked for while the
// silo was still joining. If the graceful stop runs out of
// shutdown.timeout, the silo is closed at once and Run returns an error
// saying so. Run returns once everything it started has stopped.
func Run(ctx context.Context, cfg Config, register func(*silo.Silo) error, opts ...Option) (err error) {
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	if register == nil {
		return errors.New("host: Run: nil register function")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := o.logger
	if log == nil {
		if log, err = cfg.NewLogger(); err != nil {
			return err
		}
		defer func() { _ = log.Sync() }() // syncing stderr may fail; nothing to do about it
	}
	cfg.logLoaded(log)
	cfg.warnInsecure(log)

	h := &running{cfg: &cfg, log: log}
	defer func() { err = h.cleanup(ctx, err) }()

	reg := o.registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	// One count of refusals for the process: the silo's listeners and
	// the admin server's.
	rej := security.NewRejections(log)
	if err := reg.Register(rej); err != nil {
		return fmt.Errorf("host: metrics: %w", err)
	}
	drained := make(chan struct{})
	drain := sync.OnceFunc(func() { close(drained) })
	if cfg.Admin.Listen != "" {
		acfg, err := cfg.adminConfig(log.Named("admin"))
		if err != nil {
			return err
		}
		acfg.Gatherer, acfg.Drain, acfg.Rejections = reg, drain, rej
		h.admin, err = admin.Listen(acfg)
		if err != nil {
			return fmt.Errorf("host: admin server (admin.listen %q): %w", cfg.Admin.Listen, err)
		}
	}
	m, err := metrics.New(metrics.Config{Registerer: reg})
	if err != nil {
		return fmt.Errorf("host: metrics: %w", err)
	}
	h.tracing, err = tracing.New(ctx, tracing.Config{
		Exporter:        cfg.Tracing.Exporter,
		Endpoint:        cfg.Tracing.Endpoint,
		Insecure:        cfg.Tracing.Insecure,
		SampleRatio:     cfg.Tracing.SampleRatio,
		ServiceName:     tracing.DefaultServiceName,
		ServiceInstance: cfg.Name,
	})
	if err != nil {
		return fmt.Errorf("host: tracing: %w", err)
	}

	scfg, closeStorage, err := cfg.Silo(ctx, log)
	h.closeStorage = closeStorage
	if err != nil {
		return err
	}
	scfg.Rejections = rej
	if h.admin != nil {
		scfg.AdminAddr = cfg.advertisedAdmin(h.admin.Addr(), scfg.Cluster)
		log.Info("admin address", zap.String("listen", h.admin.Addr()), zap.String("advertise", scfg.AdminAddr))
	}
	scfg.IncomingFilters = append(scfg.IncomingFilters, m.IncomingFilter())
	if h.tracing.Enabled() {
		scfg.IncomingFilters = append(scfg.IncomingFilters, h.tracing.IncomingFilter())
		scfg.OutgoingFilters = append(scfg.OutgoingFilters, h.tracing.OutgoingFilter())
	}
	if h.silo, err = silo.New(scfg); err != nil {
		return err
	}
	if err := register(h.silo); err != nil {
		return fmt.Errorf("host: registering grain types: %w", err)
	}
	if err := m.Attach(h.silo); err != nil {
		return fmt.Errorf("host: metrics: %w", err)
	}
	if h.admin != nil {
		h.admin.Attach(h.silo, m)
	}

	if err := h.silo.Start(ctx); err != nil {
		if ctx.Err() != nil {
			log.Info("stopping before the silo started", zap.NamedError("reason", context.Cause(ctx)))
			return nil
		}
		return fmt.Errorf("host: starting the silo: %w", err)
	}
	info := h.silo.Info()
	log.Info("silo ready", zap.String("name", info.Name), zap.String("member", info.Member),
		zap.String("gateway", info.GatewayAddr), zap.String("gossip", info.GossipAddr),
		zap.String("grpc", info.GRPCAddr), zap.String("admin", info.AdminAddr))
	if o.started != nil {
		o.started(h.silo)
	}

	var reason string
	select {
	case <-ctx.Done():
		reason = "signal or context ended"
		if cause := context.Cause(ctx); cause != nil && cause != context.Canceled {
			reason = cause.Error()
		}
	case <-drained:
		reason = "drain requested"
	}
	return h.stop(ctx, reason)
}

// running is what Run started, for it to stop.
type running struct {
	cfg          *Config
	log          *zap.Logger
	admin        *admin.Server
	tracing      *tracing.Tracing
	closeStorage func()
	silo         *silo.Silo
	stopped      bool // the silo has stopped or been closed
	// afterDeadline bounds the steps after the silo's stop.
	afterDeadline time.Time
}

// stop stops the silo gracefully within the shutdown budget, or closes it
// when the budget runs out.
func (h *running) stop(ctx context.Context, reason string) error {
	budget := h.cfg.Shutdown.Timeout
	h.log.Info("stopping gracefully", zap.String("reason", reason), zap.Duration("budget", budget))
	start := time.Now()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
	defer cancel()
	deadline, _ := stopCtx.Deadline()
	h.afterDeadline = deadline
	err := h.silo.Stop(stopCtx)
	h.stopped = true
	switch {
	case err == nil:
		h.log.Info("silo stopped gracefully", zap.Duration("took", time.Since(start)))
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		h.log.Error("the graceful stop ran out of its budget: closing the silo at once", zap.Duration("budget", budget))
		_ = h.silo.Close()
		return fmt.Errorf("host: the graceful stop ran out of its %v budget (shutdown.timeout); the silo was closed at once: %w", budget, err)
	default:
		_ = h.silo.Close()
		return fmt.Errorf("host: graceful stop: %w", err)
	}
}

// cleanup closes what is still open, in order: the silo (closed at once
// unless stop stopped it), tracing (flushing its spans), the admin
// server, storage. It returns err joined with their errors, and logs the
// end.
func (h *running) cleanup(ctx context.Context, err error) error {
	if h.silo != nil && !h.stopped {
		_ = h.silo.Close()
	}
	deadline := h.afterDeadline
	if least := time.Now().Add(finalGrace); deadline.Before(least) {
		deadline = least
	}
	after, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	if h.tracing != nil {
		if terr := h.tracing.Shutdown(after); terr != nil {
			err = errors.Join(err, fmt.Errorf("host: flushing traces: %w", terr))
		}
	}
	if h.admin != nil {
		if aerr := h.admin.Stop(after); aerr != nil {
			err = errors.Join(err, aerr)
		}
	}
	if h.closeStorage != nil {
		h.closeStorage()
	}
	if err != nil {
		h.log.Error("stopped", zap.Error(err))
	} else {
		h.log.Info("stopped")
	}
	return err
}
