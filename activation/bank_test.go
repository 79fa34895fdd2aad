package activation

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type bankAccount struct {
	g       *Group
	balance int // touched only by turns of g
}

type bankAdjust struct {
	acct  *bankAccount
	delta int
	reply Event
}

func (a *bankAdjust) Run(*Exec) { a.acct.balance += a.delta }
func (a *bankAdjust) Done(e *Exec, err error) {
	if e != nil {
		e.Signal(&a.reply)
	} else {
		a.reply.Signal()
	}
}

type bankTransfer struct {
	from, to *bankAccount
	amount   int
	wg       *sync.WaitGroup
	failed   *atomic.Int32
}

func (t *bankTransfer) Run(e *Exec) {
	for _, leg := range []struct {
		acct  *bankAccount
		delta int
	}{{t.from, -t.amount}, {t.to, t.amount}} {
		a := &bankAdjust{acct: leg.acct, delta: leg.delta}
		tr := Turn{Name: "Adjust", Task: a}
		if e.TryRun(leg.acct.g, tr) {
			continue
		}
		if err := e.Enqueue(leg.acct.g, tr); err != nil {
			panic(err)
		}
		e.Wait(&a.reply)
	}
}

func (t *bankTransfer) Done(_ *Exec, err error) {
	if err != nil {
		t.failed.Add(1)
	}
	t.wg.Done()
}

// TestBankTransfers: transfers on teller groups each call two account
// groups and wait for them, inline or through the hand-off, all at once.
// Every transfer completes and the money adds up. (This caught a turn
// that slipped into an idle group between an inline caller's emptiness
// check and its push: the slipped turn was lost and the inline one ran
// twice.) On a timeout it prints the pool's queues before the cleanup's
// Close, which would wait for the stuck turns.
func TestBankTransfers(t *testing.T) {
	for _, inline := range []int{0, 8} {
		t.Run(fmt.Sprint("inline=", inline), func(t *testing.T) {
			p := newTestPool(t, func(c *Config) { c.InlineDepth = inline })
			accts := make([]*bankAccount, 200)
			for i := range accts {
				accts[i] = &bankAccount{g: p.NewGroup(fmt.Sprint("account/", i)), balance: 1000}
			}
			tellers := make([]*Group, 64)
			for i := range tellers {
				tellers[i] = p.NewGroup(fmt.Sprint("teller/", i))
			}
			transfers := 40000
			if raceEnabled {
				// Without inlining, each waiting transfer hands its worker
				// off, and under the race detector 40,000 of them took
				// 13 to 17 s of the 20 s bound on a quiet 2-core machine,
				// and over it when other packages' tests ran alongside.
				transfers = 10000
			}
			var wg sync.WaitGroup
			var failed atomic.Int32
			wg.Add(transfers)
			for i := range transfers {
				tr := &bankTransfer{from: accts[(i*31)%len(accts)], to: accts[(i*17+1)%len(accts)], amount: i % 7, wg: &wg, failed: &failed}
				if err := tellers[i%len(tellers)].Enqueue(Turn{Name: "Transfer", Task: tr}); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(defaultTestTimeout):
				fmt.Fprintf(os.Stderr, "transfers stuck; pool state:\n%s", p.debugState(append(append([]*Group{}, tellers...), func() []*Group {
					var gs []*Group
					for _, a := range accts {
						gs = append(gs, a.g)
					}
					return gs
				}()...)...))
				t.Fatal("transfers stuck")
			}
			total := 0
			for _, a := range accts {
				total += a.balance
			}
			if total != 1000*len(accts) || failed.Load() != 0 {
				t.Fatalf("total %d, %d failed", total, failed.Load())
			}
		})
	}
}
