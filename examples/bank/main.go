// Command bank tells a short story with Granary grains: two accounts, many
// concurrent transfers between them, an overdraft that is refused, and an
// audit whose calls go round in a circle, which the runtime refuses at once
// as a deadlock instead of letting it hang until the response timeout, and
// an incoming filter that lets only an account's owner withdraw from it.
//
// The story is told in-process, so its callers name their principal
// themselves (grain.WithPrincipal), as trusted code may; a client outside
// the cluster proves it to a gateway instead, with a bearer token or a
// client certificate, and authz_test.go shows the same rules through one.
//
// The balances are persistent grain state, kept in the silo's embedded
// store under the data directory (-data, default .data/bank): a later run
// finds the accounts open, with the balances the last run left. The story
// goes to stdout and, but for that first step, is the same on every run;
// the silo's and the grains' logs go to stderr. The command exits with
// status 1, naming the step, if anything turns out other than the story
// says.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/granaryio/granary/grain"
	bankpb "github.com/granaryio/granary/proto/examples/bank"
	"github.com/granaryio/granary/silo"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// opening balances of the two accounts.
	aliceOpening, bobOpening = 100, 50
	// transfersEachWay is how many transfers of 1 go each way at once.
	transfersEachWay = 20
	// fastFailure is the bound under which a refused deadlock counts as
	// failing fast; the silo's response timeout is 30 s.
	fastFailure = time.Second
	// stopTimeout bounds the graceful stop: past it the silo is closed.
	stopTimeout = 10 * time.Second
)

func main() {
	dataDir := flag.String("data", ".data/bank", "the directory of the silo's embedded store, which keeps the balances")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *dataDir); err != nil {
		fmt.Fprintln(os.Stderr, "bank:", err)
		os.Exit(1)
	}
}

// run starts a silo that keeps its state in dataDir, tells the story on
// stdout and stops the silo.
func run(ctx context.Context, stdout io.Writer, dataDir string) error {
	logger, err := zap.NewDevelopment() // console encoding, to stderr
	if err != nil {
		return err
	}
	defer func() { _ = logger.Sync() }() // syncing stderr may fail; nothing to do about it

	cfg := silo.DefaultConfig()
	cfg.Name = "bank"
	cfg.Logger = logger
	cfg.DataDir = dataDir
	cfg.IncomingFilters = []grain.IncomingFilter{authorize}
	l := newLedger()
	s, err := startSilo(ctx, cfg, l)
	if err != nil {
		return err
	}
	defer s.Close() // a no-op after a graceful Stop; stops the silo on an early return

	b := &bank{s: s, out: stdout, ledger: l}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"open accounts", b.open},
		{"concurrent transfers", b.concurrentTransfers},
		{"serialised accounts", b.serialised},
		{"overdraft", b.overdraft},
		{"audit", b.audit},
		{"authorization", b.authorization},
	}
	for i, step := range steps {
		fmt.Fprintf(stdout, "%d. %s\n", i+1, step.name)
		if err := step.fn(ctx); err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, step.name, err)
		}
	}

	fmt.Fprintf(stdout, "%d. graceful stop\n", len(steps)+1)
	stopCtx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		return fmt.Errorf("graceful stop: %w", err)
	}
	fmt.Fprintln(stdout, "   silo stopped")
	return nil
}

