package lifecycle_test

import (
	"testing"

	"github.com/granaryio/granary/activation/lifecycle"
	"github.com/granaryio/granary/grain"
)

// active returns an active Machine holding nothing.
func active(tb testing.TB) *lifecycle.Machine {
	m := new(lifecycle.Machine)
	m.Registered()
	m.ActivateDone(false, 0)
	if m.State() != lifecycle.Active {
		tb.Fatalf("not active: %s", m)
	}
	return m
}

// cycle is the hot path: a request offered and admitted, and its turn
// ending.
func cycle(tb testing.TB, m *lifecycle.Machine) {
	if r := m.Offer(false, false); r.Do != lifecycle.Admit {
		tb.Fatalf("offer: %s", r)
	}
	if r := m.TurnDone(true, true, false, 0); r.Do != lifecycle.StartQueued {
		tb.Fatalf("turn done: %s", r)
	}
}

// TestHotPathAllocatesNothing pins the design rule: stepping a Machine
// allocates nothing, on the hot path or off it.
func TestHotPathAllocatesNothing(t *testing.T) {
	m := active(t)
	if n := testing.AllocsPerRun(1000, func() { cycle(t, m) }); n != 0 {
		t.Errorf("offer + turn done: %v allocs, want 0", n)
	}
	n := testing.AllocsPerRun(100, func() {
		var m lifecycle.Machine
		m.Offer(false, false)
		m.Registered()
		m.ActivateDone(false, 0)
		m.DelayDeactivation(1, 1)
		m.IdleTick(1, 1, false)
		m.Deactivate(grain.DeactivateOperator, false)
		m.Migrate(grain.DeactivateOperator, true)
		m.Offer(false, false)
		m.Deactivated()
		m.Close()
	})
	if n != 0 {
		t.Errorf("a whole life: %v allocs, want 0", n)
	}
}

func BenchmarkOfferTurnDone(b *testing.B) {
	m := active(b)
	b.ReportAllocs()
	for b.Loop() {
		cycle(b, m)
	}
}

func BenchmarkIdleTick(b *testing.B) {
	m := active(b)
	b.ReportAllocs()
	for b.Loop() {
		m.TurnDone(true, true, false, 0)
		if r := m.IdleTick(1, 1<<62, false); r.Do != 0 {
			b.Fatal(r)
		}
	}
}
