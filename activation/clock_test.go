package activation

import (
	"testing"

	"github.com/granaryio/granary/internal/testwait"
	"github.com/jonboulle/clockwork"
)

func newFakeClock() *clockwork.FakeClock { return clockwork.NewFakeClock() }

// waitForMonitor waits until the pool's monitor has made its ticker, so
// that advancing the clock reaches it.
func waitForMonitor(t testing.TB, c *clockwork.FakeClock) {
	t.Helper()
	if err := c.BlockUntilContext(testwait.Context(t, defaultTestTimeout), 1); err != nil {
		t.Fatal("monitor never started its ticker:", err)
	}
}
