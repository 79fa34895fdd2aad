package silo

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/security/certs"
	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/granaryio/granary/silo/grpcapi"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Tokens of the tests' token files: alice's, bob's, root's.
const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef"
	rootToken  = "root-token-0123456789abcdef"
)

// testPKI is a CA in a temporary directory that issues the tests'
// certificates, all valid for 127.0.0.1.
type testPKI struct {
	t   *testing.T
	dir string
	ca  *certs.CA
	// caFile is the CA's certificate, the bundle both sides trust.
	caFile string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := certs.NewCA("granary test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile, _, err := ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{t: t, dir: dir, ca: ca, caFile: caFile}
}

// issue issues a certificate for cn and returns its files.
func (p *testPKI) issue(cn string, usage certs.Usage) (certFile, keyFile string) {
	p.t.Helper()
	leaf, err := p.ca.Issue(certs.LeafOptions{CommonName: cn, IPs: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}, Usage: usage})
	if err != nil {
		p.t.Fatal(err)
	}
	certFile, keyFile, err = leaf.Write(p.dir, cn)
	if err != nil {
		p.t.Fatal(err)
	}
	return certFile, keyFile
}

// serverCreds are a gateway's TLS credentials in mode, from tlsfiles.
func (p *testPKI) serverCreds(mode tlsfiles.Mode) credentials.TransportCredentials {
	p.t.Helper()
	cert, key := p.issue("gateway", certs.ServerAuth)
	src, err := tlsfiles.Load(tlsfiles.Files{Cert: cert, Key: key, CA: p.caFile}, tlsfiles.Options{})
	if err != nil {
		p.t.Fatal(err)
	}
	cfg, err := src.ServerConfig(mode, tlsfiles.ServerOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	return credentials.NewTLS(cfg)
}

// clientTLS is a plain gRPC client's TLS credentials, with the
// certificate for cn when cn is not "".
func (p *testPKI) clientTLS(cn string) credentials.TransportCredentials {
	p.t.Helper()
	files := tlsfiles.Files{CA: p.caFile}
	if cn != "" {
		files.Cert, files.Key = p.issue(cn, certs.ClientAuth)
	}
	src, err := tlsfiles.Load(files, tlsfiles.Options{})
	if err != nil {
		p.t.Fatal(err)
	}
	return src.ClientCredentials(tlsfiles.ClientOptions{})
}

// writeTokens writes a token file of lines "TOKEN PRINCIPAL" to path.
func writeTokens(t *testing.T, path string, lines ...string) {
	t.Helper()
	if err := certs.WriteFileAtomic(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tokenFile writes alice's, bob's and root's tokens to a file and loads it
// on clock.
func tokenFile(t *testing.T, clock clockwork.Clock) (*auth.TokenFile, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, path, aliceToken+" alice", bobToken+" bob", rootToken+" root")
	tf, err := auth.LoadTokenFile(path, auth.TokenFileOptions{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return tf, path
}

// principalFilter adds "KEY principal=P" to each probe reply's trace: the
// principal the grain KEY saw. Replies carry the traces of the grains
// they called, so a chain of calls shows the principal at every hop.
// It refuses the tag "root-only" with PermissionDenied unless the
// principal is root.
func principalFilter(ctx grain.Context, m *grain.MethodDesc, req proto.Message, next grain.Invocation) (proto.Message, error) {
	if r, ok := req.(*probe.Request); ok && r.Tag == "root-only" && grain.Principal(ctx) != "root" {
		return nil, grain.Errorf(codes.PermissionDenied, "%s may not call %s", grain.Principal(ctx), m.Name)
	}
	resp, err := next(ctx, req)
	if r, ok := resp.(*probe.Reply); ok {
		r.Trace = append(r.Trace, ctx.ID().Key+" principal="+grain.Principal(ctx))
	}
	return resp, err
}

// sawPrincipal reports whether the grain key saw principal p in r's trace.
func sawPrincipal(r *probe.Reply, key, p string) bool {
	return slices.Contains(r.GetTrace(), key+" principal="+p)
}

// authGateway starts silos called names in an in-memory cluster; the
// first serves a gateway on a loopback port with creds and a (nil: no
// authenticator). Every silo runs principalFilter.
func authGateway(t *testing.T, names []string, creds credentials.TransportCredentials, a auth.Authenticator) (*testCluster, *Silo) {
	t.Helper()
	tc := newTestCluster(t, nil, clusterOpt{tweak: func(cfg *Config) {
		cfg.IncomingFilters = append(cfg.IncomingFilters, principalFilter)
	}})
	gw := tc.startNoWait(names[0], func(cfg *Config) {
		g := DefaultGatewayConfig()
		g.Listen = "127.0.0.1:0"
		g.Credentials = creds
		g.Authenticator = a
		cfg.Gateway = &g
	})
	for _, n := range names[1:] {
		tc.startNoWait(n, nil)
	}
	tc.waitConverged()
	return tc, gw
}

// dialGateway dials a Go client to gw with opts, closed at the end of the
// test.
func dialGateway(t *testing.T, gw *Silo, opts ...client.Option) (*client.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	c, err := client.Dial(ctx, append([]client.Option{client.WithGateways(gw.GatewayAddr())}, opts...)...)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// callProbe calls the probe grain key through c with ctx's headers.
func callProbe(ctx context.Context, c grain.Caller, key string, req *probe.Request) (*probe.Reply, error) {
	if req == nil {
		req = &probe.Request{}
	}
	ctx, cancel := context.WithTimeout(ctx, defaultTestTimeout)
	defer cancel()
	return probe.NewProbeRef(c, key).Call(ctx, req)
}

// TestGatewayAuthMTLSRefusesPlaintextAndCertlessClients: a gateway in
// mtls mode serves a client with a certificate from its CA, and refuses a
// plaintext client and a TLS client without a certificate, at the
// handshake, before any call.
func TestGatewayAuthMTLSRefusesPlaintextAndCertlessClients(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, gw := authGateway(t, []string{"gw"}, pki.serverCreds(tlsfiles.MTLS), auth.ClientCert())

	cert, key := pki.issue("alice", certs.ClientAuth)
	c, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, cert, key))
	if err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
	r, err := callProbe(context.Background(), c, "k", nil)
	if err != nil || !sawPrincipal(r, "k", "alice") {
		t.Fatalf("client with a certificate: reply %v, err %v; want the grain to see principal alice", r, err)
	}

	if _, err := dialGateway(t, gw); err == nil {
		t.Error("a plaintext client dialled an mtls gateway")
	} else {
		t.Logf("plaintext client: %v", err)
	}
	if _, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, "", "")); err == nil {
		t.Error("a client without a certificate dialled an mtls gateway")
	} else {
		t.Logf("client without a certificate: %v", err)
	}
}

// TestGatewayAuthCertlessClientUnauthenticated: a gateway in tls mode that
// authenticates by client certificate lets a client without one finish
// the handshake, then refuses its calls with Unauthenticated, counted.
func TestGatewayAuthCertlessClientUnauthenticated(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, gw := authGateway(t, []string{"gw"}, pki.serverCreds(tlsfiles.TLS), auth.ClientCert())
	before := gw.Rejections().Count(security.ListenerGateway, security.ReasonUnauthenticated)
	_, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, "", ""))
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("client without a certificate: Dial got %v, want Unauthenticated", err)
	}
	if got := gw.Rejections().Count(security.ListenerGateway, security.ReasonUnauthenticated); got <= before {
		t.Errorf("Rejections counted %d unauthenticated calls, want more than %d", got, before)
	}

	// Over plain gRPC too.
	cc := dialPlainGRPC(t, gw, pki.clientTLS(""))
	_, err = grpcProbeCall(cc, grpcCtx(t, "k"), &probe.Request{})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("plain gRPC without a certificate: got %v, want Unauthenticated", err)
	}
}

