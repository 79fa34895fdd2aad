package local

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// InflightCount counts requests in flight, and lets Stop wait until
// there are none.
type InflightCount struct {
	n       atomic.Int64
	mu      sync.Mutex
	drained chan struct{} // closed when n reaches 0 while draining
}

func (c *InflightCount) Add()        { c.n.Add(1) }
func (c *InflightCount) Load() int64 { return c.n.Load() }

// Done counts one request as answered.
func (c *InflightCount) Done() {
	if c.n.Add(-1) != 0 {
		return
	}
	c.mu.Lock()
	if c.drained != nil && c.n.Load() == 0 {
		close(c.drained)
		c.drained = nil
	}
	c.mu.Unlock()
}

// Drain waits until no request is in flight, or ctx ends; what names the
// requests in the error.
func (c *InflightCount) Drain(ctx context.Context, what string) error {
	c.mu.Lock()
	drained := make(chan struct{})
	if c.n.Load() == 0 {
		close(drained)
	} else {
		c.drained = drained
	}
	c.mu.Unlock()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("silo: %d %s still in flight: %w", c.n.Load(), what, ctx.Err())
	}
}
