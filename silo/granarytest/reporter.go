package granarytest

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// reporter is what a Cluster reports its failures to: the test, for
// New; a panicker, for Start.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// panicker is the reporter of a cluster made by Start: Fatalf panics with
// a fatal, which Start turns into its error, and Errorf keeps the error
// for Close.
type panicker struct {
	mu   sync.Mutex
	errs []error
}

// fatal is what panicker.Fatalf panics with.
type fatal struct{ err error }

func (p *panicker) Helper() {}

func (p *panicker) Errorf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs = append(p.errs, fmt.Errorf(format, args...))
}

func (p *panicker) Fatalf(format string, args ...any) {
	panic(fatal{fmt.Errorf(format, args...)})
}

func (p *panicker) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.errs...)
}

// waitFor polls cond every millisecond until it holds, failing after
// Timeout; what names what it waits for.
func (c *Cluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("granarytest: timed out after %v waiting for %s", Timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}
