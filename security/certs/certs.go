// Package certs issues the certificates a Granary cluster runs on: a CA,
// and certificates signed by it for silos (server and client use, since a
// silo both serves and dials its peers), for clients and for operators.
// Keys are ECDSA P-256, whose handshakes cost a fraction of RSA's.
// granaryctl certs is its command; tests use it to make throwaway CAs.
//
// It imports only the standard library.
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Defaults of the validity periods.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultLeafValidity = 365 * 24 * time.Hour
)

// clockSkew backdates NotBefore, so a certificate issued on one machine is
// valid at once on another whose clock is a little behind.
const clockSkew = 5 * time.Minute

// A CA signs certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM and KeyPEM are Cert and Key in PEM, as written to files.
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed CA named commonName, valid for validFor (0:
// DefaultCAValidity).
func NewCA(commonName string, validFor time.Duration) (*CA, error) {
	if commonName == "" {
		return nil, errors.New("certs: the CA needs a name")
	}
	if validFor <= 0 {
		validFor = DefaultCAValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"Granary"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("certs: CA certificate: %w", err)
	}
	return caFrom(der, key)
}

func caFrom(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// LoadCA reads a CA that NewCA made and WriteFiles wrote.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("certs: CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("certs: %s holds no PEM certificate", certFile)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("certs: %s holds no PEM key", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", keyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("certs: %s holds a %T key; want ECDSA", keyFile, k)
	}
	ca, err := caFrom(cb.Bytes, key)
	if err != nil {
		return nil, err
	}
	if !ca.Cert.IsCA {
		return nil, fmt.Errorf("certs: %s is not a CA certificate", certFile)
	}
	if !key.PublicKey.Equal(ca.Cert.PublicKey) {
		return nil, fmt.Errorf("certs: %s is not the key of %s", keyFile, certFile)
	}
	return ca, nil
}

// Usage says what a certificate is for.
type Usage int

// Usages; a silo's certificate is both.
const (
	ServerAuth Usage = 1 << iota
	ClientAuth
)

// LeafOptions describe a certificate to issue.
type LeafOptions struct {
	// CommonName is the subject's name: a silo's name, or a client's
	// principal when its certificate authenticates it.
	CommonName string
	// DNSNames and IPs are the subject alternative names a server
	// certificate is valid for: the names clients and peers dial.
	DNSNames []string
	IPs      []net.IP
	// Usage is ServerAuth, ClientAuth or both. 0 means both.
	Usage Usage
	// ValidFor is how long the certificate is valid. 0:
	// DefaultLeafValidity.
	ValidFor time.Duration
}

// A Leaf is an issued certificate and its key, in PEM.
type Leaf struct {
	Cert            *x509.Certificate
	CertPEM, KeyPEM []byte
}

// Issue signs a certificate for o.
func (ca *CA) Issue(o LeafOptions) (*Leaf, error) {
	if o.CommonName == "" {
		return nil, errors.New("certs: a certificate needs a common name")
	}
	if o.ValidFor <= 0 {
		o.ValidFor = DefaultLeafValidity
	}
	if o.Usage == 0 {
		o.Usage = ServerAuth | ClientAuth
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notAfter := now.Add(o.ValidFor)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: o.CommonName},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	if o.Usage&ServerAuth != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if o.Usage&ClientAuth != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("certs: certificate for %s: %w", o.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: certificate for %s: %w", o.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &Leaf{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// WriteCA writes the CA's certificate and key as dir/NAME.crt and
// dir/NAME.key, and returns their paths.
func (ca *CA) WriteCA(dir, name string) (certFile, keyFile string, err error) {
	return writePair(dir, name, ca.CertPEM, ca.KeyPEM)
}

// Write writes the certificate and its key as dir/NAME.crt and
// dir/NAME.key, and returns their paths.
func (l *Leaf) Write(dir, name string) (certFile, keyFile string, err error) {
	return writePair(dir, name, l.CertPEM, l.KeyPEM)
}

// writePair writes a certificate (mode 0644) and its key (0600). Each goes
// to a temporary file first and is renamed into place, so a silo that
// re-reads them never sees half a file.
func writePair(dir, name string, certPEM, keyPEM []byte) (certFile, keyFile string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("certs: %w", err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := WriteFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := WriteFileAtomic(certFile, certPEM, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// WriteFileAtomic writes data to path through a temporary file in the
// same directory and a rename.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp, perm)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("certs: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("certs: encoding the key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("certs: serial number: %w", err)
	}
	return n, nil
}
