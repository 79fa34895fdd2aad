package reminders

import (
	"testing"
	"time"
)

// TestFirstTickJustPast: a reminder registered with due 0 has its first
// tick at the registration's instant, and its owner reads it a moment
// later: the first tick fires then, late, instead of a period later.
func TestFirstTickJustPast(t *testing.T) {
	h := newHarness(t, true, nil)
	h.svc.SetRanges(all)
	h.settle()
	e := h.table.put(entry("g", "r", 1, h.clock.Now(), time.Hour)) // RegisterReminder(due 0, period 1h)
	h.clock.Advance(time.Millisecond)                              // the notice and the read take a moment
	h.svc.Changed(e.Grain, e.Hash)
	h.wantOwned(1)
	h.expectTick(e, e.FirstTick)
}
