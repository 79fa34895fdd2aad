package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/granaryio/granary/silo/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// testTimeout bounds every wait in these tests: a test that needs it has
// failed.
const testTimeout = 15 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t testing.TB) context.Context { return testwait.Context(t, testTimeout) }

// httpClient sends the tests' requests. Without keep-alive, no idle
// connection outlives a test for goleak to find.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// probeType is the grain type every test silo hosts.
const probeType = "probe.Probe"

// probeGrain answers Call with the name of its silo, and fails a call
// tagged "fail" with FailedPrecondition.
type probeGrain struct {
	probe.UnimplementedProbeGrain
	silo string
	n    int64
}

func (g *probeGrain) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	if req.Tag == "fail" {
		return nil, status.Error(codes.FailedPrecondition, "probe refused: "+req.Text)
	}
	g.n++
	return &probe.Reply{Text: g.silo, N: g.n}, nil
}

func (g *probeGrain) Tell(grain.Context, *probe.Request) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

// registerProbe registers the probe grain on sl, naming silo in replies.
func registerProbe(t testing.TB, sl *silo.Silo, name string) {
	t.Helper()
	err := probe.RegisterProbeGrain(sl, func(grain.ID) probe.ProbeGrain { return &probeGrain{silo: name} })
	if err != nil {
		t.Fatal(err)
	}
}

// testLogger logs to the test's output when it runs verbosely.
func testLogger() *zap.Logger {
	if testing.Verbose() {
		l, _ := zap.NewDevelopment()
		return l
	}
	return zap.NewNop()
}

// listen starts an admin server on loopback, stopped when the test ends.
func listen(t testing.TB, cfg admin.Config) *admin.Server {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	srv, err := admin.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(testCtx(t)); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return srv
}

// newSilo makes a silo alone named name hosting the probe grain, whose
// admin address is adminAddr, with m's filter counting its calls when m
// is not nil. Stopped when the test ends.
func newSilo(t testing.TB, name, adminAddr string, m *metrics.Metrics) *silo.Silo {
	t.Helper()
	cfg := silo.DefaultConfig()
	cfg.Name = name
	cfg.AdminAddr = adminAddr
	cfg.Logger = testLogger()
	if m != nil {
		cfg.IncomingFilters = []grain.IncomingFilter{m.IncomingFilter()}
	}
	sl, err := silo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	registerProbe(t, sl, name)
	t.Cleanup(func() {
		if err := sl.Stop(testCtx(t)); err != nil {
			t.Errorf("Stop %s: %v", name, err)
		}
	})
	return sl
}

// newMetrics returns call metrics on a registry of their own, which it
// returns too.
func newMetrics(t testing.TB) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// answer is an HTTP answer, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request without a body to the admin server at addr.
func do(t testing.TB, method, addr, path string, query url.Values) answer {
	t.Helper()
	u := "http://" + addr + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	return doURL(t, method, u)
}

// doAuth is do with "Authorization: Bearer token".
func doAuth(t testing.TB, method, addr, path string, query url.Values, token string) answer {
	t.Helper()
	u := "http://" + addr + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	return doURLWith(t, method, u, http.Header{"Authorization": {"Bearer " + token}})
}

// doURL sends a request without a body to u.
func doURL(t testing.TB, method, u string) answer {
	t.Helper()
	return doURLWith(t, method, u, nil)
}

// doURLWith sends a request without a body and with header to u.
func doURLWith(t testing.TB, method, u string, header http.Header) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, u, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, u, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: body}
}

// decode decodes a's JSON body into out after checking its status.
func (a answer) decode(t testing.TB, wantStatus int, out any) {
	t.Helper()
	if a.status != wantStatus {
		t.Fatalf("status %d, want %d; body %s", a.status, wantStatus, a.body)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json; body %s", ct, a.body)
	}
	if err := json.Unmarshal(a.body, out); err != nil {
		t.Fatalf("decoding %s: %v", a.body, err)
	}
}

// wantError checks that a is an Error body with the status and code given
// and a message holding each of parts.
func (a answer) wantError(t testing.TB, wantStatus int, code codes.Code, parts ...string) {
	t.Helper()
	var e adminapi.Error
	a.decode(t, wantStatus, &e)
	if e.Code != code.String() {
		t.Errorf("code %q, want %q; message %q", e.Code, code, e.Message)
	}
	for _, p := range parts {
		if !strings.Contains(e.Message, p) {
			t.Errorf("message %q does not mention %q", e.Message, p)
		}
	}
}

// client returns an adminapi client of the server at addr.
func client(t testing.TB, addr string) *adminapi.Client {
	t.Helper()
	c, err := adminapi.NewClient(addr, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// adminToken is the admin token of the tests' token files.
const adminToken = "test-admin-token-0123456789abcdef"

// writeTokenFile writes a token file of lines into a new file and returns
// its path.
func writeTokenFile(t testing.TB, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin-tokens")
	rewriteTokenFile(t, path, lines...)
	return path
}

// rewriteTokenFile replaces the token file at path by lines.
func rewriteTokenFile(t testing.TB, path string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// loadTokens loads the token file at path with o.
func loadTokens(t testing.TB, path string, o auth.TokenFileOptions) *auth.TokenFile {
	t.Helper()
	f, err := auth.LoadTokenFile(path, o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// testTokens returns a token file holding adminToken for "ops".
func testTokens(t testing.TB) *auth.TokenFile {
	t.Helper()
	return loadTokens(t, writeTokenFile(t, adminToken+" ops"), auth.TokenFileOptions{})
}

// adminClient returns an adminapi client of the server at addr that
// sends adminToken.
func adminClient(t testing.TB, addr string) *adminapi.Client {
	t.Helper()
	c, err := adminapi.NewClientWith(addr, adminapi.ClientOptions{HTTPClient: httpClient, Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// call calls the probe grain key through caller and returns the silo
// that ran it.
func call(t testing.TB, caller grain.Caller, key string) string {
	t.Helper()
	reply, err := probe.NewProbeRef(caller, key).Call(testCtx(t), &probe.Request{})
	if err != nil {
		t.Fatalf("calling %s/%s: %v", probeType, key, err)
	}
	return reply.GetText()
}

// callCount calls the probe grain key through caller and returns the
// activation's count of calls.
func callCount(t testing.TB, caller grain.Caller, key string) int64 {
	t.Helper()
	reply, err := probe.NewProbeRef(caller, key).Call(testCtx(t), &probe.Request{})
	if err != nil {
		t.Fatalf("calling %s/%s: %v", probeType, key, err)
	}
	return reply.GetN()
}

// query makes url.Values of key-value pairs.
func query(kv ...string) url.Values {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Add(kv[i], kv[i+1])
	}
	return q
}
