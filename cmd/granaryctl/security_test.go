package main

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/granaryio/granary/silo/admin/adminapi"
)

// readCert parses the PEM certificate at path.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("%s holds no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCertsCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	r := runCtl(t, nil, "certs", "--out", dir, "--silo", "silo-0,silo-0.granary,10.0.0.5", "--silo", "silo-1",
		"--client", "ops", "--ip", "10.0.0.9", "--localhost")
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	for _, f := range []string{"ca.crt", "ca.key", "silo-0.crt", "silo-0.key", "silo-1.crt", "silo-1.key", "ops.crt", "ops.key"} {
		path := filepath.Join(dir, f)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("%s not written: %v", f, err)
		}
		if strings.HasSuffix(f, ".key") && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
		if !strings.Contains(r.stdout, path) {
			t.Errorf("the output does not name %s:\n%s", path, r.stdout)
		}
	}

	roots := x509.NewCertPool()
	caCert := readCert(t, filepath.Join(dir, "ca.crt"))
	roots.AddCert(caCert)
	silo := readCert(t, filepath.Join(dir, "silo-0.crt"))
	for _, name := range []string{"silo-0", "silo-0.granary", "localhost", "10.0.0.5", "10.0.0.9", "127.0.0.1", "::1"} {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := silo.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("silo-0.crt for %s, usage %v: %v", name, usage, err)
			}
		}
	}
	if !slices.Equal(silo.DNSNames, []string{"silo-0", "silo-0.granary", "localhost"}) || silo.Subject.CommonName != "silo-0" {
		t.Errorf("silo-0.crt: CN %q, DNS names %v", silo.Subject.CommonName, silo.DNSNames)
	}
	silo1 := readCert(t, filepath.Join(dir, "silo-1.crt"))
	if _, err := silo1.Verify(x509.VerifyOptions{Roots: roots, DNSName: "silo-0.granary"}); err == nil {
		t.Error("silo-1.crt is valid for silo-0's name")
	}
	ops := readCert(t, filepath.Join(dir, "ops.crt"))
	if _, err := ops.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("ops.crt as a client certificate: %v", err)
	}
	if _, err := ops.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("ops.crt, a client's, is valid for server use")
	}
	if ops.Subject.CommonName != "ops" || len(ops.DNSNames) != 0 || len(ops.IPAddresses) != 0 {
		t.Errorf("ops.crt: CN %q, SANs %v %v", ops.Subject.CommonName, ops.DNSNames, ops.IPAddresses)
	}

	// A second run reuses the CA: what it signs chains to the first.
	r = runCtl(t, nil, "certs", "--out", dir, "--silo", "silo-2")
	if r.code != exitOK || !strings.Contains(r.stdout, "using the CA") {
		t.Fatalf("second run: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if again := readCert(t, filepath.Join(dir, "ca.crt")); !again.Equal(caCert) {
		t.Error("the second run replaced the CA")
	}
	if _, err := readCert(t, filepath.Join(dir, "silo-2.crt")).Verify(x509.VerifyOptions{Roots: roots, DNSName: "silo-2"}); err != nil {
		t.Errorf("silo-2.crt does not chain to the first CA: %v", err)
	}
}

func TestCertsErrors(t *testing.T) {
	dir := t.TempDir()
	usage := []struct {
		name   string
		args   []string
		errHas string
	}{
		{"no out", []string{"certs", "--silo", "a"}, "--out DIR is required"},
		{"nothing to make", []string{"certs", "--out", dir}, "at least one --silo or --client"},
		{"duplicate name", []string{"certs", "--out", dir, "--silo", "a", "--client", "a"}, `--client "a": the name is taken by --silo`},
		{"the CA's name", []string{"certs", "--out", dir, "--client", "ca"}, "taken by the CA"},
		{"a path as name", []string{"certs", "--out", dir, "--silo", "../x"}, `--silo "../x"`},
		{"bad ip", []string{"certs", "--out", dir, "--silo", "a", "--ip", "10.0.0.300"}, `--ip "10.0.0.300"`},
		{"empty SAN", []string{"certs", "--out", dir, "--silo", "a,,b"}, "is not a DNS name or IP"},
	}
	for _, tc := range usage {
		t.Run(tc.name, func(t *testing.T) {
			r := runCtl(t, nil, tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.errHas) {
				t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, exitUsage, tc.errHas)
			}
		})
	}
	// Half a CA is not replaced by a new one.
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCtl(t, nil, "certs", "--out", dir, "--silo", "a")
	if r.code != exitFailure || !strings.Contains(r.stderr, "only one of") {
		t.Errorf("half a CA: exit %d, stderr %q; want %d naming the missing file", r.code, r.stderr, exitFailure)
	}
}