// TestGatewayAuthRevokedTokenRefused: a token removed from the token file
// is refused within the file's check interval, on the stream a client
// already has open and to a new client, with Unauthenticated.
func TestGatewayAuthRevokedTokenRefused(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	clock := clockwork.NewFakeClock()
	tf, path := tokenFile(t, clock)
	_, gw := authGateway(t, []string{"gw"}, pki.serverCreds(tlsfiles.TLS), auth.Bearer(tf))

	c, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, "", ""), client.WithToken(bobToken))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := callProbe(context.Background(), c, "k", nil); err != nil || !sawPrincipal(r, "k", "bob") {
		t.Fatalf("before revoking: reply %v, err %v; want principal bob", r, err)
	}

	writeTokens(t, path, aliceToken+" alice", rootToken+" root") // bob's is gone
	if r, err := callProbe(context.Background(), c, "k", nil); err != nil {
		t.Fatalf("before the check interval passed: %v (reply %v); the file is read at most once an interval", err, r)
	}
	clock.Advance(auth.DefaultCheckInterval)
	if _, err := callProbe(context.Background(), c, "k", nil); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("revoked token on the open stream: got %v, want Unauthenticated", err)
	}
	if _, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, "", ""), client.WithToken(bobToken)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("revoked token, new client: got %v, want Unauthenticated", err)
	}
	a, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, "", ""), client.WithToken(aliceToken))
	if err != nil {
		t.Fatalf("a token still in the file: %v", err)
	}
	if r, err := callProbe(context.Background(), a, "k", nil); err != nil || !sawPrincipal(r, "k", "alice") {
		t.Fatalf("a token still in the file: reply %v, err %v", r, err)
	}
}

