// Package testwait holds the bounded waits that Granary's tests share: a
// context that ends after a test's timeout, a poll for a condition no
// event announces, and receives that give up. Tests never sleep to
// synchronise; they wait for something, for at most a fixed time, and a
// test that reaches that bound has failed.
package testwait

import (
	"context"
	"testing"
	"time"
)

// Context returns a context cancelled after d or when the test ends,
// whichever comes first. It is cancelled rather than given a deadline, so
// that a silo on a fake clock does not take it for one.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(d, cancel)
	t.Cleanup(func() {
		timer.Stop()
		cancel()
	})
	return ctx
}

// For polls cond every millisecond until it holds, failing the test after
// d; what names what the test waits for.
func For(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Recv receives from ch, failing the test after d; what names what the
// test waits for.
func Recv[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", d, what)
		panic("unreachable")
	}
}

// Until receives from ch until a value satisfies ok, and returns it,
// failing the test after d (one bound for the whole wait); what names
// what the test waits for. The values before it are consumed: ok may
// fail the test on one it must not see.
func Until[T any](t testing.TB, ch <-chan T, d time.Duration, what string, ok func(T) bool) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case v := <-ch:
			if ok(v) {
				return v
			}
		case <-timer.C:
			t.Fatalf("timed out after %v waiting for %s", d, what)
			panic("unreachable")
		}
	}
}
