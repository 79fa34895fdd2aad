package adminapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// defaultTestTimeout bounds every wait in these tests: a test that needs
// it has failed.
const defaultTestTimeout = 10 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testContext returns a context that ends with the test or after
// defaultTestTimeout.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newServer starts an httptest server with handler and a Client for it;
// both are closed when the test ends.
func newServer(t *testing.T, handler http.Handler) (*httptest.Server, *Client) {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, srv.Client())
	if err != nil {
		t.Fatalf("NewClient(%q): %v", srv.URL, err)
	}
	return srv, c
}

// writeJSON answers with status and v encoded as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

var (
	started = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	siloA = SiloReport{
		Name: "a", Member: "a-1", Status: "active", Started: started, UptimeSeconds: 61.5,
		Addresses:   Addresses{Gossip: "10.0.0.1:7946", GRPC: "10.0.0.1:7947", Gateway: "10.0.0.1:30000", Admin: "10.0.0.1:8080"},
		Activations: 3, QueuedTurns: 1, Processors: 4,
		Types:  []TypeReport{{Type: "bank.Account", Activations: 3, Calls: 10, Errors: 1, CallRate: 2.5, ErrorRate: 0.5}},
		Hot:    []HotGrain{{Grain: "bank.Account/alice", Silo: "a-1", CallRate: 2}},
		Errors: []CallError{{Time: started, Grain: "bank.Account/bob", Method: "/bank.Account/Withdraw", Code: "FailedPrecondition", Message: "overdrawn", Silo: "a-1"}},
	}
	clusterReport = ClusterReport{
		Asked:       "a-1",
		Silos:       []SiloReport{siloA},
		Unreachable: []Unreachable{{Member: "b-1", Admin: "10.0.0.2:8080", Error: "connection refused"}},
		Types:       siloA.Types,
		Hot:         siloA.Hot,
		Errors:      siloA.Errors,
	}
)