// startSilo makes a silo from cfg, registers the bank's grain types on it,
// their accounts writing to l, and starts it.
func startSilo(ctx context.Context, cfg silo.Config, l *ledger) (*silo.Silo, error) {
	s, err := silo.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := bankpb.RegisterAccountGrain(s, newAccount(l), grain.WithState(balanceState)); err != nil {
		return nil, err
	}
	if err := bankpb.RegisterTransferGrain(s, newTransfer); err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// bank drives the story from outside any grain: the silo is its Caller.
// Each call names who makes it (as), since the bank serves no anonymous
// caller.
type bank struct {
	s            *silo.Silo
	out          io.Writer
	ledger       *ledger
	nextTransfer int64 // key of the next transfer grain: each transfer is a new grain
}

func (b *bank) account(name string) bankpb.AccountRef { return bankpb.NewAccountRef(b.s, name) }

// as returns ctx whose calls are made by principal.
func as(ctx context.Context, principal string) context.Context {
	return grain.WithPrincipal(ctx, principal)
}

func (b *bank) transfer() bankpb.TransferRef {
	b.nextTransfer++
	return bankpb.NewTransferRef(b.s, b.nextTransfer)
}

// open opens alice's and bob's accounts by depositing into them, unless an
// earlier run on the same data directory opened them: their balances were
// kept, and the story goes on from them. Every run leaves the balances as
// it found them: the transfers cancel out and the overdraft is refused.
func (b *bank) open(ctx context.Context) error {
	for _, o := range []struct {
		name   string
		amount int64
	}{{"alice", aliceOpening}, {"bob", bobOpening}} {
		ctx := as(ctx, o.name)
		bal, err := b.account(o.name).GetBalance(ctx, &bankpb.GetBalanceRequest{})
		if err != nil {
			return err
		}
		if bal.GetAmount() != 0 {
			fmt.Fprintf(b.out, "   %s is open already, with %d kept from an earlier run\n", o.name, bal.GetAmount())
			continue
		}
		bal, err = b.account(o.name).Deposit(ctx, &bankpb.DepositRequest{Amount: o.amount})
		if err != nil {
			return err
		}
		fmt.Fprintf(b.out, "   %s opens with %d\n", o.name, bal.GetAmount())
	}
	return nil
}

// concurrentTransfers sends transfersEachWay transfers of 1 each way, all
// at once, and checks that no money was made or lost.
func (b *bank) concurrentTransfers(ctx context.Context) error {
	var runs []grain.Waiter
	for range transfersEachWay {
		runs = append(runs,
			b.transfer().RunAsync(as(ctx, "alice"), &bankpb.TransferRequest{From: "alice", To: "bob", Amount: 1}),
			b.transfer().RunAsync(as(ctx, "bob"), &bankpb.TransferRequest{From: "bob", To: "alice", Amount: 1}))
	}
	if err := grain.AwaitAll(ctx, runs...); err != nil {
		return err
	}
	fmt.Fprintf(b.out, "   %d transfers of 1 alice→bob and %d bob→alice, launched together\n", transfersEachWay, transfersEachWay)
	alice, bob, err := b.balances(ctx)
	if err != nil {
		return err
	}
	if alice+bob != aliceOpening+bobOpening {
		return fmt.Errorf("total %d, want %d: money was made or lost", alice+bob, aliceOpening+bobOpening)
	}
	fmt.Fprintf(b.out, "   total %d (conserved)\n", alice+bob)
	return nil
}

// serialised shows from the ledger that each account ran one request at a
// time, though forty transfers used it at once.
func (b *bank) serialised(ctx context.Context) error {
	for _, name := range []string{"alice", "bob"} {
		writes, most := b.ledger.stats(name)
		if most != 1 {
			return fmt.Errorf("%s: %d requests inside the account at once, want 1", name, most)
		}
		fmt.Fprintf(b.out, "   %s: %d ledger writes, at most %d request inside the account at a time\n", name, writes, most)
	}
	return nil
}

// overdraft tries to move more than alice has: the transfer fails with
// FailedPrecondition and the balances stay as they were.
func (b *bank) overdraft(ctx context.Context) error {
	alice0, bob0, err := b.balances(ctx)
	if err != nil {
		return err
	}
	_, err = b.transfer().Run(as(ctx, "alice"), &bankpb.TransferRequest{From: "alice", To: "bob", Amount: 1000})
	if grain.Code(err) != codes.FailedPrecondition {
		return fmt.Errorf("transfer of 1000 from alice: got %v, want FailedPrecondition", err)
	}
	fmt.Fprintf(b.out, "   transfer of 1000 alice→bob refused: %s: %s\n", grain.Code(err), status.Convert(err).Message())
	alice, bob, err := b.balances(ctx)
	if err != nil {
		return err
	}
	if alice != alice0 || bob != bob0 {
		return fmt.Errorf("balances moved from alice %d, bob %d", alice0, bob0)
	}
	fmt.Fprintln(b.out, "   balances unchanged")
	return nil
}

// audit asks alice to audit against bob. The calls go alice → bob → alice;
// alice is busy with the audit and not reentrant, so the runtime refuses
// the last call at once with Aborted, naming the chain.
func (b *bank) audit(ctx context.Context) error {
	start := time.Now()
	_, err := b.account("alice").Audit(as(ctx, "alice"), &bankpb.AuditRequest{Peer: "bob"})
	took := time.Since(start)
	const chain = "bank.Account/alice → bank.Account/bob → bank.Account/alice"
	if grain.Code(err) != codes.Aborted || !strings.Contains(err.Error(), chain) {
		return fmt.Errorf("audit of alice against bob: got %v, want Aborted naming %s", err, chain)
	}
	fmt.Fprintf(b.out, "   audit of alice against bob refused: %s: %s\n", grain.Code(err), status.Convert(err).Message())
	if took >= fastFailure {
		return fmt.Errorf("the deadlock took %v to fail, want under %v", took, fastFailure)
	}
	fmt.Fprintf(b.out, "   failed fast: under %v, not after the %v response timeout\n", fastFailure, silo.DefaultConfig().ResponseTimeout)
	// Nothing was left held: alice answers at once.
	if _, _, err := b.balances(ctx); err != nil {
		return errors.Join(errors.New("alice or bob unusable after the refused audit"), err)
	}
	fmt.Fprintln(b.out, "   alice and bob still answer afterwards")
	return nil
}

// authorization shows the bank's filter refusing: bob may not withdraw
// from alice's account, nor bob start a transfer from it, and an
// anonymous caller may not even read a balance. Nothing moves.
func (b *bank) authorization(ctx context.Context) error {
	_, err := b.account("alice").Withdraw(as(ctx, "bob"), &bankpb.WithdrawRequest{Amount: 1})
	if grain.Code(err) != codes.PermissionDenied {
		return fmt.Errorf("bob withdrawing from alice: got %v, want PermissionDenied", err)
	}
	fmt.Fprintf(b.out, "   bob withdrawing from alice refused: %s: %s\n", grain.Code(err), status.Convert(err).Message())
	_, err = b.transfer().Run(as(ctx, "bob"), &bankpb.TransferRequest{From: "alice", To: "bob", Amount: 1})
	if grain.Code(err) != codes.PermissionDenied {
		return fmt.Errorf("bob transferring from alice: got %v, want PermissionDenied", err)
	}
	fmt.Fprintf(b.out, "   bob transferring alice→bob refused: %s (the withdrawal runs as bob)\n", grain.Code(err))
	_, err = b.account("alice").GetBalance(ctx, &bankpb.GetBalanceRequest{})
	if grain.Code(err) != codes.Unauthenticated {
		return fmt.Errorf("anonymous balance read: got %v, want Unauthenticated", err)
	}
	fmt.Fprintf(b.out, "   anonymous balance read refused: %s\n", grain.Code(err))
	_, _, err = b.balances(ctx)
	return err
}

// balances reads and prints both balances, as the bank's auditor.
func (b *bank) balances(ctx context.Context) (alice, bob int64, err error) {
	ctx = as(ctx, "auditor")
	a, err := b.account("alice").GetBalance(ctx, &bankpb.GetBalanceRequest{})
	if err != nil {
		return 0, 0, err
	}
	c, err := b.account("bob").GetBalance(ctx, &bankpb.GetBalanceRequest{})
	if err != nil {
		return 0, 0, err
	}
	fmt.Fprintf(b.out, "   balances: alice %d, bob %d\n", a.GetAmount(), c.GetAmount())
	return a.GetAmount(), c.GetAmount(), nil
}
