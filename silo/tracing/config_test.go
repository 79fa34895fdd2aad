package tracing_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/granaryio/granary/silo/tracing"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// TestConfigValidation checks that New refuses a bad Config with an error
// naming the field, and accepts the good ones.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	def := tracing.DefaultConfig
	tests := []struct {
		name    string
		cfg     func() tracing.Config
		field   string // "": valid
		enabled bool
	}{
		{name: "zero", cfg: func() tracing.Config { return tracing.Config{} }},
		{name: "default", cfg: def},
		{name: "unknown exporter", cfg: func() tracing.Config { c := def(); c.Exporter = "jaeger"; return c }, field: "Exporter"},
		{name: "exporter in capitals", cfg: func() tracing.Config { c := def(); c.Exporter = "OTLP"; return c }, field: "Exporter"},
		{name: "negative ratio", cfg: func() tracing.Config { c := def(); c.SampleRatio = -0.1; return c }, field: "SampleRatio"},
		{name: "ratio above 1", cfg: func() tracing.Config { c := def(); c.SampleRatio = 1.5; return c }, field: "SampleRatio"},
		{name: "NaN ratio", cfg: func() tracing.Config { c := def(); c.SampleRatio = math.NaN(); return c }, field: "SampleRatio"},
		{name: "otlp endpoint without port", cfg: func() tracing.Config { c := def(); c.Exporter = "otlp"; c.Endpoint = "collector"; return c }, field: "Endpoint"},
		{name: "otlp endpoint without host", cfg: func() tracing.Config { c := def(); c.Exporter = "otlp"; c.Endpoint = ":4317"; return c }, field: "Endpoint"},
		{name: "otlp endpoint with a bad port", cfg: func() tracing.Config { c := def(); c.Exporter = "otlp"; c.Endpoint = "collector:99999"; return c }, field: "Endpoint"},
		{name: "otlp URL without host", cfg: func() tracing.Config { c := def(); c.Exporter = "otlp"; c.Endpoint = "http://"; return c }, field: "Endpoint"},
		{name: "otlp URL without port", cfg: func() tracing.Config { c := def(); c.Exporter = "otlp"; c.Endpoint = "https://collector"; return c }, field: "Endpoint"},
		{name: "bad endpoint unused without otlp", cfg: func() tracing.Config { c := def(); c.Endpoint = "collector"; return c }},
		{name: "otlp default endpoint", cfg: func() tracing.Config { c := def(); c.Exporter = "otlp"; c.Insecure = true; return c }, enabled: true},
		{name: "otlp URL", cfg: func() tracing.Config { c := def(); c.Exporter = "otlp"; c.Endpoint = "http://collector:4317"; return c }, enabled: true},
		{name: "stdout", cfg: func() tracing.Config { c := def(); c.Exporter = "stdout"; c.Output = &bytes.Buffer{}; return c }, enabled: true},
		{name: "ratio 0", cfg: func() tracing.Config {
			c := def()
			c.Exporter = "stdout"
			c.SampleRatio = 0
			c.Output = &bytes.Buffer{}
			return c
		}, enabled: true},
		{name: "provider", cfg: func() tracing.Config { c := def(); c.TracerProvider = newRecorder(t).tp; return c }, enabled: true},
		{name: "provider and bad exporter", cfg: func() tracing.Config { c := def(); c.TracerProvider = newRecorder(t).tp; c.Exporter = "x"; return c }, field: "Exporter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := tracing.New(testCtx(t), tt.cfg())
			if tt.field != "" {
				var ce *tracing.ConfigError
				if !errors.As(err, &ce) || ce.Field != tt.field {
					t.Fatalf("New returned %v, want a ConfigError naming %s", err, tt.field)
				}
				if !strings.HasPrefix(err.Error(), "tracing: config: "+tt.field+": ") {
					t.Errorf("the error %q does not start with the package and the field", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer func() {
				if err := tr.Shutdown(testCtx(t)); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			}()
			if tr.Enabled() != tt.enabled {
				t.Errorf("Enabled() = %v, want %v", tr.Enabled(), tt.enabled)
			}
		})
	}
}

// TestStdoutExporter checks that the stdout exporter writes a traced
// call's span, with the service's name and instance, by Shutdown.
func TestStdoutExporter(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	cfg := tracing.DefaultConfig()
	cfg.Exporter, cfg.Output, cfg.ServiceInstance = "stdout", &out, "silo-7"
	tr, err := tracing.New(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := send(testCtx(t), tr, testMethod, newGate(nil))
	if _, err := p.Await(canceled()); err == nil {
		t.Fatal("an Await whose context ended got an outcome from a closed gate")
	}
	p, _ = send(testCtx(t), tr, testMethod, closedGate())
	if _, err := p.Await(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Shutdown(testCtx(t)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := tr.Shutdown(testCtx(t)); err != nil {
		t.Errorf("a second Shutdown: %v", err)
	}
	got := out.String()
	for _, want := range []string{`"Name":"probe.Probe/Call"`, `"granary-silo"`, `"silo-7"`, `"rpc.system"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the stdout exporter wrote no %s:\n%s", want, got)
		}
	}
	if n := strings.Count(got, `"Name":"probe.Probe/Call"`); n != 1 {
		t.Errorf("%d spans written, want 1 (the call still waiting is not over)", n)
	}
}

// TestOTLPExporter checks that the otlp exporter sends a span to a
// collector over gRPC, with the service's resource, by Shutdown.
func TestOTLPExporter(t *testing.T) {
	t.Parallel()
	col := &collector{}
	srv := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(srv, col)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("collector: %v", err)
		}
	}()

	cfg := tracing.DefaultConfig()
	cfg.Exporter, cfg.Endpoint, cfg.Insecure = "otlp", lis.Addr().String(), true
	cfg.ServiceName, cfg.ServiceInstance = "orders", "silo-3"
	tr, err := tracing.New(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := send(testCtx(t), tr, testMethod, closedGate())
	if _, err := p.Await(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Shutdown(testCtx(t)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	spans, res := col.received()
	if len(spans) != 1 || spans[0] != "probe.Probe/Call" {
		t.Errorf("the collector received the spans %v, want [probe.Probe/Call]", spans)
	}
	if res["service.name"] != "orders" || res["service.instance.id"] != "silo-3" {
		t.Errorf("the spans' resource is %v, want service.name orders, service.instance.id silo-3", res)
	}
}

// collector is an OTLP trace collector that keeps the names of the spans
// it receives and their resource's string attributes.
type collector struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []string
	res   map[string]string
}

func (c *collector) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		if c.res == nil {
			c.res = map[string]string{}
		}
		for _, kv := range rs.GetResource().GetAttributes() {
			c.res[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, s.GetName())
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (c *collector) received() ([]string, map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.spans...), c.res
}

// syncBuffer is a bytes.Buffer that the exporter's goroutine may write
// while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func closedGate() *gate {
	g := newGate(nil)
	close(g.open)
	return g
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