// apiMux serves canned answers at the API's paths, each only for its
// method and with the query parameter its test expects; anything else
// gets a 400 Error saying what was wrong, so a request the client builds
// wrongly fails the test.
func apiMux(t *testing.T, prefix string) http.Handler {
	mux := http.NewServeMux()
	route := func(method, path, param, want string, answer any) {
		mux.HandleFunc(prefix+path, func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method != method:
				writeJSON(w, http.StatusMethodNotAllowed, Error{Code: "InvalidArgument", Message: "method " + r.Method})
			case param != "" && r.URL.Query().Get(param) != want:
				writeJSON(w, http.StatusBadRequest, Error{Code: "InvalidArgument", Message: param + "=" + r.URL.Query().Get(param)})
			case r.Header.Get("Accept") != "application/json":
				writeJSON(w, http.StatusBadRequest, Error{Code: "InvalidArgument", Message: "Accept " + r.Header.Get("Accept")})
			default:
				writeJSON(w, http.StatusOK, answer)
			}
		})
	}
	route(http.MethodGet, PathSilo, "", "", siloA)
	route(http.MethodGet, PathCluster, "", "", clusterReport)
	route(http.MethodGet, PathLookup, "grain", "bank.Account/a b&c", Location{Grain: "bank.Account/a b&c", Active: true, Member: "a-1", Name: "a"})
	route(http.MethodPost, PathDeactivate, "grain", "bank.Account/alice", Deactivation{Grain: "bank.Account/alice", Deactivated: true, Member: "a-1"})
	route(http.MethodPost, PathDrain, "silo", "b", DrainReply{Member: "b-1", Name: "b"})
	mux.HandleFunc(prefix+PathReadyz, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

func TestNewClientAddress(t *testing.T) {
	good := []struct{ addr, url string }{
		{"localhost:8080", "http://localhost:8080"},
		{":8080", "http://localhost:8080"},
		{"10.0.0.7:8080", "http://10.0.0.7:8080"},
		{"[::1]:8080", "http://[::1]:8080"},
		{"http://admin.local:8080/", "http://admin.local:8080"},
		{"https://admin.example.com", "https://admin.example.com"},
		{"https://proxy.example.com/granary/admin/", "https://proxy.example.com/granary/admin"},
	}
	for _, tc := range good {
		c, err := NewClient(tc.addr, nil)
		if err != nil {
			t.Errorf("NewClient(%q): %v", tc.addr, err)
			continue
		}
		if got := c.URL(); got != tc.url {
			t.Errorf("NewClient(%q).URL() = %q, want %q", tc.addr, got, tc.url)
		}
	}
	bad := []struct{ addr, why string }{
		{"", "empty"},
		{"localhost", "host:port"},
		{"localhost:http", "port"},
		{"localhost:0", "port"},
		{"localhost:70000", "port"},
		{"local host:8080", "white space"},
		{"ftp://admin:21", "scheme"},
		{"http://", "no host"},
		{"http://:8080", "no host"},
		{"http://admin:99999", "port"},
		{"http://admin:", "port"},
		{"http://admin:8080/?x=1", "query"},
		{"http://admin:8080/#top", "fragment"},
		{"http://user:pw@admin:8080", "user"},
		{"http://[::1", "URL"},
	}
	for _, tc := range bad {
		c, err := NewClient(tc.addr, nil)
		if err == nil {
			t.Errorf("NewClient(%q) = %v, want an error", tc.addr, c.URL())
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, `"`+tc.addr+`"`) || !strings.Contains(msg, tc.why) {
			t.Errorf("NewClient(%q) error %q: want it to quote the address and say %q", tc.addr, msg, tc.why)
		}
	}
}

func TestNewClientHTTPClient(t *testing.T) {
	c, err := NewClient("localhost:8080", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.hc == nil || c.hc.Timeout != DefaultTimeout {
		t.Errorf("nil http.Client: got %+v, want one with Timeout %v", c.hc, DefaultTimeout)
	}
	mine := &http.Client{Timeout: time.Second}
	if c, err = NewClient("localhost:8080", mine); err != nil {
		t.Fatal(err)
	}
	if c.hc != mine {
		t.Error("NewClient did not keep the http.Client it was given")
	}
}

func TestClientAnswers(t *testing.T) {
	for _, prefix := range []string{"", "/granary"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			srv := httptest.NewServer(apiMux(t, prefix))
			t.Cleanup(srv.Close)
			c, err := NewClient(srv.URL+prefix+"/", srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			ctx := testContext(t)
			check := func(name string, got, want any, err error) {
				t.Helper()
				if err != nil {
					t.Errorf("%s: %v", name, err)
				} else if !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %+v\nwant %+v", name, got, want)
				}
			}
			s, err := c.Silo(ctx)
			check("Silo", s, siloA, err)
			cl, err := c.Cluster(ctx)
			check("Cluster", cl, clusterReport, err)
			loc, err := c.Lookup(ctx, "bank.Account/a b&c")
			check("Lookup", loc, Location{Grain: "bank.Account/a b&c", Active: true, Member: "a-1", Name: "a"}, err)
			d, err := c.Deactivate(ctx, "bank.Account/alice")
			check("Deactivate", d, Deactivation{Grain: "bank.Account/alice", Deactivated: true, Member: "a-1"}, err)
			dr, err := c.Drain(ctx, "b")
			check("Drain", dr, DrainReply{Member: "b-1", Name: "b"}, err)
			if err := c.Ready(ctx); err != nil {
				t.Errorf("Ready: %v", err)
			}
		})
	}
}

