package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/granaryio/granary/security/certs"
)

// writeSecrets lays out dir as make certs does, with the files given
// (relative name -> content); "" for the CA makes a real one.
func writeSecrets(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if name == caFileName && content == "" {
			ca, err := certs.NewCA("test-ca", 0)
			if err != nil {
				t.Fatal(err)
			}
			content = string(ca.CertPEM)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadSecrets(t *testing.T) {
	const admin, gateway = "admin-token-0123456789", "gateway-token-0123456789"
	good := map[string]string{
		caFileName:        "",
		adminTokensName:   "# a comment\n\n" + admin + " operator\nsecond-token-0123456789 other\n",
		gatewayTokensName: gateway + "\tclient\n",
	}
	dir := writeSecrets(t, good)
	s, err := loadSecrets(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.adminToken != admin || s.gatewayToken != gateway || s.caFile != filepath.Join(dir, caFileName) || s.roots == nil {
		t.Errorf("loadSecrets = %+v", s)
	}
	if len(s.clientOptions()) != 2 {
		t.Errorf("clientOptions: %d options, want TLS and the token", len(s.clientOptions()))
	}
	if c, err := s.adminClient("127.0.0.1:8081", s.adminToken); err != nil || !strings.HasPrefix(c.URL(), "https://") {
		t.Errorf("adminClient: %v, %v; want an https client", c, err)
	}

	for _, tt := range []struct {
		name    string
		change  func(m map[string]string)
		wantErr string
	}{
		{"no CA", func(m map[string]string) { delete(m, caFileName) }, "run make certs"},
		{"a CA that is no PEM", func(m map[string]string) { m[caFileName] = "garbage" }, "holds no PEM certificate"},
		{"no admin tokens", func(m map[string]string) { delete(m, adminTokensName) }, adminTokensName},
		{"an empty gateway token file", func(m map[string]string) { m[gatewayTokensName] = "# nothing\n" }, "holds no token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := map[string]string{}
			for k, v := range good {
				m[k] = v
			}
			tt.change(m)
			_, err := loadSecrets(writeSecrets(t, m))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "-secrets") {
				t.Fatalf("loadSecrets: %v, want an error naming -secrets and %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), admin) || strings.Contains(err.Error(), gateway) {
				t.Errorf("the error quotes a token: %v", err)
			}
		})
	}
}

func TestReportSecurity(t *testing.T) {
	r, tl := testResult([]second{clean, clean})
	r.evaluate(tl)
	r.addSecurity([]check{{Name: "the gateway refuses plaintext gRPC"}, {Name: "the admin API refuses requests without the admin token", Err: errors.New("answered 200")}})
	if r.passed() || !strings.Contains(strings.Join(r.Failures, "\n"), "security: the admin API refuses requests without the admin token: answered 200") {
		t.Errorf("failures %q: want the failed check among them", r.Failures)
	}
	var b strings.Builder
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Security", "- the gateway refuses plaintext gRPC: held", "- the admin API refuses requests without the admin token: **failed**: answered 200"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}
