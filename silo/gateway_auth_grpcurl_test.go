package silo

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/granaryio/granary/internal/proctest"
	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/security/certs"
	"github.com/granaryio/granary/security/tlsfiles"
)

// runGrpcurl runs grpcurl with args, for at most defaultTestTimeout, and
// returns its output and whether it exited 0.
func runGrpcurl(t *testing.T, bin string, args ...string) (stdout, stderr string, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("grpcurl %q did not finish within %v", args, defaultTestTimeout)
	case err != nil && !errors.As(err, &exit):
		t.Fatalf("grpcurl %q: %v", args, err)
	}
	return out.String(), errb.String(), err == nil
}

// TestGRPCurlReachesMTLSGatewayOnlyWithClientCert: grpcurl, with nothing
// but the CA and a client certificate, lists the services of an mtls
// gateway by reflection and calls a grain, which sees the certificate's
// common name as its principal. Without a certificate, or in plaintext,
// it gets nowhere. Without grpcurl (see proctest.Grpcurl) the test is
// skipped, or fails when GRANARY_TEST_GRPCURL_REQUIRED=1.
func TestGRPCurlReachesMTLSGatewayOnlyWithClientCert(t *testing.T) {
	t.Parallel()
	bin := proctest.Grpcurl(t)
	pki := newTestPKI(t)
	_, gw := authGateway(t, []string{"gw"}, pki.serverCreds(tlsfiles.MTLS), auth.ClientCert())
	cert, key := pki.issue("alice", certs.ClientAuth)
	tlsArgs := []string{"-cacert", pki.caFile, "-cert", cert, "-key", key}

	out, errOut, ok := runGrpcurl(t, bin, append(tlsArgs, gw.GatewayAddr(), "list")...)
	if !ok || !strings.Contains(out, "probe.Probe") {
		t.Fatalf("grpcurl list: ok %v\nstdout:\n%s\nstderr:\n%s", ok, out, errOut)
	}
	call := []string{"-H", "granary-key: k1", "-H", "granary-principal: root", "-d", `{"tag": "hello"}`, gw.GatewayAddr(), "probe.Probe/Call"}
	out, errOut, ok = runGrpcurl(t, bin, append(tlsArgs, call...)...)
	if !ok || !strings.Contains(out, `"k1 principal=alice"`) {
		t.Fatalf("grpcurl call with a certificate: ok %v, want the grain to see principal alice (not the root the client claimed)\nstdout:\n%s\nstderr:\n%s", ok, out, errOut)
	}

	for name, args := range map[string][]string{
		"without a certificate": {"-cacert", pki.caFile},
		"in plaintext":          {"-plaintext"},
	} {
		// grpcurl keeps retrying a connection that fails; a refused one
		// must not run into the test's timeout.
		args = append(args, "-connect-timeout", "2", "-max-time", "3")
		out, errOut, ok := runGrpcurl(t, bin, append(args, call...)...)
		if ok {
			t.Errorf("grpcurl %s reached the grain:\n%s", name, out)
		} else {
			t.Logf("grpcurl %s: %s", name, strings.TrimSpace(errOut))
		}
	}
}