// TestGatewayAuthRevokedTokenRefusedInRealTime: with the real clock and
// the default check interval, a revoked token is refused within 5 s.
func TestGatewayAuthRevokedTokenRefusedInRealTime(t *testing.T) {
	// Not parallel: it bounds, in real time, how soon a revoked token is
	// refused.
	pki := newTestPKI(t)
	tf, path := tokenFile(t, nil)
	_, gw := authGateway(t, []string{"gw"}, pki.serverCreds(tlsfiles.TLS), auth.Bearer(tf))
	c, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, "", ""), client.WithToken(bobToken))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callProbe(context.Background(), c, "k", nil); err != nil {
		t.Fatal(err)
	}
	writeTokens(t, path, aliceToken+" alice")
	testwait.For(t, 5*time.Second, "the revoked token to be refused", func() bool {
		_, err := callProbe(context.Background(), c, "k", nil)
		return status.Code(err) == codes.Unauthenticated
	})
}

// TestGatewayAuthPrincipalReachesGrain: the principal a gateway verified
// reaches the grain through the Go client's stream and through plain gRPC,
// on the gateway's silo and on another one, and flows on with the calls
// the grain makes.
func TestGatewayAuthPrincipalReachesGrain(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	tf, _ := tokenFile(t, nil)
	tc, gw := authGateway(t, []string{"gw", "b"}, pki.serverCreds(tlsfiles.TLS), auth.Chain(auth.ClientCert(), auth.Bearer(tf)))
	b := tc.silo("b")
	onGW, onB := tc.keyOn(gw), tc.keyOn(b)

	c, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, "", ""), client.WithToken(aliceToken))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{onGW, onB} {
		r, err := callProbe(context.Background(), c, k, nil)
		if err != nil || !sawPrincipal(r, k, "alice") {
			t.Errorf("Go client to %s: reply %v, err %v; want principal alice", k, r, err)
		}
	}
	// A chain gw → b → gw: the principal flows with the grains' calls.
	r, err := callProbe(context.Background(), c, onGW, &probe.Request{Path: []string{onB, onGW + "-2"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{onGW, onB, onGW + "-2"} {
		if !sawPrincipal(r, k, "alice") {
			t.Errorf("call chain: %s did not see principal alice: trace %q", k, r.GetTrace())
		}
	}

	// Plain gRPC, by token and by certificate.
	for _, tt := range []struct {
		name  string
		creds credentials.TransportCredentials
		md    []string
		want  string
	}{
		{"token", pki.clientTLS(""), []string{"authorization", "Bearer " + bobToken}, "bob"},
		{"certificate", pki.clientTLS("carol"), nil, "carol"},
	} {
		cc := dialPlainGRPC(t, gw, tt.creds)
		for _, k := range []string{onGW, onB} {
			ctx := metadata.AppendToOutgoingContext(grpcCtx(t, k), tt.md...)
			r, err := grpcProbeCall(cc, ctx, &probe.Request{})
			if err != nil || !sawPrincipal(r, k, tt.want) {
				t.Errorf("plain gRPC by %s to %s: reply %v, err %v; want principal %s", tt.name, k, r, err, tt.want)
			}
		}
	}
}

// TestGatewayAuthClientPrincipalHeaderIgnored: a principal a client sends
// itself, as a call header from the Go client or as request metadata over
// plain gRPC, never reaches the grain: it sees the principal the gateway
// verified, or none on a gateway without an authenticator.
func TestGatewayAuthClientPrincipalHeaderIgnored(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	tf, _ := tokenFile(t, nil)
	forged := grain.WithPrincipal(grain.WithHeader(context.Background(), "trace", "t1"), "root")
	forgedMD := []string{grain.PrincipalHeader, "root"}

	t.Run("authenticated", func(t *testing.T) {
		t.Parallel()
		_, gw := authGateway(t, []string{"gw"}, pki.serverCreds(tlsfiles.TLS), auth.Bearer(tf))
		c, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, "", ""), client.WithToken(aliceToken))
		if err != nil {
			t.Fatal(err)
		}
		r, err := callProbe(forged, c, "k", nil)
		if err != nil || !sawPrincipal(r, "k", "alice") || !slices.Contains(r.GetTrace(), "header=t1") {
			t.Errorf("Go client claiming root: reply %v, err %v; want principal alice and the other header kept", r, err)
		}
		if _, err := callProbe(forged, c, "k", &probe.Request{Tag: "root-only"}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("Go client claiming root, calling a root-only method: got %v, want PermissionDenied", err)
		}
		cc := dialPlainGRPC(t, gw, pki.clientTLS(""))
		ctx := metadata.AppendToOutgoingContext(grpcCtx(t, "k"), append(forgedMD, "authorization", "Bearer "+aliceToken)...)
		r, err = grpcProbeCall(cc, ctx, &probe.Request{})
		if err != nil || !sawPrincipal(r, "k", "alice") {
			t.Errorf("plain gRPC claiming root: reply %v, err %v; want principal alice", r, err)
		}
	})
	t.Run("anonymous", func(t *testing.T) {
		t.Parallel()
		_, gw := authGateway(t, []string{"gw"}, nil, nil)
		c, err := dialGateway(t, gw)
		if err != nil {
			t.Fatal(err)
		}
		r, err := callProbe(forged, c, "k", nil)
		if err != nil || !sawPrincipal(r, "k", "") {
			t.Errorf("Go client claiming root: reply %v, err %v; want no principal", r, err)
		}
		cc := dialPlainGRPC(t, gw, insecure.NewCredentials())
		r, err = grpcProbeCall(cc, metadata.AppendToOutgoingContext(grpcCtx(t, "k"), forgedMD...), &probe.Request{})
		if err != nil || !sawPrincipal(r, "k", "") {
			t.Errorf("plain gRPC claiming root: reply %v, err %v; want no principal", r, err)
		}
	})
}

// TestGatewayAuthFilterRefusalsCounted: a call a grain's filter refuses
// with PermissionDenied reaches the client with that code and is counted
// by the gateway silo's Rejections, from the Go client and plain gRPC.
func TestGatewayAuthFilterRefusalsCounted(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	tf, _ := tokenFile(t, nil)
	_, gw := authGateway(t, []string{"gw"}, pki.serverCreds(tlsfiles.TLS), auth.Bearer(tf))
	count := func() uint64 {
		return gw.Rejections().Count(security.ListenerGateway, security.ReasonPermissionDenied)
	}
	c, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, "", ""), client.WithToken(aliceToken))
	if err != nil {
		t.Fatal(err)
	}
	before := count()
	if _, err := callProbe(context.Background(), c, "k", &probe.Request{Tag: "root-only"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice calling a root-only method: got %v, want PermissionDenied", err)
	}
	if got := count(); got != before+1 {
		t.Errorf("after one refusal to the Go client, count %d, want %d", got, before+1)
	}
	root, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, "", ""), client.WithToken(rootToken))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callProbe(context.Background(), root, "k", &probe.Request{Tag: "root-only"}); err != nil {
		t.Fatalf("root calling a root-only method: %v", err)
	}
	cc := dialPlainGRPC(t, gw, pki.clientTLS(""))
	ctx := metadata.AppendToOutgoingContext(grpcCtx(t, "k"), "authorization", "Bearer "+aliceToken)
	if _, err := grpcProbeCall(cc, ctx, &probe.Request{Tag: "root-only"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("plain gRPC: got %v, want PermissionDenied", err)
	}
	if got := count(); got != before+2 {
		t.Errorf("after a refusal over plain gRPC, count %d, want %d", got, before+2)
	}
}

