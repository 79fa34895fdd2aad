package main

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	bankpb "github.com/granaryio/granary/proto/examples/bank"
	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/security/certs"
	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/granarytest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// Bearer tokens of the test's token file.
const (
	aliceToken = "alice-0123456789abcdef"
	bobToken   = "bob-0123456789abcdef"
)

// bankGateway starts a bank silo with the authorize filter and a gateway
// on a loopback port that serves TLS and authenticates by bearer token
// (then lets the rest in anonymously when anonymous is set). It returns
// the gateway's address and the CA bundle clients trust.
func bankGateway(t *testing.T, anonymous bool) (addr, caFile string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := certs.NewCA("bank test CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	caFile, _, err = ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(certs.LeafOptions{CommonName: "bank-gateway", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Usage: certs.ServerAuth})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := leaf.Write(dir, "gateway")
	if err != nil {
		t.Fatal(err)
	}
	src, err := tlsfiles.Load(tlsfiles.Files{Cert: certFile, Key: keyFile, CA: caFile}, tlsfiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := src.ServerConfig(tlsfiles.TLS, tlsfiles.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokensFile := filepath.Join(dir, "tokens")
	if err := certs.WriteFileAtomic(tokensFile, []byte(aliceToken+" alice\n"+bobToken+" bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.LoadTokenFile(tokensFile, auth.TokenFileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	authn := auth.Bearer(tokens)
	if anonymous {
		authn = auth.Chain(authn, auth.Anonymous())
	}

	c := granarytest.New(t, granarytest.Gateway(), registerBank(newLedger()), granarytest.Configure(func(cfg *silo.Config) {
		cfg.IncomingFilters = []grain.IncomingFilter{authorize}
		cfg.Gateway.Credentials = credentials.NewTLS(tlsCfg)
		cfg.Gateway.Authenticator = authn
	}))
	return c.Silo(0).GatewayAddr(), caFile
}

// dialBank dials a Go client over TLS, with token unless it is "".
func dialBank(t *testing.T, addr, caFile, token string) (*client.Client, error) {
	t.Helper()
	opts := []client.Option{client.WithGateways(addr), client.WithTLSFiles(caFile, "", "")}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	c, err := client.Dial(testCtx(t), opts...)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// TestAuthorizationThroughGateway: Go clients with bearer tokens over TLS
// reach the accounts through a gateway, and the bank's filter decides
// with the principal the gateway verified: an anonymous caller may do
// nothing (Unauthenticated), bob may read alice's balance and deposit
// into it but not withdraw from it (PermissionDenied), and alice may.
func TestAuthorizationThroughGateway(t *testing.T) {
	addr, caFile := bankGateway(t, true)
	ctx := testCtx(t)
	alice, err := dialBank(t, addr, caFile, aliceToken)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := dialBank(t, addr, caFile, bobToken)
	if err != nil {
		t.Fatal(err)
	}
	anon, err := dialBank(t, addr, caFile, "")
	if err != nil {
		t.Fatal(err)
	}
	acct := func(c *client.Client) bankpb.AccountRef { return bankpb.NewAccountRef(c, "alice") }

	if _, err := acct(anon).GetBalance(ctx, &bankpb.GetBalanceRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("anonymous balance read: got %v, want Unauthenticated", err)
	}
	if _, err := acct(bob).Deposit(ctx, &bankpb.DepositRequest{Amount: 10}); err != nil {
		t.Fatalf("bob depositing into alice's account: %v", err)
	}
	if bal, err := acct(bob).GetBalance(ctx, &bankpb.GetBalanceRequest{}); err != nil || bal.GetAmount() != 10 {
		t.Errorf("bob reading alice's balance: %v, %v; want 10", bal, err)
	}
	if _, err := acct(bob).Withdraw(ctx, &bankpb.WithdrawRequest{Amount: 1}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("bob withdrawing from alice: got %v, want PermissionDenied", err)
	}
	if _, err := bankpb.NewTransferRef(bob, 1).Run(ctx, &bankpb.TransferRequest{From: "alice", To: "bob", Amount: 1}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("bob transferring from alice: got %v, want PermissionDenied (the withdrawal runs as bob)", err)
	}
	// A principal bob names himself is the gateway's to replace.
	if _, err := acct(bob).Withdraw(grain.WithPrincipal(ctx, "alice"), &bankpb.WithdrawRequest{Amount: 1}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("bob claiming to be alice: got %v, want PermissionDenied", err)
	}
	if bal, err := acct(alice).Withdraw(ctx, &bankpb.WithdrawRequest{Amount: 4}); err != nil || bal.GetAmount() != 6 {
		t.Errorf("alice withdrawing from her account: %v, %v; want balance 6", bal, err)
	}
	if r, err := bankpb.NewTransferRef(alice, 2).Run(ctx, &bankpb.TransferRequest{From: "alice", To: "bob", Amount: 1}); err != nil || r.GetFromBalance() != 5 {
		t.Errorf("alice transferring to bob: %v, %v; want her balance 5", r, err)
	}
}

// TestGatewayRefusesUnknownToken: a gateway without anonymous access
// refuses a client without a token, and one whose token it does not know,
// with Unauthenticated before any grain runs.
func TestGatewayRefusesUnknownToken(t *testing.T) {
	addr, caFile := bankGateway(t, false)
	for _, token := range []string{"", "mallory-0123456789abcdef"} {
		if _, err := dialBank(t, addr, caFile, token); status.Code(err) != codes.Unauthenticated {
			t.Errorf("token %q: Dial got %v, want Unauthenticated", token, err)
		}
	}
	if _, err := dialBank(t, addr, caFile, aliceToken); err != nil {
		t.Errorf("alice's token: %v", err)
	}
}
