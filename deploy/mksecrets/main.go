// Command mksecrets makes the secrets of the compose cluster
// (deploy/compose.yaml) and of the chaos test (make e2e): its
// certificates, by running granaryctl certs, its tokens and its gossip
// key. make certs runs it:
//
//	go run ./deploy/mksecrets -dir deploy/secrets -granaryctl bin/granaryctl
//
// It writes, under -dir (mode 0700, git-ignored):
//
//	pki/                  granaryctl certs --out: ca.crt, ca.key, one pair
//	                      per silo (NAME.crt, NAME.key) and operator.crt,
//	                      operator.key, an admin client certificate
//	admin-tokens          "TOKEN operator": the admin token (admin.token_file)
//	gateway-tokens        "TOKEN client": a gateway token (gateway.auth.token_file)
//	cluster.env           GRANARY_CLUSTER_SECRET_KEY=..., the gossip key
//	                      (compose's env_file)
//	silo-a/ silo-b/ ...   what each silo mounts read-only at /etc/granary:
//	                      ca.crt, tls.crt, tls.key, admin-tokens, gateway-tokens
//
// The silos run as user 65532, so the files of a silo's directory are
// readable by all (0644); the directory -dir itself is the owner's alone
// (0700), which keeps every other user of the host out. ca.key never
// leaves pki/.
//
// What exists is kept: the tokens, the gossip key and the CA. A silo's
// certificate is issued again when it is missing, is not signed by the
// CA in pki/, lacks one of the names it needs, or expires within
// -renew-within; -renew issues them all again. The names are each silo's
// compose service name, localhost, 127.0.0.1 and ::1, and
// GRANARY_PUBLISH_HOST when set (compose publishes the ports there).
// Every file is written to a temporary name and renamed, so running silos,
// which re-read their files when they change, never see half of one.
package main

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/granaryio/granary/security/certs"
)

// The layout of -dir; deploy/compose.yaml and deploy/e2e name these
// files too.
const (
	pkiDir        = "pki"
	caCert        = "ca.crt"
	adminTokens   = "admin-tokens"
	gatewayTokens = "gateway-tokens"
	clusterEnv    = "cluster.env"
	siloCert      = "tls.crt"
	siloKey       = "tls.key"
	operator      = "operator"
	// The principals of the tokens made.
	adminPrincipal   = "operator"
	gatewayPrincipal = "client"
	// secretKeyEnv is the variable of the gossip key.
	secretKeyEnv = "GRANARY_CLUSTER_SECRET_KEY"
	// publishHostEnv is where compose publishes the silos' ports.
	publishHostEnv = "GRANARY_PUBLISH_HOST"
)

// options are the program's flags.
type options struct {
	dir         string
	granaryctl  string
	silos       []string
	publishHost string
	renew       bool
	renewWithin time.Duration
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("mksecrets", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var silos string
	fs.StringVar(&o.dir, "dir", "deploy/secrets", "the `directory` to write into")
	fs.StringVar(&o.granaryctl, "granaryctl", "granaryctl", "the granaryctl `executable` that makes the certificates")
	fs.StringVar(&silos, "silos", "silo-a,silo-b,silo-c", "the silos, comma-separated: their compose service `names`")
	fs.StringVar(&o.publishHost, "publish-host", os.Getenv(publishHostEnv), "the host `address` the ports are published on, besides 127.0.0.1 (default: $"+publishHostEnv+")")
	fs.BoolVar(&o.renew, "renew", false, "issue every silo and operator certificate again")
	fs.DurationVar(&o.renewWithin, "renew-within", 30*24*time.Hour, "issue a certificate again when it expires within this `duration`")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.dir == "" {
		return options{}, errors.New("-dir: empty")
	}
	for s := range strings.SplitSeq(silos, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.silos = append(o.silos, s)
		}
	}
	if len(o.silos) == 0 {
		return options{}, errors.New("-silos: no silo named")
	}
	if strings.ContainsAny(o.publishHost, " /,") {
		return options{}, fmt.Errorf("-publish-host %q: not a host name or IP address", o.publishHost)
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mksecrets:", err)
		os.Exit(2)
	}
	issue := func(args []string) error {
		cmd := exec.Command(o.granaryctl, args...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %s: %w", o.granaryctl, strings.Join(args, " "), err)
		}
		return nil
	}
	if err := run(o, issue, time.Now(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mksecrets:", err)
		os.Exit(1)
	}
}

// run makes what is missing under o.dir; issue runs granaryctl with args.
func run(o options, issue func(args []string) error, now time.Time, out io.Writer) error {
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return err
	}
	// An existing directory may be more open: the silos' keys are
	// readable by all inside it.
	if err := os.Chmod(o.dir, 0o700); err != nil {
		return err
	}
	pki := filepath.Join(o.dir, pkiDir)
	if args := certsArgs(o, pki, now); args != nil {
		if err := issue(args); err != nil {
			return err
		}
	}
	for _, t := range []struct{ file, principal, what string }{
		{adminTokens, adminPrincipal, "admin token"},
		{gatewayTokens, gatewayPrincipal, "gateway token"},
	} {
		if err := keepOrWrite(filepath.Join(o.dir, t.file), out, t.what, func() (string, error) {
			tok, err := randomBase64(32, base64.RawURLEncoding)
			return fmt.Sprintf("# %s: TOKEN PRINCIPAL (made by deploy/mksecrets)\n%s %s\n", t.what, tok, t.principal), err
		}); err != nil {
			return err
		}
	}
	if err := keepOrWrite(filepath.Join(o.dir, clusterEnv), out, "gossip key", func() (string, error) {
		key, err := randomBase64(32, base64.StdEncoding)
		return fmt.Sprintf("# The gossip encryption key of the compose cluster (made by deploy/mksecrets).\n%s=%s\n", secretKeyEnv, key), err
	}); err != nil {
		return err
	}
	for _, s := range o.silos {
		if err := assemble(o.dir, s); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "secrets of %s are in %s; each silo mounts %s/SILO\n", strings.Join(o.silos, ", "), o.dir, o.dir)
	return nil
}

