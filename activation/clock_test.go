package activation

import (
	"context"
	"testing"

	"github.com/jonboulle/clockwork"
)

func newFakeClock() *clockwork.FakeClock { return clockwork.NewFakeClock() }

// waitForMonitor waits until the pool's monitor has made its ticker, so
// that advancing the clock reaches it.
func waitForMonitor(t testing.TB, c *clockwork.FakeClock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := c.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal("monitor never started its ticker:", err)
	}
}