// TestGatewayAuthClientIDBoundToPrincipal: a stream that names the client
// ID of another principal's open stream is refused, so its calls are
// never credited to that principal; the first stream keeps working.
func TestGatewayAuthClientIDBoundToPrincipal(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	tf, _ := tokenFile(t, nil)
	_, gw := authGateway(t, []string{"gw"}, pki.serverCreds(tlsfiles.TLS), auth.Bearer(tf))
	// Alice's ID carries her principal's prefix, which every gateway
	// derives alike: no other principal can use it, at this gateway or
	// any other.
	id := ClientIDPrefix("alice") + "shared"
	alice := dialRawAuthed(t, gw, pki, id, aliceToken)
	mallory := dialRawAuthed(t, gw, pki, id, bobToken)

	if r, err := alice.call("k"); err != nil || !sawPrincipal(r, "k", "alice") {
		t.Fatalf("first stream: reply %v, err %v; want principal alice", r, err)
	}
	before := gw.Rejections().Count(security.ListenerGateway, security.ReasonPermissionDenied)
	r, err := mallory.call("k")
	if err == nil {
		t.Fatalf("a second principal's stream under a bound client ID was served: reply %v", r)
	}
	if !strings.Contains(err.Error(), "is not one of this principal's") {
		t.Errorf("second principal: got %v, want the client ID refused as another principal's", err)
	}
	if got := gw.Rejections().Count(security.ListenerGateway, security.ReasonPermissionDenied); got != before+1 {
		t.Errorf("refused streams counted %d, want %d", got, before+1)
	}
	if r, err := alice.call("k"); err != nil || !sawPrincipal(r, "k", "alice") {
		t.Fatalf("first stream afterwards: reply %v, err %v; want principal alice", r, err)
	}
}

// rawAuthed speaks the gateway's stream protocol under a client ID the
// test picks, with a bearer token.
type rawAuthed struct {
	t    *testing.T
	tp   *transport.Transport
	peer string
}

func dialRawAuthed(t *testing.T, gw *Silo, pki *testPKI, id, token string) *rawAuthed {
	t.Helper()
	cfg := transport.DefaultConfig()
	cfg.ClusterID, cfg.Self = "test", id
	n := transport.NewGRPCServiceNetwork(transport.GatewayService, cfg,
		grpc.WithTransportCredentials(pki.clientTLS("")),
		grpc.WithPerRPCCredentials(tokenCreds(token)))
	tp, err := transport.New(cfg, n, refuseCalls{})
	if err != nil {
		t.Fatal(err)
	}
	tp.SetPeer("gw", gw.GatewayAddr())
	t.Cleanup(func() { tp.Close(); n.Close() })
	return &rawAuthed{t: t, tp: tp, peer: "gw"}
}

// call calls probe.Probe/Call on the grain key.
func (rc *rawAuthed) call(key string) (*probe.Reply, error) {
	rc.t.Helper()
	payload, _ := proto.Marshal(&probe.Request{})
	env := &granaryv1.Envelope{
		Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, GrainType: "probe.Probe", GrainKey: key,
		Method: "Call", Payload: payload, TimeoutNanos: int64(defaultTestTimeout),
	}
	type answer struct {
		env *granaryv1.Envelope
		err error
	}
	out := make(chan answer, 1)
	rc.tp.Call(rc.peer, env, time.Now().Add(defaultTestTimeout), func(resp *granaryv1.Envelope, err error) {
		if resp != nil {
			resp = proto.Clone(resp).(*granaryv1.Envelope)
		}
		out <- answer{resp, err}
	})
	a := testwait.Recv(rc.t, out, defaultTestTimeout, "the gateway's answer")
	if a.err != nil {
		return nil, a.err
	}
	if err := transport.StatusOf(a.env); err != nil {
		return nil, err
	}
	r := new(probe.Reply)
	return r, proto.Unmarshal(a.env.Payload, r)
}

// tokenCreds sends a bearer token (over TLS only).
type tokenCreds string

func (tk tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(tk)}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return true }

