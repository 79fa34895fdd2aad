package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

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
	ctx     context.Context
	insert  bool
	grainID string
	name    string
	data    []byte // nil: clear
	version int64  // the version an update expects

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
	drains  sync.WaitGroup
}

// do runs op, alone or in a batch, and returns its outcome: the record's
// new version, or matched false when the record was not at the version
// expected, or an error. If op's context ends first, do returns its error,
// and the write may still be made. Any goroutine.
func (c *committer) do(op *writeOp) (newVersion int64, matched bool, err error) {
	if !textOK(op.grainID) || !textOK(op.name) {
		// The server would refuse it, and with it the whole batch.
		return 0, false, fmt.Errorf("grain ID %q or state name %q is not valid UTF-8 without NUL bytes, which the database's text columns require", op.grainID, op.name)
	}
	if err := op.ctx.Err(); err != nil {
		return 0, false, err
	}
	c.mu.Lock()
	if c.running < c.slots {
		c.running++
		batch := append(c.takeLocked(), op)
		c.mu.Unlock()
		c.send(batch)
		c.release()
		return op.newVersion, op.matched, op.err
	}
	op.done = make(chan struct{})
	c.queue = append(c.queue, op)
	c.mu.Unlock()
	select {
	case <-op.done:
		return op.newVersion, op.matched, op.err
	case <-op.ctx.Done():
		return 0, false, op.ctx.Err()
	}
}

// takeLocked takes up to maxBatch-1 queued writes. mu held.
func (c *committer) takeLocked() []*writeOp {
	n := min(len(c.queue), maxBatch-1)
	batch := make([]*writeOp, n, n+1)
	copy(batch, c.queue)
	c.queue = c.queue[n:]
	if len(c.queue) == 0 {
		c.queue = nil
	}
	return batch
}

// release gives back a batch's slot, or, with writes queued meanwhile,
// keeps it for a goroutine that sends them: the writer whose batch just
// ended returns to its caller without waiting for others'.
func (c *committer) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.running--
		return
	}
	c.drains.Go(func() {
		for {
			c.mu.Lock()
			if len(c.queue) == 0 {
				c.running--
				c.mu.Unlock()
				return
			}
			batch := c.takeLocked()
			c.mu.Unlock()
			c.send(batch)
		}
	})
}

// send runs a batch in one implicit transaction and hands each write its
// outcome.
func (c *committer) send(batch []*writeOp) {
	var err error
	if len(batch) == 1 {
		op := batch[0]
		err = c.s.pool.QueryRow(op.ctx, op.sql(), op.args(c.s.service)...).Scan(&op.newVersion)
		op.matched = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	} else {
		ctx, cancel := batchContext(batch)
		defer cancel()
		b := &pgx.Batch{}
		for _, op := range batch {
			b.Queue(op.sql(), op.args(c.s.service)...)
		}
		br := c.s.pool.SendBatch(ctx, b)
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

// batchContext bounds a batch by the latest deadline of its writes, and
// ignores their cancellation: a write whose caller gave up is sent with
// the others all the same (its caller was told nothing either way).
func batchContext(batch []*writeOp) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, op := range batch {
		d, ok := op.ctx.Deadline()
		if !ok {
			latest = time.Now().Add(batchTimeout)
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
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

// textOK reports whether s may go in a text column.
func textOK(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }
