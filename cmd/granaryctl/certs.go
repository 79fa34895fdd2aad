package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/granaryio/granary/security/certs"
	"github.com/spf13/cobra"
)

// The CA's files in the output directory: certs reuses them when both are
// there.
const (
	caBaseName    = "ca"
	defaultCAName = "granary-ca"
)

// certsOptions are the flags of granaryctl certs.
type certsOptions struct {
	out       string
	silos     []string // NAME[,SAN,...]
	clients   []string
	ips       []string
	localhost bool
	caName    string
	validity  time.Duration
}

func newCertsCmd() *cobra.Command {
	o := &certsOptions{}
	cmd := &cobra.Command{
		Use:   "certs --out DIR [--silo NAME[,SAN...]]... [--client NAME]... [--ip IP]... [--localhost]",
		Short: "Make a CA and certificates for silos and clients (needs no openssl)",
		Long: `certs writes a cluster's certificates into DIR: the CA (ca.crt, ca.key),
made on the first run and reused from DIR afterwards, and for each --silo
and --client a certificate NAME.crt signed by it with its key NAME.key.
Keys are written with mode 0600.

A silo's certificate is for both server and client use (a silo serves and
dials its peers), valid for the DNS name NAME, the other names given after
it (an IP address among them is taken as an IP), every --ip, and with
--localhost, localhost, 127.0.0.1 and ::1. A client's certificate is for
client use only; its name is the principal it authenticates as, e.g. an
admin's with the admin server's admin client certificates.

Point the silos' *.tls.ca_file at ca.crt and their cert_file and key_file
at their own pair, and granaryctl's --tls-ca, --tls-cert and --tls-key at
ca.crt and a client's pair. Keep ca.key off the silos.`,
		Example: `  granaryctl certs --out ./certs --silo silo-0,silo-0.granary --silo silo-1 --client ops --localhost`,
		Args:    noArgs,
		// certs speaks to no admin server: the root's flag resolution
		// does not apply.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if err := o.run(cmd.OutOrStdout()); err != nil {
				return &failure{err}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.out, "out", "", "directory to write the CA and certificates into (required)")
	f.StringArrayVar(&o.silos, "silo", nil, "a silo's certificate: NAME, then any more DNS names or IPs, comma-separated (repeatable)")
	f.StringArrayVar(&o.clients, "client", nil, "a client certificate for the principal NAME (repeatable)")
	f.StringArrayVar(&o.ips, "ip", nil, "an IP address every silo certificate is valid for (repeatable)")
	f.BoolVar(&o.localhost, "localhost", false, "make silo certificates valid for localhost, 127.0.0.1 and ::1 too")
	f.StringVar(&o.caName, "ca-name", defaultCAName, "the common name of a new CA")
	f.DurationVar(&o.validity, "validity", certs.DefaultLeafValidity, "how long the certificates are valid, e.g. 8760h")
	return cmd
}

// check validates the flags: a usage error names the bad one.
func (o *certsOptions) check() error {
	if o.out == "" {
		return errors.New("certs: --out DIR is required")
	}
	if o.validity <= 0 {
		return fmt.Errorf("certs: --validity %v: must be positive", o.validity)
	}
	if len(o.silos) == 0 && len(o.clients) == 0 {
		return errors.New("certs: give at least one --silo or --client")
	}
	seen := map[string]string{caBaseName: "the CA"}
	name := func(flag, n string) error {
		switch {
		case n == "":
			return fmt.Errorf("certs: %s: an empty name", flag)
		case strings.ContainsAny(n, `/\ `) || strings.HasPrefix(n, ".") || strings.ContainsFunc(n, func(r rune) bool { return r < 0x21 || r > 0x7e }):
			return fmt.Errorf("certs: %s %q: a name is printable ASCII without '/', '\\' or spaces, not starting with '.'", flag, n)
		}
		if prev, dup := seen[n]; dup {
			return fmt.Errorf("certs: %s %q: the name is taken by %s; every file is NAME.crt", flag, n, prev)
		}
		seen[n] = flag
		return nil
	}
	for _, s := range o.silos {
		if err := name("--silo", strings.Split(s, ",")[0]); err != nil {
			return err
		}
		for _, san := range strings.Split(s, ",")[1:] {
			if san == "" || strings.ContainsAny(san, " /") {
				return fmt.Errorf("certs: --silo %q: %q is not a DNS name or IP", s, san)
			}
		}
	}
	for _, c := range o.clients {
		if err := name("--client", c); err != nil {
			return err
		}
	}
	for _, ip := range o.ips {
		if net.ParseIP(ip) == nil {
			return fmt.Errorf("certs: --ip %q is not an IP address", ip)
		}
	}
	return nil
}

