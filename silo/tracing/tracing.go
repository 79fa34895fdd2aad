package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The exporters Config.Exporter names.
const (
	// ExporterNone records nothing: without a TracerProvider the host
	// installs no filters at all.
	ExporterNone = "none"
	// ExporterOTLP sends spans to an OpenTelemetry collector with OTLP
	// over gRPC.
	ExporterOTLP = "otlp"
	// ExporterStdout writes spans as JSON, one per line, to
	// Config.Output: for a look during development.
	ExporterStdout = "stdout"
)

// Defaults of the Config fields that have one.
const (
	DefaultEndpoint    = "localhost:4317"
	DefaultServiceName = "granary-silo"
)

// instrumentationName names the tracer the filters start spans with.
const instrumentationName = "github.com/granaryio/granary/silo/tracing"

// Config configures tracing. Start from DefaultConfig; New fills in the
// defaults of empty strings and refuses a field out of range, naming it.
type Config struct {
	// Exporter says where spans go: ExporterNone ("none", the default;
	// "" means the same), ExporterOTLP ("otlp") or ExporterStdout
	// ("stdout").
	Exporter string
	// Endpoint is the OTLP collector's gRPC address: host:port, or a URL
	// http://host:port (no TLS) or https://host:port. Used by "otlp"
	// only. Default "localhost:4317".
	Endpoint string
	// Insecure sends OTLP in plaintext instead of over TLS with the
	// system's roots; a collector in the same pod or compose network
	// usually listens so. An http:// Endpoint is plaintext anyway.
	Insecure bool
	// SampleRatio is the fraction of new traces that are recorded, from
	// 0 to 1. Sampling follows the parent: a call whose caller's trace is
	// recorded is recorded, one whose caller's is not is not, whatever
	// the ratio; the ratio decides for spans that start a trace.
	// DefaultConfig sets 1; 0 starts no trace and only continues those
	// callers recorded.
	SampleRatio float64
	// ServiceName is the service.name of the spans' resource. Default
	// "granary-silo".
	ServiceName string
	// ServiceInstance is the service.instance.id of the spans' resource,
	// such as the silo's name; empty leaves it out.
	ServiceInstance string
	// Output is where "stdout" writes. Default os.Stdout.
	Output io.Writer
	// TracerProvider, when set, makes the spans instead of a provider
	// built from the fields above: applications that set up OpenTelemetry
	// themselves, and tests, pass theirs. Its own sampler, resource and
	// exporters apply; Exporter is still checked but not used, and
	// Shutdown leaves the provider to its owner.
	TracerProvider trace.TracerProvider
}

// DefaultConfig returns a Config that records nothing ("none") and,
// once an exporter is chosen, samples every trace.
func DefaultConfig() Config {
	return Config{
		Exporter:    ExporterNone,
		Endpoint:    DefaultEndpoint,
		SampleRatio: 1,
		ServiceName: DefaultServiceName,
	}
}

// ConfigError names the field of a Config that New refused, and why.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "tracing: config: " + e.Field + ": " + e.Reason }

// withDefaults fills in the defaults of the empty strings.
func (c Config) withDefaults() Config {
	if c.Exporter == "" {
		c.Exporter = ExporterNone
	}
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
	if c.Output == nil {
		c.Output = os.Stdout
	}
	return c
}

// validate checks a Config whose defaults are filled in.
func (c *Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch c.Exporter {
	case ExporterNone, ExporterOTLP, ExporterStdout:
	default:
		return bad("Exporter", "%q is not one of %q, %q, %q", c.Exporter, ExporterNone, ExporterOTLP, ExporterStdout)
	}
	if math.IsNaN(c.SampleRatio) || c.SampleRatio < 0 || c.SampleRatio > 1 {
		return bad("SampleRatio", "%v is not between 0 and 1", c.SampleRatio)
	}
	if c.Exporter == ExporterOTLP {
		if _, _, err := endpointOption(c.Endpoint); err != nil {
			return bad("Endpoint", "%v", err)
		}
	}
	return nil
}