// tlsAdmin is an admin server over mutual TLS that answers the cluster
// report to a request bearing token, recording who asked.
type tlsAdmin struct {
	srv *httptest.Server

	mu   sync.Mutex
	seen []string // "CN token-ok" per request
}

func newTLSAdmin(t *testing.T, dir, token string) *tlsAdmin {
	t.Helper()
	src, err := tlsfiles.Load(tlsfiles.Files{
		Cert: filepath.Join(dir, "silo-0.crt"), Key: filepath.Join(dir, "silo-0.key"), CA: filepath.Join(dir, "ca.crt"),
	}, tlsfiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := src.ServerConfig(tlsfiles.MTLS, tlsfiles.ServerOptions{NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	a := &tlsAdmin{}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		ok := r.Header.Get("Authorization") == "Bearer "+token
		a.mu.Lock()
		a.seen = append(a.seen, cn+" "+map[bool]string{true: "token-ok", false: "no-token"}[ok])
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(adminapi.Error{Code: "Unauthenticated", Message: "no admin token"})
			return
		}
		json.NewEncoder(w).Encode(adminapi.ClusterReport{Asked: "silo-0", Silos: []adminapi.SiloReport{{Name: "silo-0", Status: "active"}}})
	}))
	a.srv.TLS = cfg
	a.srv.EnableHTTP2 = true
	a.srv.StartTLS()
	t.Cleanup(a.srv.Close)
	return a
}

func (a *tlsAdmin) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