// sans are the names silo's certificate must hold, besides the ones
// --localhost adds.
func sans(o options, silo string) []string {
	out := []string{silo}
	if o.publishHost != "" && o.publishHost != "127.0.0.1" && o.publishHost != "localhost" {
		out = append(out, o.publishHost)
	}
	return out
}

// certsArgs returns the arguments of granaryctl certs that issue the
// certificates, or nil when every one in pki is good.
func certsArgs(o options, pki string, now time.Time) []string {
	args := []string{"certs", "--out", pki, "--localhost"}
	fresh := !o.renew
	for _, s := range o.silos {
		names := sans(o, s)
		args = append(args, "--silo", strings.Join(names, ","))
		if fresh && certProblem(pki, s, append(names, "localhost", "127.0.0.1"), now.Add(o.renewWithin)) != nil {
			fresh = false
		}
	}
	args = append(args, "--client", operator)
	if fresh && certProblem(pki, operator, nil, now.Add(o.renewWithin)) != nil {
		fresh = false
	}
	if fresh {
		return nil
	}
	return args
}

// certProblem says why pki's certificate of name is not good until
// until: missing, without its key, not signed by pki's CA, or lacking one
// of names (DNS names or IPs). nil when it is good.
func certProblem(pki, name string, names []string, until time.Time) error {
	ca, err := readCert(filepath.Join(pki, caCert))
	if err != nil {
		return err
	}
	c, err := readCert(filepath.Join(pki, name+".crt"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(pki, name+".key")); err != nil {
		return err
	}
	if err := c.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("%s.crt: not signed by %s: %w", name, caCert, err)
	}
	if c.NotAfter.Before(until) {
		return fmt.Errorf("%s.crt: expires %v", name, c.NotAfter)
	}
	for _, n := range names {
		if err := c.VerifyHostname(n); err != nil {
			return fmt.Errorf("%s.crt: %w", name, err)
		}
	}
	return nil
}

// readCert reads the first certificate of the PEM file at path.
func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", path)
	}
	return x509.ParseCertificate(b.Bytes)
}

// keepOrWrite writes make's content to path with mode 0600 unless a
// file is there.
func keepOrWrite(path string, out io.Writer, what string, make func() (string, error)) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	content, err := make()
	if err != nil {
		return err
	}
	if err := certs.WriteFileAtomic(path, []byte(content), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s: a new %s\n", path, what)
	return nil
}

// randomBase64 returns n random bytes in enc.
func randomBase64(n int, enc *base64.Encoding) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return enc.EncodeToString(b), nil
}

// assemble fills silo's directory with what it mounts: the CA bundle,
// its certificate and key, and the token files. Only files that changed
// are written again, so a silo re-reads only what is new.
func assemble(dir, silo string) error {
	sd := filepath.Join(dir, silo)
	if err := os.MkdirAll(sd, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(sd, 0o755); err != nil {
		return err
	}
	pki := filepath.Join(dir, pkiDir)
	for _, f := range []struct{ from, to string }{
		{filepath.Join(pki, caCert), caCert},
		{filepath.Join(pki, silo+".crt"), siloCert},
		{filepath.Join(pki, silo+".key"), siloKey},
		{filepath.Join(dir, adminTokens), adminTokens},
		{filepath.Join(dir, gatewayTokens), gatewayTokens},
	} {
		data, err := os.ReadFile(f.from)
		if err != nil {
			return err
		}
		to := filepath.Join(sd, f.to)
		if old, err := os.ReadFile(to); err == nil && bytes.Equal(old, data) {
			if err := os.Chmod(to, 0o644); err != nil {
				return err
			}
			continue
		}
		if err := certs.WriteFileAtomic(to, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
