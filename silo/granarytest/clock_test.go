package granarytest

import (
	"testing"
	"time"
)

// TestFakeClock: one-shot timers are the steps, in order; a ticker fires
// once per step it is due at, dropping the ticks it missed; a tick that
// is received and followed by a Reset is settled at once; a stopped
// timer's tick is forgotten.
func TestFakeClock(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newFakeClock(start)
	tk := c.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	t1 := c.NewTimer(3 * time.Second)
	t2 := c.NewTimer(time.Second)
	var ran []time.Time
	done := make(chan struct{})
	c.AfterFunc(2*time.Second, func() { ran = append(ran, c.Now()); close(done) })

	next, ok := c.nextStep()
	if !ok || !next.Equal(start.Add(time.Second)) {
		t.Fatalf("first step %v %v, want t2's", next, ok)
	}
	c.moveTo(next)
	if got := <-t2.Chan(); !got.Equal(next) {
		t.Fatalf("t2 fired at %v, want %v", got, next)
	}
	if got := <-tk.Chan(); !got.Equal(next) {
		t.Fatalf("the ticker fired at %v, want %v", got, next)
	}
	select {
	case v := <-tk.Chan():
		t.Fatalf("the ticker fired twice in one step, at %v", v)
	default:
	}
	if busy, _ := c.unsettled(); busy == "" {
		t.Fatal("t2's tick was taken, but its owner has not acted on it yet, and settled")
	}
	t2.Reset(5 * time.Second) // its owner acted on it
	if busy, _ := c.unsettled(); busy != "" {
		t.Fatalf("unsettled after the Reset: %s", busy)
	}

	next, _ = c.nextStep()
	c.moveTo(next)
	<-done
	<-tk.Chan()
	for !c.idle() {
		time.Sleep(time.Millisecond)
	}
	if len(ran) != 1 || !ran[0].Equal(start.Add(2*time.Second)) {
		t.Fatalf("the callback ran at %v, want once at 2 s", ran)
	}

	next, _ = c.nextStep()
	c.moveTo(next)
	if busy, _ := c.unsettled(); busy == "" {
		t.Fatal("t1's tick is in its channel, and settled")
	}
	t1.Stop()
	<-tk.Chan()
	if busy, _ := c.unsettled(); busy != "" {
		t.Fatalf("unsettled after t1 was stopped: %s", busy)
	}
	if next, _ := c.nextStep(); !next.Equal(start.Add(6 * time.Second)) { // reset at 1 s for 5 s
		t.Fatalf("next step %v, want t2's reset time", next)
	}
}

// TestFakeClockResetDropsStaleTick: as with real timers since Go 1.23, a
// Reset or Stop drops a tick fired and not read, so the owner never reads
// an early tick and the unread tick does not keep Advance waiting.
func TestFakeClockResetDropsStaleTick(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newFakeClock(start)
	tm := c.NewTimer(time.Second)
	tk := c.NewTicker(time.Second)
	defer tk.Stop()
	c.moveTo(start.Add(time.Second))
	if busy, _ := c.unsettled(); busy == "" {
		t.Fatal("the ticks are in their channels, and settled")
	}
	tm.Reset(2 * time.Second)
	tk.Reset(2 * time.Second)
	for name, ch := range map[string]<-chan time.Time{"timer": tm.Chan(), "ticker": tk.Chan()} {
		select {
		case v := <-ch:
			t.Fatalf("the %s's stale tick of %v is still there after Reset", name, v)
		default:
		}
	}
	if busy, _ := c.unsettled(); busy != "" {
		t.Fatalf("unsettled after the Resets dropped the ticks: %s", busy)
	}
	c.moveTo(start.Add(3 * time.Second))
	if got := <-tm.Chan(); !got.Equal(start.Add(3 * time.Second)) {
		t.Fatalf("the timer fired at %v after its Reset, want 3 s", got)
	}

	tm.Reset(time.Second)
	c.moveTo(start.Add(4 * time.Second))
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reported it armed")
	}
	select {
	case v := <-tm.Chan():
		t.Fatalf("the stale tick of %v is still there after Stop", v)
	default:
	}
	tk.Stop()
	select {
	case v := <-tk.Chan():
		t.Fatalf("the ticker's stale tick of %v is still there after Stop", v)
	default:
	}
	if busy, _ := c.unsettled(); busy != "" {
		t.Fatalf("unsettled after the Stops: %s", busy)
	}
}