func TestClientAPIErrors(t *testing.T) {
	long := strings.Repeat("x", maxErrorText+100)
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		want        APIError
		errHas      []string
	}{
		{
			name: "error body", status: http.StatusNotFound, contentType: "application/json",
			body:   `{"code":"NotFound","message":"no silo \"c\" in the cluster"}`,
			want:   APIError{Status: 404, Code: "NotFound", Message: `no silo "c" in the cluster`},
			errHas: []string{"404 Not Found", "(NotFound)", `no silo "c" in the cluster`},
		},
		{
			name: "plain text", status: http.StatusBadGateway, contentType: "text/plain",
			body:   "upstream connect error\n",
			want:   APIError{Status: 502, Message: "upstream connect error"},
			errHas: []string{"502 Bad Gateway", "upstream connect error"},
		},
		{
			name: "JSON that is not an Error", status: http.StatusInternalServerError, contentType: "application/json",
			body:   `[1,2,3]`,
			want:   APIError{Status: 500, Message: "[1,2,3]"},
			errHas: []string{"500 Internal Server Error", "[1,2,3]"},
		},
		{
			name: "empty body", status: http.StatusServiceUnavailable,
			want:   APIError{Status: 503},
			errHas: []string{"503 Service Unavailable"},
		},
		{
			name: "long body", status: http.StatusForbidden, contentType: "text/html",
			body:   long,
			want:   APIError{Status: 403, Message: long[:maxErrorText] + " …"},
			errHas: []string{"403 Forbidden", "xxx …"},
		},
		{
			name: "unknown status", status: 599,
			body:   "odd",
			want:   APIError{Status: 599, Message: "odd"},
			errHas: []string{"adminapi: 599: odd"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.contentType != "" {
					w.Header().Set("Content-Type", tc.contentType)
				}
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			ctx := testContext(t)
			calls := map[string]func() error{
				"Silo":       func() error { _, err := c.Silo(ctx); return err },
				"Cluster":    func() error { _, err := c.Cluster(ctx); return err },
				"Lookup":     func() error { _, err := c.Lookup(ctx, "t/k"); return err },
				"Deactivate": func() error { _, err := c.Deactivate(ctx, "t/k"); return err },
				"Drain":      func() error { _, err := c.Drain(ctx, "s"); return err },
				"Ready":      func() error { return c.Ready(ctx) },
			}
			for name, call := range calls {
				err := call()
				var ae *APIError
				if !errors.As(err, &ae) {
					t.Errorf("%s: error %v (%T), want an *APIError", name, err, err)
					continue
				}
				if *ae != tc.want {
					t.Errorf("%s: APIError %+v, want %+v", name, *ae, tc.want)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%s: error %q does not say %q", name, err, s)
					}
				}
			}
		})
	}
}

func TestClientMalformedAnswer(t *testing.T) {
	for _, body := range []string{`{"name":`, `not json`, `{"name":5}`, ``} {
		t.Run(body, func(t *testing.T) {
			_, c := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, body)
			}))
			_, err := c.Silo(testContext(t))
			if err == nil {
				t.Fatal("Silo succeeded on a malformed answer")
			}
			var ae *APIError
			if errors.As(err, &ae) {
				t.Errorf("error %v is an *APIError; the server answered 200", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "decoding the answer") || !strings.Contains(msg, PathSilo) {
				t.Errorf("error %q does not say that decoding %s failed", msg, PathSilo)
			}
		})
	}
}

func TestClientOversizeAnswer(t *testing.T) {
	chunk := strings.Repeat(" ", 64<<10)
	for _, declared := range []bool{false, true} {
		name := map[bool]string{false: "streamed", true: "Content-Length"}[declared]
		t.Run(name, func(t *testing.T) {
			_, c := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				const total = MaxBodySize + len(`{}`) + 1
				if declared {
					w.Header().Set("Content-Length", "17000000")
				}
				// A JSON document made too long by white space: only
				// the size makes it unacceptable.
				if _, err := io.WriteString(w, "{"); err != nil {
					return
				}
				for n := 1; n < total-1; n += len(chunk) {
					part := chunk
					if rest := total - 1 - n; rest < len(part) {
						part = part[:rest]
					}
					if _, err := io.WriteString(w, part); err != nil {
						return
					}
				}
				_, _ = io.WriteString(w, "}")
			}))
			_, err := c.Silo(testContext(t))
			if !errors.Is(err, ErrBodyTooLarge) {
				t.Fatalf("Silo: error %v, want one wrapping ErrBodyTooLarge", err)
			}
			if declared && !strings.Contains(err.Error(), "17000000") {
				t.Errorf("error %q does not give the declared length", err)
			}
		})
	}
}

func TestClientUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{}, Timeout: defaultTestTimeout}
	t.Cleanup(hc.CloseIdleConnections)
	c, err := NewClient(addr, hc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Cluster(testContext(t))
	if err == nil {
		t.Fatal("Cluster succeeded against a closed port")
	}
	var ae *APIError
	if errors.As(err, &ae) {
		t.Errorf("error %v is an *APIError; nothing answered", err)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("error %q does not name the address %s", err, addr)
	}
	if err := c.Ready(testContext(t)); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("Ready: error %v, want one naming %s", err, addr)
	}
}

