// Command scheduler demonstrates Granary's activation scheduler on its own:
// many small groups (stand-ins for grain activations) sharing a few
// processors, with one-way sends, calls that wait for a reply, and counters
// that need no locks because a group's turns never overlap.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/activation"
)

func main() {
	groups := flag.Int("groups", 100000, "number of counter groups")
	sends := flag.Int("sends", 2000000, "one-way turns to send")
	accounts := flag.Int("accounts", 1000, "number of account groups")
	transfers := flag.Int("transfers", 200000, "transfers, each a call to two accounts")
	flag.Parse()
	if err := run(*groups, *sends, *accounts, *transfers); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}

func run(groups, sends, accounts, transfers int) error {
	pool, err := activation.New(activation.DefaultConfig())
	if err != nil {
		return err
	}
	cfg := pool.Config()
	fmt.Printf("pool: %d processors, quantum %d turns / %v\n", cfg.Processors, cfg.QuantumTurns, cfg.QuantumTime)

	if err := counters(pool, groups, sends); err != nil {
		return err
	}
	if err := bank(pool, accounts, transfers); err != nil {
		return err
	}
	if n := failures.Load(); n != 0 {
		return fmt.Errorf("%d turns failed", n)
	}
	s := pool.Stats()
	fmt.Printf("pool stats: %d workers, %d steals, %d hand-offs, %d hand-ons, %d long-turn warnings\n",
		s.Workers, s.Steals, s.Handoffs, s.HandOns, s.LongTurnWarnings)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pool.Stop(ctx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	fmt.Println("pool stopped cleanly")
	return nil
}

// failures counts turns that ended in an error; Done must not panic, so
// the demo counts them and reports at the end.
var failures atomic.Int64

// sum adds up f over xs.
func sum[T any](xs []T, f func(T) int) int {
	total := 0
	for _, x := range xs {
		total += f(x)
	}
	return total
}

// counter is a group's state and its one-way "increment" task. n is a plain
// int: only the group's own turns touch it.
type counter struct {
	g  *activation.Group
	n  int
	wg *sync.WaitGroup
}

func (c *counter) Run(*activation.Exec) { c.n++ }
func (c *counter) Done(_ *activation.Exec, err error) {
	if err != nil {
		failures.Add(1)
	}
	c.wg.Done()
}

func counters(pool *activation.Pool, groups, sends int) error {
	cs := make([]*counter, groups)
	var wg sync.WaitGroup
	for i := range cs {
		cs[i] = &counter{g: pool.NewGroup(fmt.Sprint("counter/", i)), wg: &wg}
	}
	wg.Add(sends)
	const producers = 4
	start := time.Now()
	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := p; i < sends; i += producers {
				c := cs[(i*7919)%groups]
				if err := c.g.Enqueue(activation.Turn{Name: "Increment", Task: c}); err != nil {
					panic(err)
				}
			}
		}()
	}
	pwg.Wait()
	wg.Wait()
	elapsed := time.Since(start)
	total := sum(cs, func(c *counter) int { return c.n })
	fmt.Printf("counters: %d one-way turns over %d groups in %v (%.1fM turns/s); counted %d\n",
		sends, groups, elapsed.Round(time.Millisecond), float64(sends)/elapsed.Seconds()/1e6, total)
	if total != sends {
		return fmt.Errorf("counted %d increments; want %d", total, sends)
	}
	return nil
}

// account is a balance owned by its group.
type account struct {
	g       *activation.Group
	balance int
}

// adjust is one call to an account: it changes the balance and signals the
// caller's reply event.
type adjust struct {
	acct  *account
	delta int
	reply activation.Event
}

func (a *adjust) Run(*activation.Exec)               { a.acct.balance += a.delta }
func (a *adjust) Done(e *activation.Exec, err error) { e.Signal(&a.reply) }

// transfer runs on its own group and calls both accounts, waiting for each
// reply: inline when the account is idle, through the hand-off otherwise.
type transfer struct {
	g        *activation.Group
	from, to *account
	amount   int
	wg       *sync.WaitGroup
	inline   *atomic.Int64
}

func (t *transfer) Run(e *activation.Exec) {
	t.call(e, t.from, -t.amount)
	t.call(e, t.to, t.amount)
}

func (t *transfer) call(e *activation.Exec, acct *account, delta int) {
	a := &adjust{acct: acct, delta: delta}
	turn := activation.Turn{Name: "Adjust", Task: a}
	if e.TryRun(acct.g, turn) {
		t.inline.Add(1)
		return
	}
	if err := e.Enqueue(acct.g, turn); err != nil {
		panic(err)
	}
	e.Wait(&a.reply)
}

func (t *transfer) Done(_ *activation.Exec, err error) {
	if err != nil {
		failures.Add(1)
	}
	t.wg.Done()
}

func bank(pool *activation.Pool, accounts, transfers int) error {
	const initial = 1000
	accts := make([]*account, accounts)
	for i := range accts {
		accts[i] = &account{g: pool.NewGroup(fmt.Sprint("account/", i)), balance: initial}
	}
	tellers := make([]*activation.Group, 64)
	for i := range tellers {
		tellers[i] = pool.NewGroup(fmt.Sprint("teller/", i))
	}
	var wg sync.WaitGroup
	var inline atomic.Int64
	wg.Add(transfers)
	start := time.Now()
	for i := range transfers {
		t := &transfer{
			g:    tellers[i%len(tellers)],
			from: accts[(i*31)%accounts], to: accts[(i*17+1)%accounts],
			amount: i % 7, wg: &wg, inline: &inline,
		}
		if err := t.g.Enqueue(activation.Turn{Name: "Transfer", Task: t}); err != nil {
			return err
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := sum(accts, func(a *account) int { return a.balance })
	fmt.Printf("bank: %d transfers (%d calls, %d inline) in %v (%.0f ns/transfer); total balance %d\n",
		transfers, 2*transfers, inline.Load(), elapsed.Round(time.Millisecond),
		float64(elapsed.Nanoseconds())/float64(transfers), total)
	if total != initial*accounts {
		return fmt.Errorf("balances sum to %d; want %d", total, initial*accounts)
	}
	return nil
}
