package admin_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/security/certs"
	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/granaryio/granary/silo/admin"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// With no admin credentials configured, the actions that change the
// cluster are off: 403 naming the settings that turn them on, counted as
// refusals; the silo keeps running, and reading stays open.
func TestAdminActionsOffWithoutCredentials(t *testing.T) {
	t.Parallel()
	var drains atomic.Int32
	rej := security.NewRejections(nil)
	srv, sl := startAlone(t, admin.Config{Drain: func() { drains.Add(1) }, Rejections: rej})
	addr := srv.Addr()
	call(t, sl, "x")

	do(t, http.MethodPost, addr, adminapi.PathDrain, query("silo", "alone")).
		wantError(t, http.StatusForbidden, codes.PermissionDenied,
			"admin.token_file", "GRANARY_ADMIN_TOKEN_FILE", "admin.tls.mode", "admin.tls.ca_file")
	// A token sent to a server that has none is no credential either.
	doAuth(t, http.MethodPost, addr, adminapi.PathDeactivate, query("grain", probeType+"/x"), adminToken).
		wantError(t, http.StatusForbidden, codes.PermissionDenied, "admin.token_file")
	if n := drains.Load(); n != 0 {
		t.Fatalf("Drain called %d times by unauthenticated requests", n)
	}
	if n := rej.Count(security.ListenerAdmin, security.ReasonPermissionDenied); n != 2 {
		t.Errorf("%d refusals counted as permission_denied, want 2", n)
	}
	if err := sl.Ready(); err != nil {
		t.Fatalf("the silo stopped serving after refused admin requests: %v", err)
	}
	if loc, err := client(t, addr).Lookup(testCtx(t), probeType+"/x"); err != nil || !loc.Active {
		t.Errorf("the grain after a refused deactivation: %+v, %v; want still active", loc, err)
	}
	// Without credentials configured, reading works as it always did.
	if r, err := client(t, addr).Cluster(testCtx(t)); err != nil || len(r.Silos) != 1 {
		t.Errorf("cluster report without credentials configured: %+v, %v", r, err)
	}
	if a := do(t, http.MethodGet, addr, adminapi.PathSilo, nil); a.status != http.StatusOK {
		t.Errorf("GET %s: %d, want 200", adminapi.PathSilo, a.status)
	}
}

// With a token file, every request but the probes, the metrics and the
// dashboard's files needs an admin token; a valid token works.
func TestAdminToken(t *testing.T) {
	t.Parallel()
	var drains atomic.Int32
	rej := security.NewRejections(nil)
	srv, _ := startAlone(t, admin.Config{
		Drain:      func() { drains.Add(1) },
		Tokens:     testTokens(t),
		Rejections: rej,
		Gatherer:   prometheus.NewRegistry(),
	})
	addr := srv.Addr()

	refused := []struct {
		name   string
		header http.Header
	}{
		{"no credentials", nil},
		{"an unknown token", http.Header{"Authorization": {"Bearer not-the-admin-token-at-all"}}},
		{"a short token", http.Header{"Authorization": {"Bearer x"}}},
		{"another scheme", http.Header{"Authorization": {"Basic " + adminToken}}},
		{"two headers", http.Header{"Authorization": {"Bearer " + adminToken, "Bearer " + adminToken}}},
		{"the token without a scheme", http.Header{"Authorization": {adminToken}}},
	}
	requests := []struct{ method, path string }{
		{http.MethodPost, adminapi.PathDrain + "?silo=alone"},
		{http.MethodPost, adminapi.PathDeactivate + "?grain=probe.Probe/x"},
		{http.MethodGet, adminapi.PathSilo},
		{http.MethodGet, adminapi.PathCluster},
		{http.MethodGet, adminapi.PathEvents},
		{http.MethodGet, adminapi.PathLookup + "?grain=probe.Probe/x"},
		{http.MethodGet, "/api/v1/nosuch"},
	}
	var want uint64
	for _, rc := range refused {
		for _, rq := range requests {
			a := doURLWith(t, rq.method, "http://"+addr+rq.path, rc.header)
			a.wantError(t, http.StatusUnauthorized, codes.Unauthenticated, "admin.token_file")
			if h := a.header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
				t.Errorf("%s %s with %s: WWW-Authenticate %q, want Bearer", rq.method, rq.path, rc.name, h)
			}
			if strings.Contains(string(a.body), adminToken) {
				t.Errorf("%s %s with %s: the answer quotes the token: %s", rq.method, rq.path, rc.name, a.body)
			}
			want++
		}
	}
	if n := drains.Load(); n != 0 {
		t.Fatalf("Drain called %d times by unauthenticated requests", n)
	}
	if n := rej.Count(security.ListenerAdmin, security.ReasonUnauthenticated); n != want {
		t.Errorf("%d refusals counted as unauthenticated, want %d", n, want)
	}

	// Open always.
	for _, path := range []string{adminapi.PathHealthz, adminapi.PathReadyz, adminapi.PathMetrics, "/", "/app.js", "/style.css"} {
		if a := do(t, http.MethodGet, addr, path, nil); a.status != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200 (%s)", path, a.status, a.body)
		}
	}

	// The token works, by header and through the client.
	c := adminClient(t, addr)
	if r, err := c.Cluster(testCtx(t)); err != nil || len(r.Silos) != 1 {
		t.Fatalf("cluster report with the token: %+v, %v", r, err)
	}
	if a := doAuth(t, http.MethodGet, addr, adminapi.PathSilo, nil, adminToken); a.status != http.StatusOK {
		t.Errorf("GET %s with the token: %d", adminapi.PathSilo, a.status)
	}
	if _, err := c.Drain(testCtx(t), "alone"); err != nil {
		t.Fatalf("drain with the token: %v", err)
	}
	if n := drains.Load(); n != 1 {
		t.Errorf("Drain called %d times, want once", n)
	}
	// The client's error for a refusal says 401.
	_, err := client(t, addr).Drain(testCtx(t), "alone")
	var ae *adminapi.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || ae.Code != codes.Unauthenticated.String() {
		t.Errorf("drain without the token: %v, want a 401 APIError", err)
	}
}

// A token removed from the token file is refused once the file's check
// interval has passed (1 s here, on a fake clock), and an event stream it
// opened ends at its next event.
func TestRevokedToken(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Now())
	const other = "other-admin-token-0123456789abcdef"
	path := writeTokenFile(t, adminToken+" ops", other+" other")
	tokens := loadTokens(t, path, auth.TokenFileOptions{Clock: clock, CheckInterval: time.Second})
	srv, _ := startAlone(t, admin.Config{Tokens: tokens, Clock: clock})
	addr := srv.Addr()

	if a := doAuth(t, http.MethodGet, addr, adminapi.PathSilo, nil, adminToken); a.status != http.StatusOK {
		t.Fatalf("before the revocation: %d %s", a.status, a.body)
	}
	ctx := testCtx(t)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+adminapi.PathEvents, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("event stream with the token: %d", resp.StatusCode)
	}
	streamDone := make(chan []byte, 1)
	go func() {
		body, _ := io.ReadAll(resp.Body) // until the server ends the stream
		streamDone <- body
	}()

	rewriteTokenFile(t, path, other+" other")
	// Within the check interval the old file is still in use...
	if a := doAuth(t, http.MethodGet, addr, adminapi.PathSilo, nil, adminToken); a.status != http.StatusOK {
		t.Fatalf("within the check interval: %d", a.status)
	}
	// ...and past it, the token is refused, well within 5 s.
	if err := clock.BlockUntilContext(ctx, 2); err != nil { // the stream's ticker and the sampler's
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	doAuth(t, http.MethodGet, addr, adminapi.PathSilo, nil, adminToken).
		wantError(t, http.StatusUnauthorized, codes.Unauthenticated)
	doAuth(t, http.MethodPost, addr, adminapi.PathDrain, query("silo", "alone"), adminToken).
		wantError(t, http.StatusUnauthorized, codes.Unauthenticated)
	if a := doAuth(t, http.MethodGet, addr, adminapi.PathSilo, nil, other); a.status != http.StatusOK {
		t.Errorf("the token left in the file: %d", a.status)
	}
	// The stream's next event finds the token gone and ends the stream.
	clock.Advance(admin.EventInterval)
	select {
	case body := <-streamDone:
		if n := strings.Count(string(body), "data: "); n != 1 {
			t.Errorf("the stream sent %d events, want 1 (none after the revocation)", n)
		}
	case <-time.After(testTimeout):
		t.Fatal("the event stream went on after its token was revoked")
	}
}