// dialPlainGRPC dials a plain gRPC connection to gw's gateway.
func dialPlainGRPC(t *testing.T, gw *Silo, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(gw.GatewayAddr(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// grpcProbeCall calls probe.Probe/Call over plain gRPC on cc.
func grpcProbeCall(cc *grpc.ClientConn, ctx context.Context, req *probe.Request) (*probe.Reply, error) {
	r := new(probe.Reply)
	if err := cc.Invoke(ctx, "/probe.Probe/Call", req, r); err != nil {
		return nil, err
	}
	return r, nil
}

// grpcCtx is a context bounded by the test's timeout that names the
// grain key for a plain gRPC call.
func grpcCtx(t *testing.T, key string) context.Context {
	return metadata.AppendToOutgoingContext(testwait.Context(t, defaultTestTimeout), grpcapi.KeyHeader, key)
}

// TestGatewayConfigAuthenticatorNeedsTLS: an Authenticator on a plaintext
// gateway is a configuration error naming the field.
func TestGatewayConfigAuthenticatorNeedsTLS(t *testing.T) {
	t.Parallel()
	for _, creds := range []credentials.TransportCredentials{nil, insecure.NewCredentials()} {
		g := DefaultGatewayConfig()
		g.Authenticator = auth.Anonymous()
		g.Credentials = creds
		var ce *ConfigError
		if err := g.validate(); !errors.As(err, &ce) || ce.Field != "Gateway.Authenticator" {
			t.Errorf("credentials %v: validate = %v, want a ConfigError for Gateway.Authenticator", creds, err)
		}
	}
	g := DefaultGatewayConfig()
	g.Authenticator = auth.Anonymous()
	g.Credentials = newTestPKI(t).serverCreds(tlsfiles.TLS)
	if err := g.validate(); err != nil {
		t.Errorf("with TLS: %v", err)
	}
}

// TestGatewayAuthHealthCheckOpenWatchNot: load balancers' Check needs no
// credentials; Watch, which holds a stream and so its connection, does.
func TestGatewayAuthHealthCheckOpenWatchNot(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	tf, _ := tokenFile(t, nil)
	_, gw := authGateway(t, []string{"gw"}, pki.serverCreds(tlsfiles.TLS), auth.Bearer(tf))
	cc, err := grpc.NewClient(gw.GatewayAddr(), grpc.WithTransportCredentials(pki.clientTLS("")))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	hc := healthpb.NewHealthClient(cc)
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Check without credentials: %v, %v; want SERVING", r, err)
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("Watch without credentials: %v, want Unauthenticated", err)
	}
}

// TestGatewayAuthOneWayCallsRunAsTheVerifiedPrincipal: a client's one-way
// calls to an active grain run as the principal the gateway verified,
// whatever principal the client claims: a call only root may make is
// refused, and counted as a failed one-way request, when alice sends it
// claiming to be root, and runs when root sends it.
func TestGatewayAuthOneWayCallsRunAsTheVerifiedPrincipal(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	tf, _ := tokenFile(t, nil)
	tc, gw := authGateway(t, []string{"gw"}, pki.serverCreds(tlsfiles.TLS), auth.Bearer(tf))
	forged := grain.WithPrincipal(context.Background(), "root")
	told := func() int {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		return tc.told["k"]
	}
	alice, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, "", ""), client.WithToken(aliceToken))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callProbe(context.Background(), alice, "k", nil); err != nil { // active: one-way calls are posted
		t.Fatal(err)
	}
	ref := probe.NewProbeRef(alice, "k")
	if _, err := ref.Tell(forged, &probe.Request{Tag: "root-only"}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, defaultTestTimeout, "alice's root-only one-way call refused", func() bool { return gw.Stats().OneWayFailures == 1 })
	if _, err := ref.Tell(forged, &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, defaultTestTimeout, "alice's other one-way call to run", func() bool { return told() == 1 })
	root, err := dialGateway(t, gw, client.WithTLSFiles(pki.caFile, "", ""), client.WithToken(rootToken))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := probe.NewProbeRef(root, "k").Tell(context.Background(), &probe.Request{Tag: "root-only"}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, defaultTestTimeout, "root's root-only one-way call to run", func() bool { return told() == 2 })
	if n := gw.Stats().OneWayFailures; n != 1 {
		t.Errorf("%d one-way calls failed, want only alice's root-only one", n)
	}
}
