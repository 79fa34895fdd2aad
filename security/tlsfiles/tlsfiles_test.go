package tlsfiles_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/security/certs"
	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pki is a CA and files issued by it in a test's directory.
type pki struct {
	t   *testing.T
	dir string
	ca  *certs.CA
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	ca, err := certs.NewCA(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &pki{t: t, dir: t.TempDir(), ca: ca}
}

// issue writes a certificate for cn and returns its files with the CA's.
func (p *pki) issue(cn string, usage certs.Usage, dns ...string) tlsfiles.Files {
	p.t.Helper()
	leaf, err := p.ca.Issue(certs.LeafOptions{CommonName: cn, DNSNames: dns, Usage: usage})
	if err != nil {
		p.t.Fatal(err)
	}
	cert, key, err := leaf.Write(p.dir, cn)
	if err != nil {
		p.t.Fatal(err)
	}
	caFile, _, err := p.ca.WriteCA(p.dir, "ca")
	if err != nil {
		p.t.Fatal(err)
	}
	return tlsfiles.Files{Cert: cert, Key: key, CA: caFile}
}

func load(t *testing.T, f tlsfiles.Files, clock clockwork.Clock) *tlsfiles.Source {
	t.Helper()
	s, err := tlsfiles.Load(f, tlsfiles.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// handshake runs one TLS handshake over loopback TCP (whose buffers let
// both sides write at once, as net.Pipe's do not) and returns the
// certificate the client saw and each side's error.
func handshake(t *testing.T, server, client *tls.Config) (seen *x509.Certificate, serr, cerr error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	done := make(chan error, 1)
	go func() {
		a, err := lis.Accept()
		if err != nil {
			done <- err
			return
		}
		defer a.Close()
		a.SetDeadline(time.Now().Add(10 * time.Second))
		s := tls.Server(a, server)
		err = s.Handshake()
		if err == nil {
			// TLS 1.3 refuses a client certificate after the client's
			// handshake returned: a read on each side settles it.
			_, err = s.Write([]byte("x"))
			if err == nil {
				_, err = s.Read(make([]byte, 1))
			}
		}
		done <- err
	}()
	b, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b.SetDeadline(time.Now().Add(10 * time.Second))
	c := tls.Client(b, client)
	cerr = c.Handshake()
	if cerr == nil {
		if _, err := c.Read(make([]byte, 1)); err != nil {
			cerr = err
		} else if _, err := c.Write([]byte("y")); err != nil {
			cerr = err
		}
		seen = c.ConnectionState().PeerCertificates[0]
	}
	serr = <-done
	b.Close()
	return seen, serr, cerr
}

func TestMutualTLSAcceptsOnlyTheCAsCertificates(t *testing.T) {
	p := newPKI(t, "cluster")
	srv := load(t, p.issue("silo-a", 0, "silo-a"), nil)
	scfg, err := srv.ServerConfig(tlsfiles.MTLS, tlsfiles.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good := load(t, p.issue("silo-b", 0), nil).ClientConfig(tlsfiles.ClientOptions{ServerName: "silo-a"})
	if _, serr, cerr := handshake(t, scfg, good); serr != nil || cerr != nil {
		t.Fatalf("a certificate of the cluster's CA: server %v, client %v", serr, cerr)
	}

	other := newPKI(t, "other")
	stranger := load(t, other.issue("intruder", 0), nil)
	// The intruder trusts the cluster CA but holds another's certificate.
	sf := stranger.Files()
	caFile, _, _ := p.ca.WriteCA(other.dir, "cluster-ca")
	sf.CA = caFile
	intruder := load(t, sf, nil).ClientConfig(tlsfiles.ClientOptions{ServerName: "silo-a"})
	_, serr, _ := handshake(t, scfg, intruder)
	var ua x509.UnknownAuthorityError
	if !errors.As(serr, &ua) {
		t.Errorf("a certificate from another CA: server error %v, want x509.UnknownAuthorityError", serr)
	}

	noCert := load(t, tlsfiles.Files{CA: p.issue("x", 0).CA}, nil).ClientConfig(tlsfiles.ClientOptions{ServerName: "silo-a"})
	if _, serr, _ := handshake(t, scfg, noCert); serr == nil || !strings.Contains(serr.Error(), "certificate") {
		t.Errorf("no client certificate: server error %v, want a refusal", serr)
	}
}

func TestClientChecksTheServerNameUnlessTold(t *testing.T) {
	p := newPKI(t, "cluster")
	scfg, _ := load(t, p.issue("silo-a", 0, "silo-a"), nil).ServerConfig(tlsfiles.TLS, tlsfiles.ServerOptions{})
	cli := load(t, p.issue("c", certs.ClientAuth), nil)
	if _, _, cerr := handshake(t, scfg, cli.ClientConfig(tlsfiles.ClientOptions{ServerName: "silo-b"})); cerr == nil {
		t.Error("a certificate for silo-a passed for silo-b")
	}
	if _, _, cerr := handshake(t, scfg, cli.ClientConfig(tlsfiles.ClientOptions{ServerName: "10.1.2.3", SkipNameCheck: true})); cerr != nil {
		t.Errorf("SkipNameCheck: %v", cerr)
	}
}

func TestSiloListenerRefusesAClientOnlyCertificate(t *testing.T) {
	p := newPKI(t, "cluster")
	scfg, _ := load(t, p.issue("silo-a", 0), nil).ServerConfig(tlsfiles.MTLS, tlsfiles.ServerOptions{
		RequireUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	client := load(t, p.issue("app", certs.ClientAuth), nil).ClientConfig(tlsfiles.ClientOptions{SkipNameCheck: true})
	_, serr, _ := handshake(t, scfg, client)
	var ue *tlsfiles.UsageError
	if !errors.As(serr, &ue) {
		t.Errorf("a client's certificate on the silo listener: %v, want a UsageError", serr)
	}
	silo := load(t, p.issue("silo-b", 0), nil).ClientConfig(tlsfiles.ClientOptions{SkipNameCheck: true})
	if _, serr, cerr := handshake(t, scfg, silo); serr != nil || cerr != nil {
		t.Errorf("a silo's certificate: server %v, client %v", serr, cerr)
	}
}

func TestRotatedFilesServeNewHandshakes(t *testing.T) {
	clock := clockwork.NewFakeClock()
	p := newPKI(t, "cluster")
	files := p.issue("silo-a", 0, "silo-a")
	srv := load(t, files, clock)
	scfg, _ := srv.ServerConfig(tlsfiles.TLS, tlsfiles.ServerOptions{})
	cli := load(t, tlsfiles.Files{CA: files.CA}, clock).ClientConfig(tlsfiles.ClientOptions{ServerName: "silo-a"})
	before, _, _ := handshake(t, scfg, cli)

	// A new certificate for the same name, written over the old files.
	p.issue("silo-a", 0, "silo-a")
	if seen, _, _ := handshake(t, scfg, cli); seen.SerialNumber.Cmp(before.SerialNumber) != 0 {
		t.Fatal("the files were re-read before the check interval passed")
	}
	clock.Advance(tlsfiles.DefaultCheckInterval)
	after, _, cerr := handshake(t, scfg, cli)
	if cerr != nil || after.SerialNumber.Cmp(before.SerialNumber) == 0 {
		t.Fatalf("after the check interval: err %v, same certificate %v", cerr, after != nil && after.SerialNumber.Cmp(before.SerialNumber) == 0)
	}
}

func TestHalfWrittenRotationKeepsTheCertificateInUse(t *testing.T) {
	clock := clockwork.NewFakeClock()
	p := newPKI(t, "cluster")
	files := p.issue("silo-a", 0, "silo-a")
	srv := load(t, files, clock)
	inUse := srv.Certificate().Leaf.SerialNumber

	// A new certificate beside the old key: the pair does not match.
	leaf, err := p.ca.Issue(certs.LeafOptions{CommonName: "silo-a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.Cert, leaf.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.Check(); err == nil {
		t.Fatal("a certificate beside another's key was taken")
	}
	if srv.Certificate().Leaf.SerialNumber.Cmp(inUse) != 0 {
		t.Fatal("the certificate in use changed to half a rotation")
	}
	if err := os.WriteFile(files.Key, leaf.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Check(); err != nil {
		t.Fatalf("the completed rotation: %v", err)
	}
	if srv.Certificate().Leaf.SerialNumber.Cmp(leaf.Cert.SerialNumber) != 0 {
		t.Fatal("the completed rotation is not in use")
	}
}

func TestLoadNamesTheBadFile(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		files tlsfiles.Files
		want  string
	}{
		"missing cert":     {tlsfiles.Files{Cert: filepath.Join(dir, "none.crt"), Key: junk}, "cert_file"},
		"cert without key": {tlsfiles.Files{Cert: junk}, "key_file"},
		"junk pair":        {tlsfiles.Files{Cert: junk, Key: junk}, "cert_file"},
		"junk CA":          {tlsfiles.Files{CA: junk}, "ca_file"},
		"nothing":          {tlsfiles.Files{}, "no file"},
	} {
		_, err := tlsfiles.Load(tc.files, tlsfiles.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, tc.want)
		}
	}
	if _, err := tlsfiles.ParseMode("ssl"); err == nil {
		t.Error(`ParseMode("ssl") passed`)
	}
}

func TestServerConfigNeedsItsFiles(t *testing.T) {
	p := newPKI(t, "cluster")
	caOnly := load(t, tlsfiles.Files{CA: p.issue("x", 0).CA}, nil)
	if _, err := caOnly.ServerConfig(tlsfiles.TLS, tlsfiles.ServerOptions{}); err == nil {
		t.Error("a server without a certificate was configured")
	}
	f := p.issue("y", 0)
	f.CA = ""
	if _, err := load(t, f, nil).ServerConfig(tlsfiles.MTLS, tlsfiles.ServerOptions{}); err == nil {
		t.Error("mtls without a CA was configured")
	}
}

// TestClientVerifiesTheAddressDialled: crypto/tls names no server for an
// IP address, so ClientConfig without a ServerName refuses rather than
// skip the check, and ClientCredentials checks the IP dialled.
func TestClientVerifiesTheAddressDialled(t *testing.T) {
	p := newPKI(t, "cluster")
	leaf, err := p.ca.Issue(certs.LeafOptions{CommonName: "gw", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	cert, key, _ := leaf.Write(p.dir, "gw")
	caFile, _, _ := p.ca.WriteCA(p.dir, "ca")
	h2 := tlsfiles.ServerOptions{NextProtos: []string{"h2"}} // gRPC's clients insist on ALPN
	scfg, _ := load(t, tlsfiles.Files{Cert: cert, Key: key}, nil).ServerConfig(tlsfiles.TLS, h2)
	other := p.issue("other-service", 0, "other-service")
	otherCfg, _ := load(t, tlsfiles.Files{Cert: other.Cert, Key: other.Key}, nil).ServerConfig(tlsfiles.TLS, h2)
	cli := load(t, tlsfiles.Files{CA: caFile}, nil)

	if _, _, cerr := handshake(t, scfg, cli.ClientConfig(tlsfiles.ClientOptions{})); cerr == nil {
		t.Error("ClientConfig without a ServerName accepted a server dialled by IP")
	}
	creds := cli.ClientCredentials(tlsfiles.ClientOptions{})
	for name, tc := range map[string]struct {
		server *tls.Config
		ok     bool
	}{"a certificate for the IP": {scfg, true}, "a certificate for another name": {otherCfg, false}} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			_ = tls.Server(c, tc.server).Handshake()
		}()
		raw, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		raw.SetDeadline(time.Now().Add(10 * time.Second))
		conn, _, err := creds.ClientHandshake(context.Background(), lis.Addr().String(), raw)
		if (err == nil) != tc.ok {
			t.Errorf("%s: handshake error %v, want success %v", name, err, tc.ok)
		}
		if conn != nil {
			conn.Close()
		}
		raw.Close()
		lis.Close()
	}
}

func TestAMissingFileIsLoggedOnceAndTheCertificateKept(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	clock := clockwork.NewFakeClock()
	p := newPKI(t, "cluster")
	files := p.issue("silo-a", 0)
	src, err := tlsfiles.Load(files, tlsfiles.Options{Clock: clock, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(files.Cert); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if src.Check() == nil {
			t.Fatal("a missing certificate file passed a check")
		}
	}
	if logs.Len() != 1 {
		t.Errorf("%d warnings for one missing file, want 1: %v", logs.Len(), logs.All())
	}
	if src.Certificate() == nil {
		t.Error("the certificate in use was dropped")
	}
}