// endpointOption turns Endpoint into the exporter's option, and says
// whether it is a URL.
func endpointOption(ep string) (otlptracegrpc.Option, bool, error) {
	if u, err := url.Parse(ep); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		if u.Host == "" {
			return nil, false, fmt.Errorf("%q names no host", ep)
		}
		if err := checkHostPort(u.Host); err != nil {
			return nil, false, fmt.Errorf("%q: %v", ep, err)
		}
		return otlptracegrpc.WithEndpointURL(ep), true, nil
	}
	if err := checkHostPort(ep); err != nil {
		return nil, false, fmt.Errorf("%q is neither host:port nor an http:// or https:// URL: %v", ep, err)
	}
	return otlptracegrpc.WithEndpoint(ep), false, nil
}

func checkHostPort(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	switch {
	case err != nil:
		return err
	case host == "":
		return errors.New("the host is empty")
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// Tracing makes spans for grain calls: its filters start a server span
// around each request a grain receives and a client span around each
// call sent, and carry the trace from one to the next in W3C Trace
// Context call headers. Its methods may be called from any goroutine.
type Tracing struct {
	enabled bool
	tp      trace.TracerProvider
	tracer  trace.Tracer
	// sdk is the provider New built, which Shutdown flushes and stops;
	// nil when the Config brought its own or records nothing.
	sdk  *sdktrace.TracerProvider
	prop propagation.TextMapPropagator
	// fields are the header keys prop writes, which a call's headers
	// lose before it writes them anew.
	fields []string
}

// New checks cfg and sets up tracing: with a TracerProvider, on it;
// with an exporter, on an SDK provider that batches spans to it, samples
// by SampleRatio after the parent, and describes the silo with
// ServiceName and ServiceInstance. With neither, the Tracing records
// nothing and Enabled reports false. Nothing is connected yet when New
// returns: an unreachable collector costs dropped spans, not an error.
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	t := &Tracing{prop: prop, fields: prop.Fields()}
	switch {
	case cfg.TracerProvider != nil:
		t.tp, t.enabled = cfg.TracerProvider, true
	case cfg.Exporter == ExporterNone:
		t.tp = noop.NewTracerProvider()
	default:
		sdk, err := newProvider(ctx, &cfg)
		if err != nil {
			return nil, err
		}
		t.tp, t.sdk, t.enabled = sdk, sdk, true
	}
	t.tracer = t.tp.Tracer(instrumentationName)
	return t, nil
}

// newProvider builds the SDK provider of cfg's exporter.
func newProvider(ctx context.Context, cfg *Config) (*sdktrace.TracerProvider, error) {
	var exp sdktrace.SpanExporter
	switch cfg.Exporter {
	case ExporterOTLP:
		ep, isURL, err := endpointOption(cfg.Endpoint)
		if err != nil {
			return nil, &ConfigError{Field: "Endpoint", Reason: err.Error()}
		}
		opts := []otlptracegrpc.Option{ep}
		if cfg.Insecure && !isURL {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		if exp, err = otlptracegrpc.New(ctx, opts...); err != nil {
			return nil, fmt.Errorf("tracing: the OTLP exporter to %s: %w", cfg.Endpoint, err)
		}
	case ExporterStdout:
		var err error
		if exp, err = stdouttrace.New(stdouttrace.WithWriter(cfg.Output)); err != nil {
			return nil, fmt.Errorf("tracing: the stdout exporter: %w", err)
		}
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}
	if cfg.ServiceInstance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", cfg.ServiceInstance))
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithFromEnv(), resource.WithAttributes(attrs...))
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: describing the service: %w", err)
	}
	// A partly bad OTEL_RESOURCE_ATTRIBUTES still leaves a resource with
	// our attributes, which is better than no tracing.
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	), nil
}

// Enabled reports whether spans are recorded anywhere: false for the
// exporter "none" without a TracerProvider, when a host leaves the
// filters out altogether.
func (t *Tracing) Enabled() bool { return t.enabled }

// TracerProvider is the provider the filters start spans with, for grain
// and host code that makes spans of its own: a span it starts from a
// grain's Context is a child of the request's server span.
func (t *Tracing) TracerProvider() trace.TracerProvider { return t.tp }

// Shutdown flushes the spans not yet exported and stops the exporter,
// bounded by ctx. It does nothing to a TracerProvider from the Config,
// which its owner shuts down. Spans started afterwards are dropped.
// Idempotent.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	if err := t.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}
