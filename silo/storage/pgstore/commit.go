package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
	"github.com/jackc/pgx/v5"
)

// Group commit. Every state write is its own transaction, and a commit
// waits for the server's write-ahead log to reach the disk: one writer
// alone gets a few thousand commits a second, however many connections the
// pool has. So writes that arrive while others are in flight wait in a
// queue, and go together, as one pipelined batch in one implicit
// transaction, when a connection frees up: one disk write for all of them.
// A lone writer is not delayed: with a connection free, its write goes at
// once, alone.
//
// Each write in a batch is still checked against its own ETag, in order,
// so two writes of one record in a batch behave as they would one after
// the other. A batch fails or commits as a whole; a failure (the server
// unreachable, the connection lost) fails every write in it, as it would
// have failed each alone.

// maxBatch bounds the writes in one batch.
const maxBatch = 256

// batchTimeout bounds a batch whose writes carry no deadline.
const batchTimeout = 30 * time.Second

// writeOp is one write waiting for its batch: an insert of a record that
// must not exist yet, or an update of one at version.
type writeOp struct {
	insert  bool
	grainID string
	name    string
	data    []byte // nil: clear
	version int64  // the version an update expects
	// deadline bounds the write when it goes in a batch. The caller's
	// context is not kept: the caller may give up and return, and its
	// context (a grain's, which the runtime reuses) must not be touched
	// after that.
	deadline time.Time
	// abandoned: the caller gave up while the write was queued, so a
	// batch that has not taken it yet leaves it out.
	abandoned atomic.Bool

	// The outcome, set before done is closed: the record's new version,
	// or matched false when it was not at version (or existed, for an
	// insert), or err.
	newVersion int64
	matched    bool
	err        error
	done       chan struct{}
}

// committer queues writes and sends them in batches, at most slots at a
// time (the pool's size).
type committer struct {
	s     *Store
	slots int

	mu      sync.Mutex
	queue   []*writeOp // mu held
	running int        // batches in flight; mu held
	closed  bool       // mu held: no drain starts
	drains  sync.WaitGroup
}

// do runs op, alone or in a batch, and returns its outcome: the record's
// new version, or matched false when the record was not at the version
// expected, or an error. If ctx ends first, do returns its error, and the
// write may still be made. Any goroutine.
func (c *committer) do(ctx context.Context, op *writeOp) (newVersion int64, matched bool, err error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	op.deadline = time.Now().Add(batchTimeout)
	if d, ok := ctx.Deadline(); ok {
		op.deadline = d
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, false, storage.ErrClosed
	}
	if c.running < c.slots {
		c.running++
		batch := append(c.takeLocked(), op)
		c.mu.Unlock()
		if len(batch) == 1 {
			c.sendOne(ctx, op) // alone, under the caller's own context
		} else {
			c.send(batch)
		}
		c.release()
		return op.newVersion, op.matched, op.err
	}
	op.done = make(chan struct{})
	c.queue = append(c.queue, op)
	c.mu.Unlock()
	select {
	case <-op.done:
		return op.newVersion, op.matched, op.err
	case <-ctx.Done():
		op.abandoned.Store(true)
		return 0, false, ctx.Err()
	}
}

// takeLocked takes up to maxBatch-1 queued writes, leaving out those
// whose callers gave up. mu held.
func (c *committer) takeLocked() []*writeOp {
	batch := make([]*writeOp, 0, min(len(c.queue), maxBatch-1)+1)
	n := 0
	for _, op := range c.queue {
		if len(batch) == maxBatch-1 {
			break
		}
		n++
		if op.abandoned.Load() {
			close(op.done)
			continue
		}
		batch = append(batch, op)
	}
	clear(c.queue[:n])
	c.queue = c.queue[n:]
	if len(c.queue) == 0 {
		c.queue = nil
	}
	return batch
}

// release gives back a batch's slot, or, with writes queued meanwhile,
// keeps it for a goroutine that sends them: the writer whose batch just
// ended returns to its caller without waiting for others'. Once the store
// is closed no drain starts, and the writes queued fail.
func (c *committer) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.running--
		return
	}
	if c.closed {
		c.running--
		c.failQueuedLocked()
		return
	}
	c.drains.Go(func() {
		for {
			c.mu.Lock()
			if len(c.queue) == 0 || c.closed {
				c.running--
				c.failQueuedLocked()
				c.mu.Unlock()
				return
			}
			batch := c.takeLocked()
			c.mu.Unlock()
			c.send(batch)
		}
	})
}

// close stops the drains and waits for them; writes still queued fail
// with storage.ErrClosed.
func (c *committer) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.drains.Wait()
	c.mu.Lock()
	c.failQueuedLocked()
	c.mu.Unlock()
}

// failQueuedLocked fails every queued write with storage.ErrClosed. mu
// held.
func (c *committer) failQueuedLocked() {
	if !c.closed {
		return
	}
	for _, op := range c.queue {
		op.err = storage.ErrClosed
		close(op.done)
	}
	c.queue = nil
}

// sendOne runs a write alone, under its caller's context.
func (c *committer) sendOne(ctx context.Context, op *writeOp) {
	err := c.s.pool.QueryRow(ctx, op.sql(), op.args(c.s.service)...).Scan(&op.newVersion)
	op.matched = err == nil
	if !errors.Is(err, pgx.ErrNoRows) {
		op.err = err
	}
}

// send runs a batch in one implicit transaction and hands each write its
// outcome. Its context ends at the latest of the writes' deadlines, and
// no caller's cancellation ends it: a write whose caller gave up after it
// was taken goes with the others (its caller was told nothing either way).
func (c *committer) send(batch []*writeOp) {
	if len(batch) == 0 {
		return
	}
	latest := batch[0].deadline
	for _, op := range batch[1:] {
		if op.deadline.After(latest) {
			latest = op.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	b := &pgx.Batch{}
	for _, op := range batch {
		b.Queue(op.sql(), op.args(c.s.service)...)
	}
	br := c.s.pool.SendBatch(ctx, b)
	var err error
	for _, op := range batch {
		if err != nil {
			break
		}
		err = br.QueryRow().Scan(&op.newVersion)
		op.matched = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr // the commit's own failure
	}
	for _, op := range batch {
		if err != nil {
			op.err, op.matched = err, false
		}
		if op.done != nil {
			close(op.done)
		}
	}
}

func (op *writeOp) sql() string {
	if op.insert {
		return insertStateSQL
	}
	return updateStateSQL
}

func (op *writeOp) args(service string) []any {
	if op.insert {
		return []any{service, op.grainID, op.name, op.data}
	}
	return []any{service, op.grainID, op.name, op.data, op.version}
}

// checkText refuses a grain ID or name that the database's text columns
// cannot hold. Every operation checks first: in a batch, the server would
// refuse the write and with it the whole batch.
func checkText(id grain.ID, name string) error {
	if textOK(id.Type) && textOK(id.Key) && textOK(name) {
		return nil
	}
	return fmt.Errorf("pgstore: %w: grain ID %q or name %q is not valid UTF-8 without NUL bytes, which the database's text columns require", storage.ErrInvalid, id, name)
}

// textOK reports whether s may go in a text column.
func textOK(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }
