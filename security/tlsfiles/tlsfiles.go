// Package tlsfiles builds the TLS configurations of Granary's listeners
// and dialers from PEM files: a certificate, its key and a CA bundle. It
// re-reads the files when they change, so certificates and CAs rotate
// without a restart.
//
// Re-reading needs no goroutine: every handshake first asks the Source to
// check its files, and a check reads them at most once per CheckInterval,
// swapping in the new material only when every file parses and the key
// matches the certificate. A half-written rotation (a new certificate
// beside the old key) is logged and the old material kept until the next
// check finds the pair whole. Connections already open keep the
// certificates they were made with, as TLS does; only new handshakes see
// the new ones.
//
// The CA bundle is read anew too, which is why verification is done here
// (VerifyConnection against the current bundle) rather than by
// crypto/tls's static RootCAs and ClientCAs. A rotation to a new CA
// therefore goes: add the new CA to every bundle, issue new certificates,
// then drop the old CA.
//
// It imports zap, the clock and gRPC's credentials only.
package tlsfiles

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"github.com/granaryio/granary/internal/reload"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
)

// Mode is how a listener uses TLS.
type Mode string

// Modes.
const (
	// Off serves plaintext.
	Off Mode = "off"
	// TLS serves TLS with the server's certificate; a client may present
	// a certificate, which is verified against the CA when one is given.
	TLS Mode = "tls"
	// MTLS requires a client certificate from the CA.
	MTLS Mode = "mtls"
)

// ParseMode reads "off", "tls" or "mtls".
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Off, TLS, MTLS:
		return m, nil
	}
	return "", fmt.Errorf("tlsfiles: %q is not one of off, tls, mtls", s)
}

// Files names the PEM files of one TLS configuration.
type Files struct {
	// Cert is this side's certificate chain, Key its private key. A
	// server needs both; a client needs them for mutual TLS.
	Cert, Key string
	// CA is the bundle of CA certificates that peers' certificates must
	// chain to. A client without one trusts the system's roots.
	CA string
}

// Empty reports whether no file is named.
func (f Files) Empty() bool { return f.Cert == "" && f.Key == "" && f.CA == "" }

// DefaultCheckInterval is Options.CheckInterval's default.
const DefaultCheckInterval = time.Second

// Options tune a Source.
type Options struct {
	// CheckInterval is how often at most a handshake re-reads the files
	// to look for a change. Default 1 s.
	CheckInterval time.Duration
	// Logger receives a line for each rotation and each rotation that
	// could not be read. Default: none.
	Logger *zap.Logger
	// Clock paces the checks. Default: the real clock.
	Clock clockwork.Clock
}

// Source holds the material read from Files, re-read when it changes. Its
// methods may be called from any goroutine.
type Source struct {
	files Files
	cur   *reload.Value[*material]
}

// material is one read of the files.
type material struct {
	cert *tls.Certificate
	pool *x509.CertPool // nil: no CA file
}

// Load reads files and returns a Source over them. A file that cannot be
// read or parsed is an error that names it.
func Load(files Files, o Options) (*Source, error) {
	if (files.Cert == "") != (files.Key == "") {
		return nil, errors.New("tlsfiles: a certificate needs its key and a key its certificate: set both cert_file and key_file")
	}
	if files.Empty() {
		return nil, errors.New("tlsfiles: no file named")
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	s := &Source{files: files}
	var err error
	s.cur, err = reload.New(reload.Options[*material]{
		Read:     s.readAll,
		Parse:    s.parse,
		Interval: o.CheckInterval,
		Clock:    o.Clock,
		Logger:   o.Logger,
		Failed:   "TLS files changed but cannot be used: keeping the certificates in use",
		Loaded:   "TLS files re-read: new handshakes use them",
		Fields: func(m *material) []zap.Field {
			fields := []zap.Field{zap.String("cert_file", files.Cert), zap.String("ca_file", files.CA)}
			if m.cert != nil && m.cert.Leaf != nil {
				fields = append(fields, zap.String("subject", m.cert.Leaf.Subject.String()),
					zap.String("serial", m.cert.Leaf.SerialNumber.Text(16)), zap.Time("not_after", m.cert.Leaf.NotAfter))
			}
			return fields
		},
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Files returns the files s reads.
func (s *Source) Files() Files { return s.files }

// HasCert reports whether s has a certificate and key.
func (s *Source) HasCert() bool { return s.files.Cert != "" }

// HasCA reports whether s has a CA bundle.
func (s *Source) HasCA() bool { return s.files.CA != "" }

// Certificate returns the certificate in use, after a check for a change
// of the files when one is due. Nil without a certificate file.
func (s *Source) Certificate() *tls.Certificate { return s.current().cert }

// Check re-reads the files now and swaps in their contents if they
// changed and are whole. It returns the error that kept a change out.
func (s *Source) Check() error { return s.cur.Check() }

// current returns the material in use, checking the files first when a
// check is due. Handshakes call it; one never waits on another's read of
// the files.
func (s *Source) current() *material { return s.cur.Get() }

func (s *Source) readAll() ([]byte, error) {
	var all []byte
	for _, f := range []struct{ name, path string }{{"cert_file", s.files.Cert}, {"key_file", s.files.Key}, {"ca_file", s.files.CA}} {
		if f.path == "" {
			all = append(all, 0)
			continue
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			return nil, fmt.Errorf("tlsfiles: %s: %w", f.name, err)
		}
		all = append(append(all, b...), 0)
	}
	return all, nil
}

// parse turns the files' contents into material.
func (s *Source) parse(raw []byte) (*material, error) {
	m := &material{}
	parts := bytes.SplitN(raw, []byte{0}, 4)
	certPEM, keyPEM, caPEM := parts[0], parts[1], parts[2]
	if s.files.Cert != "" {
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// The error text of X509KeyPair never quotes the key.
			return nil, fmt.Errorf("tlsfiles: cert_file %s and key_file %s: %w", s.files.Cert, s.files.Key, err)
		}
		m.cert = &cert
	}
	if s.files.CA != "" {
		pool := x509.NewCertPool()
		n := 0
		for rest := caPEM; ; {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				break
			}
			if b.Type != "CERTIFICATE" {
				continue
			}
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("tlsfiles: ca_file %s: certificate %d: %w", s.files.CA, n+1, err)
			}
			pool.AddCert(c)
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("tlsfiles: ca_file %s holds no PEM certificate", s.files.CA)
		}
		m.pool = pool
	}
	return m, nil
}

// ServerOptions tune a server configuration.
type ServerOptions struct {
	// NextProtos are the ALPN protocols served: "h2" for gRPC, which
	// gRPC's credentials add themselves; "h2" and "http/1.1" for HTTP.
	NextProtos []string
	// RequireUsages, when set, refuses a client certificate that lacks
	// any of these extended key usages: the silo-to-silo listener
	// requires both server and client usage, so a client's certificate
	// from the same CA cannot pass for a silo's.
	RequireUsages []x509.ExtKeyUsage
}

// ServerConfig returns a server configuration in mode (TLS or MTLS): the
// certificate in use, and for MTLS, a client certificate verified against
// the CA bundle in use. In TLS mode with a CA bundle, a client may present
// a certificate, which is then verified too.
func (s *Source) ServerConfig(mode Mode, o ServerOptions) (*tls.Config, error) {
	if mode != TLS && mode != MTLS {
		return nil, fmt.Errorf("tlsfiles: a server configuration needs mode tls or mtls, not %q", mode)
	}
	if !s.HasCert() {
		return nil, errors.New("tlsfiles: a server needs cert_file and key_file")
	}
	if mode == MTLS && !s.HasCA() {
		return nil, errors.New("tlsfiles: mtls needs ca_file, the CA that client certificates must chain to")
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: slices.Clone(o.NextProtos),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		},
	}
	switch {
	case mode == MTLS:
		cfg.ClientAuth = tls.RequireAnyClientCert
	case s.HasCA():
		cfg.ClientAuth = tls.RequestClientCert
	}
	if cfg.ClientAuth != tls.NoClientCert {
		usages := slices.Clone(o.RequireUsages)
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				if mode == MTLS {
					return errNoClientCert
				}
				return nil
			}
			if _, err := s.verify(cs.PeerCertificates, "", x509.ExtKeyUsageClientAuth); err != nil {
				return err
			}
			for _, u := range usages {
				if !slices.Contains(cs.PeerCertificates[0].ExtKeyUsage, u) {
					return &UsageError{Subject: cs.PeerCertificates[0].Subject.String(), Want: usages}
				}
			}
			return nil
		}
	}
	return cfg, nil
}

// errNoClientCert is crypto/tls's own text for the case, so the refusal
// reads the same whoever detects it.
var errNoClientCert = errors.New("tls: client didn't provide a certificate")

// UsageError is a certificate without an extended key usage its listener
// requires.
type UsageError struct {
	Subject string
	Want    []x509.ExtKeyUsage
}

func (e *UsageError) Error() string {
	return fmt.Sprintf("tlsfiles: bad certificate: %s is not for this listener (it requires server and client use: a silo's certificate)", e.Subject)
}

// ClientOptions tune a client configuration.
type ClientOptions struct {
	// ServerName is the name the server's certificate must be for: a DNS
	// name or an IP address. ClientCredentials fills it in from each
	// address dialled; ClientConfig needs it whenever the address dialled
	// may be an IP, since crypto/tls tells VerifyConnection no name for
	// an IP (it sends none in SNI), and a configuration that cannot tell
	// which name to check refuses every server rather than check none.
	ServerName string
	// SkipNameCheck verifies the server's chain and usage but not its
	// name: between silos, which dial each other by IP, the cluster CA is
	// what makes a peer a silo.
	SkipNameCheck bool
	// RequireUsages are extended key usages the server's certificate
	// must have besides server use: between silos, client use too, so
	// that only a silo's certificate passes.
	RequireUsages []x509.ExtKeyUsage
	// NextProtos are the ALPN protocols offered.
	NextProtos []string
}

// ClientConfig returns a client configuration: the server's certificate
// verified against the CA bundle in use (the system's roots without
// one), for o.ServerName (else the SNI name of the connection, which is
// empty for an IP address: see ClientOptions.ServerName), and the
// certificate in use presented when the server asks.
func (s *Source) ClientConfig(o ClientOptions) *tls.Config {
	usages := slices.Clone(o.RequireUsages)
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: o.ServerName,
		NextProtos: slices.Clone(o.NextProtos),
		// Verification is VerifyConnection's, against the bundle in use.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			name := o.ServerName
			if name == "" {
				name = cs.ServerName
			}
			if o.SkipNameCheck {
				name = ""
			} else if name == "" {
				return errNoServerName
			}
			if _, err := s.verify(cs.PeerCertificates, name, x509.ExtKeyUsageServerAuth); err != nil {
				return err
			}
			for _, u := range usages {
				if !slices.Contains(cs.PeerCertificates[0].ExtKeyUsage, u) {
					return &UsageError{Subject: cs.PeerCertificates[0].Subject.String(), Want: usages}
				}
			}
			return nil
		},
	}
	if s.HasCert() {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		}
	}
	return cfg
}

var errNoServerName = errors.New("tlsfiles: no server name to verify the certificate against (an IP address was dialled): set ClientOptions.ServerName, or use ClientCredentials, which takes it from the address")

// ClientCredentials returns gRPC transport credentials that verify each
// server as ClientConfig does, for o.ServerName or, when that is empty,
// the host of the address dialled, IP addresses included.
func (s *Source) ClientCredentials(o ClientOptions) credentials.TransportCredentials {
	return &clientCreds{s: s, o: o}
}

type clientCreds struct {
	s *Source
	o ClientOptions
}

func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	o := c.o
	if o.ServerName == "" {
		host, _, err := net.SplitHostPort(authority)
		if err != nil {
			host = authority
		}
		o.ServerName = host
	}
	return credentials.NewTLS(c.s.ClientConfig(o)).ClientHandshake(ctx, authority, conn)
}

func (c *clientCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tlsfiles: client credentials cannot serve")
}

func (c *clientCreds) Info() credentials.ProtocolInfo {
	return credentials.NewTLS(&tls.Config{}).Info()
}

func (c *clientCreds) Clone() credentials.TransportCredentials {
	o := c.o
	o.RequireUsages, o.NextProtos = slices.Clone(o.RequireUsages), slices.Clone(o.NextProtos)
	return &clientCreds{s: c.s, o: o}
}

// OverrideServerName sets the name to verify; gRPC's deprecated hook.
func (c *clientCreds) OverrideServerName(name string) error {
	c.o.ServerName = name
	return nil
}

// verify checks that chain[0] chains to the bundle in use (the system's
// roots without one), for usage, and for name unless it is "".
func (s *Source) verify(chain []*x509.Certificate, name string, usage x509.ExtKeyUsage) ([][]*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, errors.New("tlsfiles: the peer sent no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         s.current().pool,
		DNSName:       name,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{usage},
	}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	return chain[0].Verify(opts)
}