// testPKI is a throwaway CA, a certificate for the admin servers on
// 127.0.0.1, and the files tlsfiles reads.
type testPKI struct {
	dir              string
	ca               *certs.CA
	caFile           string
	certFile, keyFle string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := certs.NewCA("admin-test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile, _, err := ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(certs.LeafOptions{CommonName: "silo", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := leaf.Write(dir, "silo")
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{dir: dir, ca: ca, caFile: caFile, certFile: certFile, keyFle: keyFile}
}

// source loads the silo's certificate with the CA.
func (p *testPKI) source(t *testing.T) *tlsfiles.Source {
	t.Helper()
	src, err := tlsfiles.Load(tlsfiles.Files{Cert: p.certFile, Key: p.keyFle, CA: p.caFile}, tlsfiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// serverTLS is the admin server's configuration in mode.
func (p *testPKI) serverTLS(t *testing.T, mode tlsfiles.Mode) *tls.Config {
	t.Helper()
	cfg, err := p.source(t).ServerConfig(mode, tlsfiles.ServerOptions{NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// clientCert issues a client certificate named cn and returns a client
// configuration trusting the CA that presents it ("" for none).
func (p *testPKI) client(t *testing.T, cn string) *tls.Config {
	t.Helper()
	files := tlsfiles.Files{CA: p.caFile}
	if cn != "" {
		leaf, err := p.ca.Issue(certs.LeafOptions{CommonName: cn, Usage: certs.ClientAuth})
		if err != nil {
			t.Fatal(err)
		}
		files.Cert, files.Key, err = leaf.Write(p.dir, cn)
		if err != nil {
			t.Fatal(err)
		}
	}
	src, err := tlsfiles.Load(files, tlsfiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The servers are dialled at 127.0.0.1, which crypto/tls does not
	// name to VerifyConnection.
	return src.ClientConfig(tlsfiles.ClientOptions{ServerName: "127.0.0.1"})
}

// httpsClient returns an http.Client speaking TLS with cfg, without
// keep-alive so no connection outlives the test.
func httpsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, DisableKeepAlives: true}}
}

// The admin server serves HTTPS with Config.TLS, HTTP/2 included; a
// client that trusts the CA gets through, a plain HTTP one and one that
// does not trust the CA do not, and the failed handshakes are counted.
func TestTLSServing(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	rej := security.NewRejections(nil)
	srv, _ := startAlone(t, admin.Config{TLS: pki.serverTLS(t, tlsfiles.TLS), Tokens: testTokens(t), Rejections: rej})
	addr := srv.Addr()

	hc := httpsClient(pki.client(t, ""))
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, "https://"+addr+adminapi.PathHealthz, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET over https: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || resp.TLS == nil {
		t.Errorf("GET over https: %d %s, want 200 over HTTP/2 and TLS", resp.StatusCode, resp.Proto)
	}
	c, err := adminapi.NewClientWith(addr, adminapi.ClientOptions{HTTPClient: hc, TLS: pki.client(t, ""), Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.URL(), "https://") {
		t.Errorf("a client with TLS speaks to %s, want https", c.URL())
	}
	if r, err := c.Cluster(testCtx(t)); err != nil || len(r.Silos) != 1 {
		t.Errorf("cluster report over https with the token: %+v, %v", r, err)
	}

	// Plain HTTP to the TLS port.
	if a := do(t, http.MethodGet, addr, adminapi.PathHealthz, nil); a.status != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS port: %d, want 400", a.status)
	}
	// A client that does not trust the CA.
	stranger := newTestPKI(t)
	req, _ = http.NewRequestWithContext(testCtx(t), http.MethodGet, "https://"+addr+adminapi.PathHealthz, nil)
	if resp, err := httpsClient(stranger.client(t, "")).Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("a client trusting another CA got through")
	}
	testwait.For(t, testTimeout, "the failed handshakes to be counted", func() bool {
		return rej.Count(security.ListenerAdmin, security.ReasonPlaintext) == 1 &&
			rej.Count(security.ListenerAdmin, security.ReasonBadCertificate)+rej.Count(security.ListenerAdmin, security.ReasonUnknownCA)+
				rej.Count(security.ListenerAdmin, security.ReasonTLSHandshake) == 1
	})
}

// With CertAdmins, a client certificate from the CA is an admin's
// credentials; a client without one is refused, and one from another CA
// does not finish its handshake.
func TestCertAdmin(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	var drains atomic.Int32
	rej := security.NewRejections(nil)
	srv, _ := startAlone(t, admin.Config{
		TLS:        pki.serverTLS(t, tlsfiles.TLS),
		CertAdmins: true,
		Drain:      func() { drains.Add(1) },
		Rejections: rej,
	})
	addr := srv.Addr()

	anon, err := adminapi.NewClientWith(addr, adminapi.ClientOptions{HTTPClient: httpsClient(pki.client(t, "")), TLS: pki.client(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = anon.Drain(testCtx(t), "alone")
	var ae *adminapi.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || !strings.Contains(ae.Message, "client certificate") {
		t.Fatalf("drain without a client certificate: %v, want 401 naming client certificates", err)
	}
	if n := rej.Count(security.ListenerAdmin, security.ReasonUnauthenticated); n != 1 {
		t.Errorf("%d refusals counted, want 1", n)
	}

	aliceTLS := pki.client(t, "ops-alice")
	alice, err := adminapi.NewClientWith(addr, adminapi.ClientOptions{HTTPClient: httpsClient(aliceTLS), TLS: aliceTLS})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Cluster(testCtx(t)); err != nil {
		t.Fatalf("cluster report with an admin certificate: %v", err)
	}
	if _, err := alice.Drain(testCtx(t), "alone"); err != nil {
		t.Fatalf("drain with an admin certificate: %v", err)
	}
	if n := drains.Load(); n != 1 {
		t.Errorf("Drain called %d times, want once", n)
	}

	// A certificate of another CA.
	stranger := newTestPKI(t)
	leaf, err := stranger.ca.Issue(certs.LeafOptions{CommonName: "mallory", Usage: certs.ClientAuth})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(pki.ca.Cert)
	mallory := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, "https://"+addr+adminapi.PathDrain+"?silo=alone", http.NoBody)
	if resp, err := httpsClient(mallory).Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("a certificate of another CA got an answer: %d", resp.StatusCode)
	}
	if n := drains.Load(); n != 1 {
		t.Errorf("Drain called %d times, want once", n)
	}
}

func TestCertAdminsConfigErrors(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	noCA, err := tlsfiles.Load(tlsfiles.Files{Cert: pki.certFile, Key: pki.keyFle}, tlsfiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	noClientCerts, err := noCA.ServerConfig(tlsfiles.TLS, tlsfiles.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unverified := pki.serverTLS(t, tlsfiles.TLS)
	unverified.VerifyConnection = nil // asks for certificates, verifies none
	tests := []struct {
		name  string
		cfg   admin.Config
		field string
	}{
		{"without TLS", admin.Config{CertAdmins: true}, "CertAdmins"},
		{"without client certificates", admin.Config{CertAdmins: true, TLS: noClientCerts}, "CertAdmins"},
		{"unverified client certificates", admin.Config{CertAdmins: true, TLS: unverified}, "CertAdmins"},
		{"TLS without a certificate", admin.Config{TLS: &tls.Config{}}, "TLS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Listen = "127.0.0.1:0"
			srv, err := admin.Listen(tt.cfg)
			if err == nil {
				srv.Stop(testCtx(t))
				t.Fatal("Listen succeeded")
			}
			var ce *admin.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Errorf("error %v is not a ConfigError for %s", err, tt.field)
			}
		})
	}
}

// A cluster whose admin servers speak TLS to each other, admitting each
// other on their certificates: the report gathers every silo, and a drain
// sent with the token to one is forwarded to another.
func TestClusterOverTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	src := pki.source(t)
	serverTLS, err := src.ServerConfig(tlsfiles.TLS, tlsfiles.ServerOptions{NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	peerTLS := src.ClientConfig(tlsfiles.ClientOptions{SkipNameCheck: true}) // as the host makes it
	c := newTestClusterWith(t, nodeOptions{serverTLS: serverTLS, peerTLS: peerTLS}, "a", "b", "c")

	cl, err := adminapi.NewClientWith(c.node("a").srv.Addr(), adminapi.ClientOptions{TLS: pki.client(t, ""), Token: adminToken,
		HTTPClient: httpsClient(pki.client(t, ""))})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.Cluster(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Silos) != 3 || len(r.Unreachable) != 0 {
		t.Fatalf("cluster report over TLS: %d silos, unreachable %+v", len(r.Silos), r.Unreachable)
	}
	if _, err := cl.Drain(testCtx(t), "b"); err != nil {
		t.Fatalf("drain forwarded over TLS: %v", err)
	}
	if n := c.node("b").drains.Load(); n != 1 {
		t.Errorf("b drained %d times, want once", n)
	}
}

// The token a caller sends is what a forwarded request carries: a peer
// that does not know it refuses, and the refusal is passed on.
func TestForwardCarriesToken(t *testing.T) {
	t.Parallel()
	const onlyA = "known-to-a-only-0123456789abcdef"
	c := newTestClusterWith(t, nodeOptions{})
	c.start("a", nodeOptions{tokenPath: writeTokenFile(t, adminToken+" ops", onlyA+" a-ops")})
	c.start("b", nodeOptions{})
	c.waitMembers(2)
	addr := c.node("a").srv.Addr()

	// a knows onlyA, b does not: b refuses the drain a forwards.
	doAuth(t, http.MethodPost, addr, adminapi.PathDrain, query("silo", "b"), onlyA).
		wantError(t, http.StatusUnauthorized, codes.Unauthenticated, "silo "+c.node("b").sl.Member())
	// The cluster report of a caller b does not know lists b as
	// unreachable, saying why.
	var r adminapi.ClusterReport
	doAuth(t, http.MethodGet, addr, adminapi.PathCluster, nil, onlyA).decode(t, http.StatusOK, &r)
	if len(r.Silos) != 1 || len(r.Unreachable) != 1 || !strings.Contains(r.Unreachable[0].Error, "401") {
		t.Errorf("cluster report with a token b does not know: silos %d, unreachable %+v; want b unreachable with 401", len(r.Silos), r.Unreachable)
	}
	if n := c.node("b").drains.Load(); n != 0 {
		t.Fatalf("b drained %d times on a token it does not know", n)
	}
	// The token both know goes through.
	if _, err := adminClient(t, addr).Drain(testCtx(t), "b"); err != nil {
		t.Fatalf("drain of b through a with the shared token: %v", err)
	}
	if n := c.node("b").drains.Load(); n != 1 {
		t.Errorf("b drained %d times, want once", n)
	}
}

// Without admin credentials, a cluster's reports are gathered as before.
func TestClusterReportOpenWithoutCredentials(t *testing.T) {
	t.Parallel()
	c := newTestClusterWith(t, nodeOptions{noTokens: true}, "a", "b")
	r, err := client(t, c.node("a").srv.Addr()).Cluster(testCtx(t))
	if err != nil || len(r.Silos) != 2 || len(r.Unreachable) != 0 {
		t.Fatalf("cluster report without credentials: %+v, %v", r, err)
	}
	do(t, http.MethodPost, c.node("a").srv.Addr(), adminapi.PathDrain, query("silo", "b")).
		wantError(t, http.StatusForbidden, codes.PermissionDenied, "admin.token_file")
}

// TestGarbageOnTheAdminPortIsCounted: bytes that are neither TLS nor HTTP
// are counted as a refusal; net/http alone would answer 400 and say
// nothing.
func TestGarbageOnTheAdminPortIsCounted(t *testing.T) {
	t.Parallel()
	rej := security.NewRejections(nil)
	srv := listen(t, admin.Config{Listen: "127.0.0.1:0", Rejections: rej})
	c, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("\x00\x01garbage\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the garbage to be counted", func() bool {
		return rej.Count(security.ListenerAdmin, security.ReasonMalformedFrame) == 1
	})
}
