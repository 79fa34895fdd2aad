package host

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/granaryio/granary/client"
	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/security/certs"
	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// testPKI writes a CA, a silo certificate for localhost and 127.0.0.1,
// and token files into a test directory.
type testPKI struct {
	dir, ca, cert, key string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := certs.NewCA("host-test", 0)
	if err != nil {
		t.Fatal(err)
	}
	caFile, _, err := ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(certs.LeafOptions{CommonName: "solo", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := leaf.Write(dir, "solo")
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{dir: dir, ca: caFile, cert: cert, key: key}
}

func (p testPKI) tls(mode string) TLSConfig {
	return TLSConfig{Mode: mode, CertFile: p.cert, KeyFile: p.key, CAFile: p.ca}
}

// clientTLS verifies the silo's certificate for host against the CA.
func (p testPKI) clientTLS(t *testing.T, host string) *tls.Config {
	t.Helper()
	src, err := tlsfiles.Load(tlsfiles.Files{CA: p.ca}, tlsfiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return src.ClientConfig(tlsfiles.ClientOptions{ServerName: host})
}

func (p testPKI) tokens(t *testing.T, name, lines string) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTLSSettingsNameTheField(t *testing.T) {
	p := newTestPKI(t)
	for _, tc := range []struct {
		name  string
		set   func(*Config)
		field string
	}{
		{"unknown mode", func(c *Config) { c.Gateway.TLS.Mode = "ssl" }, "gateway.tls.mode"},
		{"tls without a certificate", func(c *Config) { c.Gateway.TLS = TLSConfig{Mode: "tls"} }, "gateway.tls.cert_file"},
		{"mtls without a CA", func(c *Config) { c.Admin.TLS = TLSConfig{Mode: "mtls", CertFile: p.cert, KeyFile: p.key} }, "admin.tls.ca_file"},
		{"files with mode off", func(c *Config) { c.Gateway.TLS = TLSConfig{Mode: "off", CertFile: p.cert} }, "gateway.tls.cert_file"},
		{"tls between silos", func(c *Config) {
			c.Cluster.ID, c.Storage.Provider = "x", "memory"
			c.Cluster.TLS = p.tls("tls")
		}, "cluster.tls.mode"},
		{"cluster tls alone", func(c *Config) { c.Cluster.TLS = p.tls("mtls") }, "cluster.tls.mode"},
		{"tokens over plaintext", func(c *Config) { c.Gateway.Auth.TokenFile = "tokens" }, "gateway.auth.token_file"},
		{"accepted gossip keys without a key", func(c *Config) {
			c.Cluster.ID, c.Storage.Provider = "x", "memory"
			c.Cluster.AcceptedSecretKeys = []string{"MDEyMzQ1Njc4OWFiY2RlZg=="}
		}, "cluster.accepted_secret_keys"},
		{"a malformed accepted gossip key", func(c *Config) {
			c.Cluster.ID, c.Storage.Provider = "x", "memory"
			c.Cluster.SecretKey, c.Cluster.AcceptedSecretKeys = "MDEyMzQ1Njc4OWFiY2RlZg==", []string{"short"}
		}, "cluster.accepted_secret_keys"},
		{"admin tokens over plaintext", func(c *Config) { c.Admin.TokenFile = "tokens" }, "admin.token_file"},
		{"admin tokens forwarded unverified", func(c *Config) {
			c.Cluster.ID, c.Storage.Provider = "x", "memory"
			c.Admin.TLS, c.Admin.TokenFile = TLSConfig{Mode: "tls", CertFile: p.cert, KeyFile: p.key}, "tokens"
		}, "admin.token_file"},
	} {
		c := testConfig(t)
		tc.set(&c)
		err := c.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "config: "+tc.field+" (") {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.field)
		}
	}
}

func TestUnreadableTLSFileNamesTheField(t *testing.T) {
	p := newTestPKI(t)
	c := testConfig(t)
	c.Gateway.TLS = p.tls("tls")
	c.Gateway.TLS.CAFile = filepath.Join(p.dir, "missing.crt")
	_, closeStorage, err := c.Silo(context.Background(), nil)
	closeStorage()
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "gateway.tls.ca_file" {
		t.Fatalf("%v, want a FieldError for gateway.tls.ca_file", err)
	}
}

// TestRunSecured runs a silo of a cluster with every port secured, as the
// deploy files do, and reaches it as a client and an operator would.
func TestRunSecured(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	p := newTestPKI(t)
	c := testConfig(t)
	c.Storage.DataDir, c.Storage.Provider = "", "memory"
	c.Cluster.ID, c.Cluster.Profile = "secure", "local"
	c.Cluster.Gossip.Listen, c.Cluster.GRPC.Listen = "127.0.0.1:0", "127.0.0.1:0"
	c.Cluster.SecretKey = "MDEyMzQ1Njc4OWFiY2RlZg=="
	c.Cluster.TLS = p.tls("mtls")
	c.Gateway.TLS = p.tls("tls")
	c.Admin.TLS = p.tls("tls")
	const appToken, adminToken = "app-token-0123456789abcdef", "admin-token-0123456789abcdef"
	c.Gateway.Auth.TokenFile = p.tokens(t, "tokens", appToken+" alice\n")
	c.Admin.TokenFile = p.tokens(t, "admin-tokens", adminToken+" ops\n")
	reg := prometheus.NewRegistry()
	runCtx, stop := context.WithCancel(ctx)
	_, started, done := startRun(t, runCtx, c, registerCounter, WithRegistry(reg))
	defer func() {
		stop()
		if r := waitRun(t, done); r.err != nil {
			t.Errorf("Run: %v", r.err)
		}
	}()
	s := waitStarted(t, ctx, started, done)
	info := s.Info()

	cl, err := client.Dial(ctx, client.WithGateways(info.GatewayAddr), client.WithTLSFiles(p.ca, "", ""), client.WithToken(appToken))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clusterpb.NewCounterRef(cl, "c1").Add(ctx, &clusterpb.AddRequest{Delta: 1}); err != nil {
		t.Errorf("a call with a token over TLS: %v", err)
	}
	cl.Close()
	// A gateway whose certificate names another host than the address
	// dialled: the name to check is given.
	for name, wantOK := range map[string]bool{"localhost": true, "elsewhere": false} {
		named, err := client.Dial(ctx, client.WithGateways(info.GatewayAddr), client.WithTLSFiles(p.ca, "", ""),
			client.WithTLSServerName(name), client.WithToken(appToken))
		if err == nil {
			_, err = clusterpb.NewCounterRef(named, "c1").Add(ctx, &clusterpb.AddRequest{Delta: 1})
			named.Close()
		}
		if (err == nil) != wantOK {
			t.Errorf("WithTLSServerName(%q): %v, want success %v", name, err, wantOK)
		}
	}
	anon, err := client.Dial(ctx, client.WithGateways(info.GatewayAddr), client.WithTLSFiles(p.ca, "", ""))
	if err == nil {
		_, err = clusterpb.NewCounterRef(anon, "c1").Add(ctx, &clusterpb.AddRequest{Delta: 1})
		anon.Close()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("a client without a token: %v, want Unauthenticated", err)
	}
	if _, err := client.Dial(ctx, client.WithGateways(info.GatewayAddr)); err == nil {
		t.Error("a plaintext client reached the TLS gateway")
	}

	ac, err := adminapi.NewClientWith(info.AdminAddr, adminapi.ClientOptions{TLS: p.clientTLS(t, "127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Drain(ctx, "solo"); err == nil {
		t.Fatal("a drain without the admin token was accepted")
	}
	if _, err := ac.WithToken(adminToken).Silo(ctx); err != nil {
		t.Errorf("the admin API with the token: %v", err)
	}
	insecureGet := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := insecureGet.Get("https://" + info.AdminAddr + adminapi.PathHealthz)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz without credentials over https: %v, %v", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	if err := s.Ready(); err != nil {
		t.Errorf("the silo after the refusals: %v", err)
	}
	// The refusals of the gateway and of the admin server are counted in
	// one family.
	n := testutil.CollectAndCount(reg, security.MetricName)
	if n < 2 {
		t.Errorf("%s has %d series, want the gateway's and the admin server's refusals", security.MetricName, n)
	}
}

func TestGatewayMaxConnectionsReachesTheGateway(t *testing.T) {
	c := testConfig(t)
	c.Gateway.MaxConnections = 17
	cfg, closeStorage, err := c.Silo(context.Background(), nil)
	closeStorage()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Gateway.Transport.MaxConnections; got != 17 {
		t.Errorf("the gateway's MaxConnections = %d, want 17", got)
	}
}