// run writes the CA (unless one is in o.out) and the certificates, and
// says what it wrote on out.
func (o *certsOptions) run(out io.Writer) error {
	ca, err := o.ca(out)
	if err != nil {
		return err
	}
	for _, s := range o.silos {
		parts := strings.Split(s, ",")
		lo := certs.LeafOptions{CommonName: parts[0], Usage: certs.ServerAuth | certs.ClientAuth, ValidFor: o.validity}
		addSAN := func(san string) {
			if ip := net.ParseIP(san); ip != nil {
				lo.IPs = append(lo.IPs, ip)
			} else {
				lo.DNSNames = append(lo.DNSNames, san)
			}
		}
		for _, san := range parts {
			addSAN(san)
		}
		for _, ip := range o.ips {
			addSAN(ip)
		}
		if o.localhost {
			for _, san := range []string{"localhost", "127.0.0.1", "::1"} {
				addSAN(san)
			}
		}
		if err := o.issue(out, ca, lo, "silo (server and client)"); err != nil {
			return err
		}
	}
	for _, c := range o.clients {
		lo := certs.LeafOptions{CommonName: c, Usage: certs.ClientAuth, ValidFor: o.validity}
		if err := o.issue(out, ca, lo, "client"); err != nil {
			return err
		}
	}
	return nil
}

// ca loads the CA in o.out, or makes and writes one when there is none.
// Half a CA (a certificate without its key, or the reverse) is an error:
// a new CA beside it would leave the silos trusting the wrong one.
func (o *certsOptions) ca(out io.Writer) (*certs.CA, error) {
	certFile := filepath.Join(o.out, caBaseName+".crt")
	keyFile := filepath.Join(o.out, caBaseName+".key")
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := certs.LoadCA(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "using the CA %q of %s and %s\n", ca.Cert.Subject.CommonName, certFile, keyFile)
		return ca, nil
	case certErr == nil || keyErr == nil:
		return nil, fmt.Errorf("certs: %s holds only one of %s and %s; restore the other, or remove both to make a new CA", o.out, certFile, keyFile)
	case !errors.Is(certErr, os.ErrNotExist):
		return nil, fmt.Errorf("certs: %w", certErr)
	}
	ca, err := certs.NewCA(o.caName, 0)
	if err != nil {
		return nil, err
	}
	if _, _, err := ca.WriteCA(o.out, caBaseName); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "wrote %s and %s: a new CA %q, valid until %s; keep ca.key off the silos\n",
		certFile, keyFile, o.caName, ca.Cert.NotAfter.UTC().Format(time.DateOnly))
	return ca, nil
}

// issue signs and writes one certificate, and says so on out.
func (o *certsOptions) issue(out io.Writer, ca *certs.CA, lo certs.LeafOptions, kind string) error {
	leaf, err := ca.Issue(lo)
	if err != nil {
		return err
	}
	certFile, keyFile, err := leaf.Write(o.out, lo.CommonName)
	if err != nil {
		return err
	}
	var sans []string
	for _, d := range lo.DNSNames {
		sans = append(sans, "DNS:"+d)
	}
	for _, ip := range lo.IPs {
		sans = append(sans, "IP:"+ip.String())
	}
	desc := ""
	if len(sans) > 0 {
		desc = " for " + strings.Join(sans, ", ")
	}
	fmt.Fprintf(out, "wrote %s and %s: %s certificate %q%s, valid until %s\n",
		certFile, keyFile, kind, lo.CommonName, desc, leaf.Cert.NotAfter.UTC().Format(time.DateOnly))
	return nil
}