// granaryctl speaks https with --tls-ca, presents --tls-cert, and sends
// the token of --token-file, whether the file holds the token alone or
// TOKEN PRINCIPAL lines; the environment does the same.
func TestTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	if r := runCtl(t, nil, "certs", "--out", dir, "--silo", "silo-0", "--client", "ops", "--localhost"); r.code != exitOK {
		t.Fatalf("certs: %s", r.stderr)
	}
	const token = "ctl-admin-token-0123456789abcdef"
	admin := newTLSAdmin(t, dir, token)
	_, port, _ := net.SplitHostPort(admin.srv.Listener.Addr().String())
	addr := "localhost:" + port // the name the certificate is for

	alone := filepath.Join(dir, "token")
	lines := filepath.Join(dir, "tokens")
	if err := os.WriteFile(alone, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lines, []byte("# admins\n\n"+token+" ops\nother-token-0123456789abcdef ci\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, cert, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ops.crt"), filepath.Join(dir, "ops.key")

	r := runCtl(t, nil, "--admin", addr, "--tls-ca", ca, "--tls-cert", cert, "--tls-key", key, "--token-file", alone, "status")
	if r.code != exitOK || !strings.Contains(r.stdout, "silo-0") || r.stderr != "" {
		t.Fatalf("with flags: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	env := map[string]string{adminEnv: addr, tlsCAEnv: ca, tlsCertEnv: cert, tlsKeyEnv: key, tokenFileEnv: lines}
	r = runCtl(t, env, "silos")
	if r.code != exitOK || !strings.Contains(r.stdout, "silo-0") {
		t.Fatalf("with the environment: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if got := admin.requests(); !slices.Equal(got, []string{"ops token-ok", "ops token-ok"}) {
		t.Errorf("the server saw %q, want two requests from ops with the token", got)
	}

	// Without the token: the server's 401 is a failure.
	r = runCtl(t, nil, "--admin", addr, "--tls-ca", ca, "--tls-cert", cert, "--tls-key", key, "status")
	if r.code != exitFailure || !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "https://"+addr) {
		t.Errorf("without a token: exit %d, stderr %q; want %d, 401 and the https address", r.code, r.stderr, exitFailure)
	}
	// Without a client certificate, the mutual-TLS handshake fails.
	r = runCtl(t, nil, "--admin", addr, "--tls-ca", ca, "--token-file", alone, "status")
	if r.code != exitFailure {
		t.Errorf("without a client certificate: exit %d, stderr %q; want %d", r.code, r.stderr, exitFailure)
	}
	// Plain HTTP to an HTTPS server: the failure says what to give.
	r = runCtl(t, nil, "--admin", addr, "status")
	if r.code != exitFailure || !strings.Contains(r.stderr, "give --tls-ca") {
		t.Errorf("plain HTTP: exit %d, stderr %q; want %d and a hint to give --tls-ca", r.code, r.stderr, exitFailure)
	}
	// Without the CA, the server's certificate is not trusted.
	r = runCtl(t, nil, "--admin", "https://"+addr, "--token-file", alone, "status")
	if r.code != exitFailure || !strings.Contains(r.stderr, "certificate") {
		t.Errorf("without the CA: exit %d, stderr %q; want %d and a certificate error", r.code, r.stderr, exitFailure)
	}
}

func TestSecurityUsageErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# nothing\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		errHas string
	}{
		{"cert without key", nil, []string{"--tls-cert", "x.crt", "status"}, "--tls-cert and --tls-key"},
		{"key from env without cert", map[string]string{tlsKeyEnv: "x.key"}, []string{"status"}, "--tls-cert and " + tlsKeyEnv},
		{"missing CA file", nil, []string{"--tls-ca", filepath.Join(dir, "nope.crt"), "status"}, "nope.crt"},
		{"missing token file", nil, []string{"--token-file", filepath.Join(dir, "nope"), "status"}, "--token-file " + filepath.Join(dir, "nope")},
		{"token file from env without a token", map[string]string{tokenFileEnv: empty}, []string{"status"}, tokenFileEnv + " " + empty + ": auth: the token file holds no token"},
		{"the CA file is checked before the URL", nil, []string{"--admin", "http://localhost:1", "--tls-ca", filepath.Join(dir, "nope.crt"), "status"}, "nope.crt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCtl(t, tc.env, tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.errHas) {
				t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, exitUsage, tc.errHas)
			}
		})
	}
}

// An http:// admin URL with TLS files is refused rather than sending the
// token in the clear; a token over plain HTTP is warned about.
func TestPlainHTTPToken(t *testing.T) {
	dir := t.TempDir()
	if r := runCtl(t, nil, "certs", "--out", dir, "--client", "ops"); r.code != exitOK {
		t.Fatalf("certs: %s", r.stderr)
	}
	r := runCtl(t, nil, "--admin", "http://localhost:8080", "--tls-ca", filepath.Join(dir, "ca.crt"), "status")
	if r.code != exitUsage || !strings.Contains(r.stderr, "must be https://") {
		t.Errorf("http URL with --tls-ca: exit %d, stderr %q", r.code, r.stderr)
	}
	f := newFakeAdmin(t, cannedAnswers())
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("plain-http-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCtl(t, nil, "--admin", f.addr(), "--token-file", token, "status")
	if r.code != exitOK || !strings.Contains(r.stderr, "warning: sending the admin token over plain HTTP") {
		t.Errorf("token over plain HTTP: exit %d, stderr %q; want 0 and a warning", r.code, r.stderr)
	}
}

func TestHelpListsSecurityFlags(t *testing.T) {
	r := runCtl(t, nil, "--help")
	for _, want := range []string{"--tls-ca", "--tls-cert", "--tls-key", "--token-file",
		tlsCAEnv, tlsCertEnv, tlsKeyEnv, tokenFileEnv, "certs"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--help does not list %s", want)
		}
	}
	r = runCtl(t, nil, "certs", "--help")
	for _, want := range []string{"--out", "--silo", "--client", "--ip", "--localhost"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("certs --help does not list %s", want)
		}
	}
}
