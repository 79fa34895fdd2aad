package lifecycle_test

import (
	"testing"
	"unsafe"

	"github.com/granaryio/granary/activation/lifecycle"
)

// The Machine stays small: it lives in every activation. Two times (the
// idle clock and DelayDeactivation's) and the counters and flags.
func TestMachineSize(t *testing.T) {
	if n := unsafe.Sizeof(lifecycle.Machine{}); n > 24 {
		t.Errorf("Machine is %d bytes, want at most 24", n)
	}
}

// Every action has a name, and an unnamed bit would print nothing.
func TestEveryActionNamed(t *testing.T) {
	for a := lifecycle.Admit; a != 0 && a <= lifecycle.FailQueue; a <<= 1 {
		r := lifecycle.Result{Do: a}
		if s := r.String(); s == "" || s == "none" {
			t.Errorf("action %#x prints %q", uint16(a), s)
		}
	}
}

// A request the runtime refused instead of holding is not admitted when
// the activation starts: Unhold takes its Hold back.
func TestUnholdTakesBackARefusedHold(t *testing.T) {
	var m lifecycle.Machine
	for range 2 {
		if r := m.Offer(false, false); r.Do != lifecycle.Hold {
			t.Fatalf("Offer while registering: %v, want Hold", r)
		}
	}
	m.Unhold()
	if n := m.Held(); n != 1 {
		t.Fatalf("Held() = %d after two holds and an unhold, want 1", n)
	}
	m.Registered()
	if r := m.ActivateDone(false, 0); !r.Has(lifecycle.AdmitHeld) || r.Held != 1 {
		t.Fatalf("ActivateDone = %v, want AdmitHeld of 1", r)
	}
}