func TestClientContextCancel(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	_, c := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	// Runs before the server's Close, which waits for the handler.
	t.Cleanup(func() { close(release) })

	ctx, cancel := context.WithCancel(testContext(t))
	errc := make(chan error, 1)
	go func() {
		_, err := c.Cluster(ctx)
		errc <- err
	}()
	select {
	case <-arrived:
	case <-time.After(defaultTestTimeout):
		t.Fatal("the request never reached the server")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Cluster after cancel: error %v, want one wrapping context.Canceled", err)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("Cluster did not return after its context was cancelled")
	}

	// A context cancelled before the call sends nothing.
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if _, err := c.Silo(done); !errors.Is(err, context.Canceled) {
		t.Errorf("Silo with a cancelled context: error %v, want context.Canceled", err)
	}
	select {
	case <-arrived:
		t.Error("a request with a cancelled context reached the server")
	default:
	}
}

func TestClientEmptyArguments(t *testing.T) {
	var requests atomic.Int32
	_, c := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		writeJSON(w, http.StatusOK, struct{}{})
	}))
	ctx := testContext(t)
	if _, err := c.Lookup(ctx, ""); err == nil || !strings.Contains(err.Error(), "TYPE/KEY") {
		t.Errorf("Lookup(\"\"): error %v, want one asking for TYPE/KEY", err)
	}
	if _, err := c.Deactivate(ctx, ""); err == nil || !strings.Contains(err.Error(), "TYPE/KEY") {
		t.Errorf("Deactivate(\"\"): error %v, want one asking for TYPE/KEY", err)
	}
	if _, err := c.Drain(ctx, ""); err == nil || !strings.Contains(err.Error(), "silo") {
		t.Errorf("Drain(\"\"): error %v, want one asking for a silo", err)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests sent for empty arguments, want none", n)
	}
}

func TestClientConcurrentUse(t *testing.T) {
	srv := httptest.NewServer(apiMux(t, ""))
	t.Cleanup(srv.Close)
	c, err := NewClient(strings.TrimPrefix(srv.URL, "http://"), srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	const n = 8
	errc := make(chan error, n)
	for range n {
		go func() {
			r, err := c.Cluster(ctx)
			if err == nil && !reflect.DeepEqual(r, clusterReport) {
				err = errors.New("wrong report")
			}
			errc <- err
		}()
	}
	for range n {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

// A token is sent as a bearer token on every request, WithToken gives a
// copy with another (or none), and a token that cannot be a header's
// value fails each request without being quoted.
func TestClientToken(t *testing.T) {
	var got atomic.Value
	srv, plain := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"name":"s","status":"active"}`)
	}))
	const token = "client-token-0123456789abcdef"
	c, err := NewClientWith(srv.URL, ClientOptions{HTTPClient: srv.Client(), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    *Client
		want string
	}{
		{"NewClientWith", c, "Bearer " + token},
		{"WithToken", plain.WithToken("other-token-0123456789abcdef"), "Bearer other-token-0123456789abcdef"},
		{"WithToken empty", c.WithToken(""), ""},
		{"NewClient", plain, ""},
	} {
		if _, err := tc.c.Silo(testContext(t)); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if h, _ := got.Load().(string); h != tc.want {
			t.Errorf("%s: Authorization %q, want %q", tc.name, h, tc.want)
		}
	}
	bad := "bad token\r\nX-Injected: 1"
	if _, err := plain.WithToken(bad).Silo(testContext(t)); err == nil || strings.Contains(err.Error(), "bad token") {
		t.Errorf("a token with white space: %v, want an error that does not quote it", err)
	}
	if _, err := NewClientWith(srv.URL, ClientOptions{Token: bad}); err == nil || strings.Contains(err.Error(), "bad token") {
		t.Errorf("NewClientWith with a bad token: %v, want an error that does not quote it", err)
	}
}

// With TLS, host:port is spoken to over https and an http:// URL refused.
func TestClientTLSAddress(t *testing.T) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	for _, tc := range []struct{ addr, want, errHas string }{
		{"10.0.0.7:8080", "https://10.0.0.7:8080", ""},
		{":8080", "https://localhost:8080", ""},
		{"https://admin.example/granary/", "https://admin.example/granary", ""},
		{"http://10.0.0.7:8080", "", "must be https://"},
	} {
		c, err := NewClientWith(tc.addr, ClientOptions{TLS: cfg})
		switch {
		case tc.errHas != "":
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("NewClientWith(%q, TLS): %v, want an error saying %q", tc.addr, err, tc.errHas)
			}
		case err != nil:
			t.Errorf("NewClientWith(%q, TLS): %v", tc.addr, err)
		case c.URL() != tc.want:
			t.Errorf("NewClientWith(%q, TLS).URL() = %s, want %s", tc.addr, c.URL(), tc.want)
		}
	}
}
