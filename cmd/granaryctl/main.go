package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK      = 0 // the command did what it was asked
	exitFailure = 1 // the admin API failed or could not be reached
	exitUsage   = 2 // bad flags or arguments
)

// Defaults of the global flags.
const (
	defaultAdmin   = "localhost:8080"
	defaultTimeout = 10 * time.Second
	adminEnv       = "GRANARY_ADMIN"
	tlsCAEnv       = "GRANARY_TLS_CA"
	tlsCertEnv     = "GRANARY_TLS_CERT"
	tlsKeyEnv      = "GRANARY_TLS_KEY"
	tokenFileEnv   = "GRANARY_TOKEN_FILE"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// run runs granaryctl with args, writing to stdout and stderr, and returns
// its exit code. getenv reads the environment.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	root := newRootCmd(getenv)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	var f *failure
	if errors.As(err, &f) {
		fmt.Fprintf(stderr, "granaryctl: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stderr, "granaryctl: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
	return exitUsage
}

// A failure is an error of the admin API or of reaching it, as opposed to a
// usage error: run exits with exitFailure for it.
type failure struct{ err error }

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// options are the global flags, resolved by the root command's
// PersistentPreRunE before any subcommand runs.
type options struct {
	getenv func(string) string
	admin  string
	// adminFrom names where admin came from, for error messages: the
	// flag, or the environment variable.
	adminFrom string
	timeout   time.Duration
	output    string
	// The TLS files and the token file, from flags or the environment.
	tlsCA, tlsCert, tlsKey, tokenFile string
	// client speaks to the admin API, made by resolve on its own
	// transport, whose idle connections call closes.
	client    *adminapi.Client
	transport *http.Transport
}

// Output formats of --output.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// newRootCmd returns the granaryctl command tree. getenv reads the
// environment (GRANARY_ADMIN).
func newRootCmd(getenv func(string) string) *cobra.Command {
	o := &options{getenv: getenv}
	root := &cobra.Command{
		Use:   "granaryctl",
		Short: "Inspect and operate a Granary cluster through a silo's admin API",
		Long: `granaryctl speaks to the admin HTTP API of one silo, which answers for
the whole cluster: it gathers the other members' reports, looks grains up
in the directory and forwards requests to the silo concerned.`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return o.resolve(cmd) },
	}
	root.CompletionOptions.DisableDefaultCmd = true
	flags := root.PersistentFlags()
	flags.StringVar(&o.admin, "admin", defaultAdmin,
		"admin address of a silo: host:port or an http(s) URL (env "+adminEnv+")")
	flags.DurationVar(&o.timeout, "timeout", defaultTimeout, "how long to wait for the admin API's answer")
	flags.StringVarP(&o.output, "output", "o", outputTable, "output format: table or json")
	flags.StringVar(&o.tlsCA, "tls-ca", "",
		"PEM file of the CA the admin server's certificate must chain to; speaks https (env "+tlsCAEnv+")")
	flags.StringVar(&o.tlsCert, "tls-cert", "",
		"PEM file of a client certificate to present (an admin certificate); speaks https (env "+tlsCertEnv+")")
	flags.StringVar(&o.tlsKey, "tls-key", "", "PEM file of --tls-cert's key (env "+tlsKeyEnv+")")
	flags.StringVar(&o.tokenFile, "token-file", "",
		"file holding the admin token: the token alone, or a silo's TOKEN PRINCIPAL lines, whose first is used (env "+tokenFileEnv+")")

	root.AddCommand(
		newStatusCmd(o),
		newSilosCmd(o),
		newGrainsCmd(o),
		newLookupCmd(o),
		newDeactivateCmd(o),
		newDrainCmd(o),
		newStreamsCmd(o),
		newCertsCmd(),
	)
	return root
}

// resolve applies the environment to the flags not given and checks them.
func (o *options) resolve(cmd *cobra.Command) error {
	o.adminFrom = "--admin"
	if !cmd.Flags().Changed("admin") {
		if env := o.getenv(adminEnv); env != "" {
			o.admin, o.adminFrom = env, adminEnv
		}
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout %v: must be positive", o.timeout)
	}
	if o.output != outputTable && o.output != outputJSON {
		return fmt.Errorf("--output %q: want table or json", o.output)
	}
	caFrom := o.fromEnv(cmd, "tls-ca", tlsCAEnv, &o.tlsCA)
	certFrom := o.fromEnv(cmd, "tls-cert", tlsCertEnv, &o.tlsCert)
	keyFrom := o.fromEnv(cmd, "tls-key", tlsKeyEnv, &o.tlsKey)
	tokenFrom := o.fromEnv(cmd, "token-file", tokenFileEnv, &o.tokenFile)

	o.transport = http.DefaultTransport.(*http.Transport).Clone()
	var tlsConfig *tls.Config
	if o.tlsCA != "" || o.tlsCert != "" || o.tlsKey != "" {
		if (o.tlsCert == "") != (o.tlsKey == "") {
			return fmt.Errorf("%s and %s: a client certificate needs its key and a key its certificate; give both or neither", certFrom, keyFrom)
		}
		src, err := tlsfiles.Load(tlsfiles.Files{CA: o.tlsCA, Cert: o.tlsCert, Key: o.tlsKey}, tlsfiles.Options{})
		if err != nil {
			return fmt.Errorf("%s, %s, %s: %w", caFrom, certFrom, keyFrom, err)
		}
		// The admin server's certificate must be for the host named by
		// --admin, an IP address included.
		tlsConfig = src.ClientConfig(tlsfiles.ClientOptions{ServerName: adminHost(o.admin), NextProtos: []string{"h2", "http/1.1"}})
		o.transport.TLSClientConfig = tlsConfig
		// A TLSClientConfig of our own turns HTTP/2 off unless asked.
		o.transport.ForceAttemptHTTP2 = true
	}
	var token string
	if o.tokenFile != "" {
		var err error
		if token, err = auth.ReadToken(o.tokenFile); err != nil {
			return fmt.Errorf("%s %s: %w", tokenFrom, o.tokenFile, err)
		}
	}
	c, err := adminapi.NewClientWith(o.admin, adminapi.ClientOptions{
		HTTPClient: &http.Client{Transport: o.transport},
		TLS:        tlsConfig,
		Token:      token,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", o.adminFrom, err)
	}
	if token != "" && strings.HasPrefix(c.URL(), "http://") {
		fmt.Fprintf(cmd.ErrOrStderr(), "granaryctl: warning: sending the admin token over plain HTTP to %s; give --tls-ca to speak https\n", c.URL())
	}
	o.client = c
	return nil
}

// fromEnv sets *value from the environment variable env when the flag was
// not given, and returns where the value came from, for error messages.
func (o *options) fromEnv(cmd *cobra.Command, flag, env string, value *string) string {
	if cmd.Flags().Changed(flag) {
		return "--" + flag
	}
	if v := o.getenv(env); v != "" {
		*value = v
		return env
	}
	return "--" + flag
}

// adminHost is the host of an admin address, host:port or a URL; "" when
// it has none, which the admin client then refuses.
func adminHost(addr string) string {
	if strings.Contains(addr, "://") {
		if u, err := url.Parse(addr); err == nil {
			return u.Hostname()
		}
		return ""
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// call runs f with a client of the admin API and a context bounded by
// --timeout, and turns its error into a failure naming the admin address.
func (o *options) call(cmd *cobra.Command, f func(ctx context.Context, c *adminapi.Client) error) error {
	defer o.transport.CloseIdleConnections()
	c := o.client
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	err := f(ctx, c)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return &failure{fmt.Errorf("admin %s: no answer within --timeout %v: %w", c.URL(), o.timeout, err)}
	case strings.Contains(err.Error(), "HTTP request to an HTTPS server"):
		return &failure{fmt.Errorf("admin %s: %w (the admin server serves HTTPS: give --tls-ca, or %s, with its CA)", c.URL(), err, tlsCAEnv)}
	default:
		return &failure{fmt.Errorf("admin %s: %w", c.URL(), err)}
	}
}

// printJSON writes v as indented JSON to the command's output.
func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
