package main

import (
	"encoding/base64"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/security/certs"
	"github.com/granaryio/granary/silo/host"
)

// fakeCerts stands in for granaryctl certs: it parses the arguments
// mksecrets gives and issues the same certificates with package certs,
// counting its runs.
type fakeCerts struct {
	t    *testing.T
	runs int
}

func (f *fakeCerts) issue(args []string) error {
	f.t.Helper()
	f.runs++
	if args[0] != "certs" {
		f.t.Fatalf("granaryctl %v: want the certs command", args)
	}
	var out string
	var silos, clients []string
	localhost := false
	for i := 1; i < len(args); i++ {
		switch args[i] {
		case "--out":
			i++
			out = args[i]
		case "--silo":
			i++
			silos = append(silos, args[i])
		case "--client":
			i++
			clients = append(clients, args[i])
		case "--localhost":
			localhost = true
		default:
			f.t.Fatalf("granaryctl %v: unexpected %q", args, args[i])
		}
	}
	caCert, caKey := filepath.Join(out, "ca.crt"), filepath.Join(out, "ca.key")
	ca, err := certs.LoadCA(caCert, caKey)
	if err != nil {
		if ca, err = certs.NewCA("test-ca", 0); err != nil {
			return err
		}
		if _, _, err := ca.WriteCA(out, "ca"); err != nil {
			return err
		}
	}
	for _, s := range silos {
		parts := strings.Split(s, ",")
		lo := certs.LeafOptions{CommonName: parts[0], Usage: certs.ServerAuth | certs.ClientAuth, ValidFor: 24 * time.Hour * 365}
		if localhost {
			parts = append(parts, "localhost", "127.0.0.1")
		}
		for _, n := range parts {
			if ip := net.ParseIP(n); ip != nil {
				lo.IPs = append(lo.IPs, ip)
			} else {
				lo.DNSNames = append(lo.DNSNames, n)
			}
		}
		leaf, err := ca.Issue(lo)
		if err != nil {
			return err
		}
		if _, _, err := leaf.Write(out, parts[0]); err != nil {
			return err
		}
	}
	for _, c := range clients {
		leaf, err := ca.Issue(certs.LeafOptions{CommonName: c, Usage: certs.ClientAuth, ValidFor: 24 * time.Hour * 365})
		if err != nil {
			return err
		}
		if _, _, err := leaf.Write(out, c); err != nil {
			return err
		}
	}
	return nil
}

func testOptions(dir string) options {
	return options{dir: dir, silos: []string{"silo-a", "silo-b"}, renewWithin: 30 * 24 * time.Hour}
}

func TestRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	f := &fakeCerts{t: t}
	now := time.Now()
	o := testOptions(dir)
	if err := run(o, f.issue, now, io.Discard); err != nil {
		t.Fatal(err)
	}
	if f.runs != 1 {
		t.Fatalf("granaryctl certs ran %d times, want 1", f.runs)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, %v; want a directory of mode 0700", dir, fi.Mode(), err)
	}
	// The token files parse as the silos read them, with a token each.
	for _, name := range []string{adminTokens, gatewayTokens} {
		tf, err := auth.LoadTokenFile(filepath.Join(dir, name), auth.TokenFileOptions{})
		if err != nil || tf.Tokens().Len() != 1 {
			t.Fatalf("%s: %v, want one token", name, err)
		}
		tok, err := auth.ReadToken(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := tf.Lookup(tok); !ok || p == "" {
			t.Errorf("%s: the first token has no principal", name)
		}
		if fi, _ := os.Stat(filepath.Join(dir, name)); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	// The env file sets the gossip key, a variable the host reads, to
	// 32 bytes of base64.
	env, err := os.ReadFile(filepath.Join(dir, clusterEnv))
	if err != nil {
		t.Fatal(err)
	}
	var set []string
	for line := range strings.SplitSeq(string(env), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, _ := strings.Cut(line, "=")
		set = append(set, name)
		if !slices.Contains(host.EnvNames(), name) {
			t.Errorf("%s sets %s, which the host does not read", clusterEnv, name)
		}
		if b, err := base64.StdEncoding.DecodeString(value); err != nil || len(b) != 32 {
			t.Errorf("%s: %s is not base64 of 32 bytes: %v", clusterEnv, name, err)
		}
	}
	if !slices.Equal(set, []string{secretKeyEnv}) {
		t.Errorf("%s sets %v, want %s alone", clusterEnv, set, secretKeyEnv)
	}
	// Each silo's directory holds what it mounts, readable by the
	// container's user, and its certificate is for its service name and
	// the loopback.
	for _, s := range o.silos {
		sd := filepath.Join(dir, s)
		for _, name := range []string{caCert, siloCert, siloKey, adminTokens, gatewayTokens} {
			fi, err := os.Stat(filepath.Join(sd, name))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o644 {
				t.Errorf("%s/%s: mode %v, want 0644 (the silo runs as another user; %s keeps others out)", s, name, fi.Mode().Perm(), dir)
			}
		}
		if _, err := os.Stat(filepath.Join(sd, "ca.key")); err == nil {
			t.Errorf("%s holds the CA's key", sd)
		}
		c, err := readCert(filepath.Join(sd, siloCert))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{s, "localhost", "127.0.0.1"} {
			if err := c.VerifyHostname(n); err != nil {
				t.Errorf("%s: %v", s, err)
			}
		}
	}

	// A second run keeps everything.
	before := readAll(t, dir)
	if err := run(o, f.issue, now, io.Discard); err != nil {
		t.Fatal(err)
	}
	if f.runs != 1 {
		t.Errorf("a second run issued certificates again (%d runs)", f.runs)
	}
	if after := readAll(t, dir); !mapsEqual(before, after) {
		t.Error("a second run changed files")
	}

	// A new publish host, or -renew, issues the certificates again and
	// keeps the tokens and the key.
	o.publishHost = "192.0.2.7"
	if err := run(o, f.issue, now, io.Discard); err != nil {
		t.Fatal(err)
	}
	if f.runs != 2 {
		t.Fatalf("a new publish host did not issue certificates (%d runs)", f.runs)
	}
	c, err := readCert(filepath.Join(dir, "silo-a", siloCert))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.VerifyHostname("192.0.2.7"); err != nil {
		t.Errorf("after a new publish host: %v", err)
	}
	o.renew = true
	if err := run(o, f.issue, now, io.Discard); err != nil || f.runs != 3 {
		t.Fatalf("-renew: %v, %d runs; want a third", err, f.runs)
	}
	after := readAll(t, dir)
	for _, name := range []string{adminTokens, gatewayTokens, clusterEnv, filepath.Join(pkiDir, "ca.key")} {
		if before[name] != after[name] {
			t.Errorf("%s changed on renewal", name)
		}
	}
	// Expiring soon counts as missing.
	o.renew = false
	if err := run(o, f.issue, now.Add(340*24*time.Hour), io.Discard); err != nil || f.runs != 4 {
		t.Fatalf("near expiry: %v, %d runs; want a fourth", err, f.runs)
	}
}

func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestParseFlags(t *testing.T) {
	t.Setenv(publishHostEnv, "")
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.dir != "deploy/secrets" || !slices.Equal(o.silos, []string{"silo-a", "silo-b", "silo-c"}) {
		t.Errorf("defaults: %+v", o)
	}
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-silos", ","}, "-silos"},
		{[]string{"-dir", ""}, "-dir"},
		{[]string{"-publish-host", "a b"}, "-publish-host"},
		{[]string{"x"}, "unexpected"},
	} {
		if _, err := parseFlags(tt.args, io.Discard); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("parseFlags(%q) = %v, want an error naming %s", tt.args, err, tt.wantErr)
		}
	}
}
