// This file holds the Account grain, whose balance is persistent state, and
// the ledger that accounts also write to, which counts their writes.

package main

import (
	"sync"

	"github.com/granaryio/granary/grain"
	bankpb "github.com/granaryio/granary/proto/examples/bank"
	"google.golang.org/grpc/codes"
)

// balanceState declares an account's persistent state: its balance, kept
// by the silo's default storage provider (the embedded store under the
// silo's data directory).
var balanceState = grain.NewStateSpec[*bankpb.Balance]("balance", "")

// account implements the bank.Account grain, keyed by the account's name.
// Its balance is persistent state, read before the activation starts and
// written on every change. Its fields are touched only by its activation's
// turns, which never overlap, so it needs no lock.
type account struct {
	name   string
	state  *grain.State[*bankpb.Balance]
	ledger *ledger

	// inside counts the requests inside this account's code right now,
	// including those waiting at an await (a ledger write, a call). A
	// non-reentrant grain admits one request at a time, even across
	// awaits, so it never exceeds 1; each ledger write records it.
	inside int
}

var _ bankpb.AccountGrain = (*account)(nil)

// OnActivate takes the balance the runtime read from storage.
func (a *account) OnActivate(ctx grain.Context) error {
	a.state = balanceState.Of(ctx)
	a.state.Value().Account = a.name
	return nil
}

// balance is the account's balance.
func (a *account) balance() int64 { return a.state.Value().GetAmount() }

// newAccount makes the activation of the account id, which writes to l.
func newAccount(l *ledger) func(id grain.ID) bankpb.AccountGrain {
	return func(id grain.ID) bankpb.AccountGrain { return &account{name: id.Key, ledger: l} }
}

// enter counts a request in; call the function it returns when it ends.
func (a *account) enter() (leave func()) {
	a.inside++
	return func() { a.inside-- }
}

// Deposit adds a positive amount to the balance.
func (a *account) Deposit(ctx grain.Context, req *bankpb.DepositRequest) (*bankpb.Balance, error) {
	defer a.enter()()
	if err := checkAmount(req.GetAmount()); err != nil {
		return nil, err
	}
	return a.commit(ctx, a.balance()+req.GetAmount())
}

// Withdraw takes a positive amount from the balance, which must cover it.
func (a *account) Withdraw(ctx grain.Context, req *bankpb.WithdrawRequest) (*bankpb.Balance, error) {
	defer a.enter()()
	if err := checkAmount(req.GetAmount()); err != nil {
		return nil, err
	}
	if a.balance() < req.GetAmount() {
		return nil, grain.Errorf(codes.FailedPrecondition, "insufficient funds: balance %d, asked %d", a.balance(), req.GetAmount())
	}
	return a.commit(ctx, a.balance()-req.GetAmount())
}

// GetBalance returns the balance. It is read-only: it may run alongside
// other read-only requests, but never while a change is under way.
func (a *account) GetBalance(ctx grain.Context, req *bankpb.GetBalanceRequest) (*bankpb.Balance, error) {
	defer a.enter()()
	return &bankpb.Balance{Account: a.name, Amount: a.balance()}, nil
}

// Audit reports this account's balance beside the peer's, which it gets
// by asking the peer to Confirm. The peer checks back with this account,
// so the calls go self → peer → self: on non-reentrant grains the runtime
// refuses the last hop at once as a deadlock, with codes.Aborted, and
// Audit passes that error on unchanged.
func (a *account) Audit(ctx grain.Context, req *bankpb.AuditRequest) (*bankpb.AuditReport, error) {
	defer a.enter()()
	if req.GetPeer() == "" {
		return nil, grain.Errorf(codes.InvalidArgument, "audit of %s: no peer account", a.name)
	}
	peer := bankpb.NewAccountRef(ctx.Caller(), req.GetPeer())
	confirmed, err := peer.Confirm(ctx, &bankpb.ConfirmRequest{Asker: a.name})
	if err != nil {
		return nil, err
	}
	return &bankpb.AuditReport{Own: a.balance(), Peer: confirmed.GetAmount()}, nil
}

// Confirm returns this account's balance to the account named asker. It
// first reads the asker's balance, as a cross-check that the asker answers:
// the call back that closes the circle when the asker is auditing.
func (a *account) Confirm(ctx grain.Context, req *bankpb.ConfirmRequest) (*bankpb.Balance, error) {
	defer a.enter()()
	if req.GetAsker() == "" {
		return nil, grain.Errorf(codes.InvalidArgument, "confirm by %s: no asker", a.name)
	}
	asker := bankpb.NewAccountRef(ctx.Caller(), req.GetAsker())
	if _, err := asker.GetBalance(ctx, &bankpb.GetBalanceRequest{}); err != nil {
		return nil, err
	}
	return &bankpb.Balance{Account: a.name, Amount: a.balance()}, nil
}

// commit writes the new balance to the ledger and to storage, then keeps
// it. Both writes give up the processor while they wait (the ledger's
// through ctx.Blocking, as real I/O would): they are the awaits at which a
// reentrant grain would let another request in. If storage refuses the
// write, the balance stays as it was and the caller gets the error.
func (a *account) commit(ctx grain.Context, balance int64) (*bankpb.Balance, error) {
	inside := a.inside
	ctx.Blocking(func() { a.ledger.write(a.name, balance, inside) })
	v := a.state.Value()
	old := v.Amount
	v.Amount = balance
	if err := a.state.Write(ctx); err != nil {
		v.Amount = old
		return nil, err
	}
	return &bankpb.Balance{Account: a.name, Amount: balance}, nil
}

// checkAmount fails amounts that are not positive.
func checkAmount(amount int64) error {
	if amount <= 0 {
		return grain.Errorf(codes.InvalidArgument, "amount must be positive, got %d", amount)
	}
	return nil
}

// ledger is the bank's book of record, standing in for a database: every
// change of balance is written to it. It also keeps, per account, the most
// requests that were inside the account's code during a write. Any
// goroutine; mu guards the fields.
type ledger struct {
	mu        sync.Mutex
	writes    map[string]int
	maxInside map[string]int
}

func newLedger() *ledger {
	return &ledger{writes: map[string]int{}, maxInside: map[string]int{}}
}

// write records that account's balance is now balance, written while
// inside requests were inside the account's code.
func (l *ledger) write(account string, balance int64, inside int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes[account]++
	l.maxInside[account] = max(l.maxInside[account], inside)
}

// stats returns how many writes account made and the most requests inside
// it during one.
func (l *ledger) stats(account string) (writes, maxInside int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writes[account], l.maxInside[account]
}
