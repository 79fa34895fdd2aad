package activation_test

import (
	"context"
	"fmt"

	"github.com/granaryio/granary/activation"
)

// deposit is a turn of an account: it changes the balance, which only the
// account's own turns touch, so it needs no lock.
type deposit struct {
	acct   *account
	amount int
}

func (d *deposit) Run(*activation.Exec)               { d.acct.balance += d.amount }
func (d *deposit) Done(_ *activation.Exec, err error) { d.acct.errs = append(d.acct.errs, err) }

type account struct {
	group   *activation.Group
	balance int
	errs    []error
}

// A pool runs the turns of many groups; each group's turns run one at a
// time, in order. Stop runs what is queued, then stops the workers.
func Example() {
	pool, err := activation.New(activation.DefaultConfig())
	if err != nil {
		panic(err)
	}
	acct := &account{}
	acct.group = pool.NewGroup("bank.Account/alice")
	for _, amount := range []int{100, -30, 5} {
		turn := activation.Turn{Name: "Deposit", Task: &deposit{acct: acct, amount: amount}}
		if err := acct.group.Enqueue(turn); err != nil {
			panic(err)
		}
	}
	if err := pool.Stop(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println("balance:", acct.balance, "turns:", len(acct.errs), "errors:", acct.errs[0], acct.errs[1], acct.errs[2])
	// Output: balance: 75 turns: 3 errors: <nil> <nil> <nil>
}

// balanceQuery is a call's turn on the callee: it reads the balance and
// signals the caller's event when it is done.
type balanceQuery struct {
	acct   *account
	result int
	reply  activation.Event
}

func (q *balanceQuery) Run(*activation.Exec)             { q.result = q.acct.balance }
func (q *balanceQuery) Done(e *activation.Exec, _ error) { e.Signal(&q.reply) }

// report is the caller's turn: a local call to another group.
type report struct {
	callee *account
	out    chan int
}

func (r *report) Run(e *activation.Exec) {
	q := &balanceQuery{acct: r.callee}
	turn := activation.Turn{Name: "Balance", Task: q}
	// An idle callee runs inline, on this goroutine, like a function call;
	// a busy one gets the turn queued, and this turn waits for the reply
	// without holding its processor.
	if !e.TryRun(r.callee.group, turn) {
		if err := e.Enqueue(r.callee.group, turn); err != nil {
			panic(err)
		}
	}
	e.Wait(&q.reply)
	r.out <- q.result
}

func (r *report) Done(*activation.Exec, error) {}

// A turn calls a turn of another group and waits for its answer:
// the shape of a local grain call.
func ExampleExec_TryRun() {
	pool, err := activation.New(activation.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	bob := &account{balance: 42}
	bob.group = pool.NewGroup("bank.Account/bob")
	teller := pool.NewGroup("bank.Teller/1")
	out := make(chan int, 1)
	if err := teller.Enqueue(activation.Turn{Name: "Report", Task: &report{callee: bob, out: out}}); err != nil {
		panic(err)
	}
	fmt.Println("bob has", <-out)
	// Output: bob has 42
}
