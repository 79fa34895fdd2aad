package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	bankpb "github.com/granaryio/granary/proto/examples/bank"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/granarytest"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// defaultTestTimeout bounds every test: a test that needs it has failed.
const defaultTestTimeout = 10 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// TestRun tells the whole story and checks its key lines.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(testCtx(t), &out, t.TempDir()); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	for _, want := range []string{
		"   alice opens with 100\n",
		"   bob opens with 50\n",
		"   total 150 (conserved)\n",
		"   alice: 41 ledger writes, at most 1 request inside the account at a time\n",
		"   bob: 41 ledger writes, at most 1 request inside the account at a time\n",
		"   transfer of 1000 alice→bob refused: FailedPrecondition: insufficient funds: balance 100, asked 1000\n",
		"   balances unchanged\n",
		"   audit of alice against bob refused: Aborted: granary: deadlock: call chain bank.Account/alice → bank.Account/bob → bank.Account/alice",
		"   failed fast: under 1s, not after the 30s response timeout\n",
		"6. authorization\n   bob withdrawing from alice refused: PermissionDenied: bob may not withdraw from alice's account\n",
		"   bob transferring alice→bob refused: PermissionDenied (the withdrawal runs as bob)\n",
		"   anonymous balance read refused: Unauthenticated\n",
		"7. graceful stop\n   silo stopped\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out.String())
	}
}

// TestRunKeepsBalances: a second run on the same data directory finds the
// accounts open with the balances the first left, and tells the rest of
// the story from them.
func TestRunKeepsBalances(t *testing.T) {
	dir := t.TempDir()
	var first, second bytes.Buffer
	if err := run(testCtx(t), &first, dir); err != nil {
		t.Fatalf("first run: %v\n%s", err, first.String())
	}
	if err := run(testCtx(t), &second, dir); err != nil {
		t.Fatalf("second run: %v\n%s", err, second.String())
	}
	for _, want := range []string{
		"   alice is open already, with 100 kept from an earlier run\n",
		"   bob is open already, with 50 kept from an earlier run\n",
		"   total 150 (conserved)\n",
		"   alice: 40 ledger writes, at most 1 request inside the account at a time\n",
	} {
		if !strings.Contains(second.String(), want) {
			t.Errorf("second run's output lacks %q", want)
		}
	}
	if strings.Contains(second.String(), "opens with") {
		t.Error("the second run opened the accounts again")
	}
	if t.Failed() {
		t.Logf("second run:\n%s", second.String())
	}
}

// newTestBank starts a cluster of one silo hosting the bank's grains,
// with filters, and returns a Caller through it; the cluster stops when
// the test ends.
func newTestBank(t *testing.T, l *ledger, filters ...grain.IncomingFilter) grain.Caller {
	t.Helper()
	c := granarytest.New(t, registerBank(l), granarytest.Configure(func(cfg *silo.Config) {
		cfg.IncomingFilters = filters
	}))
	return c.Caller()
}

// registerBank registers the bank's grain types as startSilo does, their
// grains recording to l.
func registerBank(l *ledger) granarytest.Option {
	return granarytest.Register(func(s *silo.Silo) error {
		if err := bankpb.RegisterAccountGrain(s, newAccount(l), grain.WithState(balanceState)); err != nil {
			return err
		}
		return bankpb.RegisterTransferGrain(s, newTransfer)
	})
}

// TestAccountRefuses: bad amounts and overdrafts fail with their codes and
// change nothing.
func TestAccountRefuses(t *testing.T) {
	l := newLedger()
	s := newTestBank(t, l)
	ctx := testCtx(t)
	acct := bankpb.NewAccountRef(s, "carol")
	if _, err := acct.Deposit(ctx, &bankpb.DepositRequest{Amount: 10}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"deposit 0", func() error {
			_, err := acct.Deposit(ctx, &bankpb.DepositRequest{Amount: 0})
			return err
		}, codes.InvalidArgument, "amount must be positive, got 0"},
		{"deposit -5", func() error {
			_, err := acct.Deposit(ctx, &bankpb.DepositRequest{Amount: -5})
			return err
		}, codes.InvalidArgument, "amount must be positive, got -5"},
		{"withdraw -1", func() error {
			_, err := acct.Withdraw(ctx, &bankpb.WithdrawRequest{Amount: -1})
			return err
		}, codes.InvalidArgument, "amount must be positive, got -1"},
		{"overdraft", func() error {
			_, err := acct.Withdraw(ctx, &bankpb.WithdrawRequest{Amount: 11})
			return err
		}, codes.FailedPrecondition, "insufficient funds: balance 10, asked 11"},
		{"audit without peer", func() error {
			_, err := acct.Audit(ctx, &bankpb.AuditRequest{})
			return err
		}, codes.InvalidArgument, "audit of carol: no peer account"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if st := status.Convert(err); st.Code() != tc.code || st.Message() != tc.msg {
				t.Fatalf("got %v, want %s: %s", err, tc.code, tc.msg)
			}
		})
	}
	bal, err := acct.GetBalance(ctx, &bankpb.GetBalanceRequest{})
	if err != nil || bal.GetAmount() != 10 {
		t.Fatalf("balance %v, %v; want 10", bal, err)
	}
	if writes, _ := l.stats("carol"); writes != 1 {
		t.Fatalf("%d ledger writes, want 1", writes)
	}
}

// TestTransferCompensates: when the deposit fails, the transfer puts the
// money back where it came from and returns the deposit's error.
func TestTransferCompensates(t *testing.T) {
	closed := func(ctx grain.Context, m *grain.MethodDesc, req proto.Message, next grain.Invocation) (proto.Message, error) {
		if ctx.ID().Key == "closed" && m.Name == "Deposit" {
			return nil, grain.Errorf(codes.FailedPrecondition, "account closed")
		}
		return next(ctx, req)
	}
	l := newLedger()
	s := newTestBank(t, l, closed)
	ctx := testCtx(t)
	if _, err := bankpb.NewAccountRef(s, "dave").Deposit(ctx, &bankpb.DepositRequest{Amount: 10}); err != nil {
		t.Fatal(err)
	}
	_, err := bankpb.NewTransferRef(s, 1).Run(ctx, &bankpb.TransferRequest{From: "dave", To: "closed", Amount: 4})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || st.Message() != "account closed" {
		t.Fatalf("transfer: got %v, want the deposit's FailedPrecondition", err)
	}
	bal, err := bankpb.NewAccountRef(s, "dave").GetBalance(ctx, &bankpb.GetBalanceRequest{})
	if err != nil || bal.GetAmount() != 10 {
		t.Fatalf("dave's balance %v, %v; want 10 after the refund", bal, err)
	}
	// Opening deposit, withdrawal, refund.
	if writes, _ := l.stats("dave"); writes != 3 {
		t.Fatalf("dave: %d ledger writes, want 3", writes)
	}
}
