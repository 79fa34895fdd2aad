package local

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
)

// StateOps counts a storage provider's operations; see the silo's
// StateOps, which converts from it.
type StateOps struct {
	Reads, Writes, Clears                      uint64
	ReadFailures, WriteFailures, ClearFailures uint64
	Conflicts                                  uint64
}

// CountingProvider is a storage provider that counts the operations it
// passes on. Any goroutine.
type CountingProvider struct {
	storage.Provider

	reads, writes, clears                      atomic.Uint64
	readFailures, writeFailures, clearFailures atomic.Uint64
	conflicts                                  atomic.Uint64
}

func (c *CountingProvider) ReadState(ctx context.Context, id grain.ID, name string) (storage.Record, error) {
	c.reads.Add(1)
	r, err := c.Provider.ReadState(ctx, id, name)
	if err != nil {
		c.readFailures.Add(1)
	}
	return r, err
}

func (c *CountingProvider) WriteState(ctx context.Context, id grain.ID, name string, data []byte, etag string) (string, error) {
	c.writes.Add(1)
	e, err := c.Provider.WriteState(ctx, id, name, data, etag)
	if err != nil {
		c.writeFailures.Add(1)
		c.maybeConflict(err)
	}
	return e, err
}

func (c *CountingProvider) ClearState(ctx context.Context, id grain.ID, name string, etag string) (string, error) {
	c.clears.Add(1)
	e, err := c.Provider.ClearState(ctx, id, name, etag)
	if err != nil {
		c.clearFailures.Add(1)
		c.maybeConflict(err)
	}
	return e, err
}

func (c *CountingProvider) maybeConflict(err error) {
	if errors.Is(err, storage.ErrETagMismatch) {
		c.conflicts.Add(1)
	}
}

func (c *CountingProvider) Snapshot() StateOps {
	return StateOps{
		Reads:         c.reads.Load(),
		Writes:        c.writes.Load(),
		Clears:        c.clears.Load(),
		ReadFailures:  c.readFailures.Load(),
		WriteFailures: c.writeFailures.Load(),
		ClearFailures: c.clearFailures.Load(),
		Conflicts:     c.conflicts.Load(),
	}
}
