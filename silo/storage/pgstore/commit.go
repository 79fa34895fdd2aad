package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
	"github.com/jackc/pgx/v5"
)

// Group commit. Every state write and every stream append is its own
// transaction, and a commit waits for the server's write-ahead log to
// reach the disk: one writer alone gets a few thousand commits a second,
// however many connections the pool has. So writes that arrive while
// others are in flight wait in a queue, and go together, as one pipelined
// batch in one implicit transaction, when a connection frees up: one disk
// write for all of them. A lone writer is not delayed: with a connection
// free, its write goes at once, alone.
//
// Each write in a batch is still checked against its own ETag, in order,
// so two writes of one record in a batch behave as they would one after
// the other. A batch fails or commits as a whole; a failure (the server
// unreachable, the connection lost) fails every write in it, as it would
// have failed each alone.
//
// An append holds its partition's row in granary_stream_partitions locked
// until its batch commits, so two batches that appended to two partitions
// in opposite orders would deadlock, and the server would fail one of
// them. So a batch sends its state writes first, in the order they came,
// and then its appends by partition (sortBatch): every batch takes the
// partitions' locks in one order, and none before its state writes.

// maxBatch bounds the writes in one batch.
const maxBatch = 256

// batchTimeout bounds a batch whose writes carry no deadline.
const batchTimeout = 30 * time.Second

// queued is what the committer keeps of a write waiting for its batch.
type queued struct {
	// deadline bounds the write when it goes in a batch. The caller's
	// context is not kept: the caller may give up and return, and its
	// context (a grain's, which the runtime reuses) must not be touched
	// after that.
	deadline time.Time
	// abandoned: the caller gave up while the write was queued, so a
	// batch that has not taken it yet leaves it out.
	abandoned atomic.Bool
	// err is the write's failure, set before done is closed.
	err  error
	done chan struct{}
}

func (q *queued) pending() *queued { return q }

// batchOp is a write the committer sends, alone or in a batch: one
// statement that returns one row, or none.
type batchOp interface {
	pending() *queued
	// statement returns the write's statement and its arguments.
	statement(service string) (sql string, args []any)
	// scan reads the statement's outcome from its row, setting it in the
	// write. An error fails the batch: an outcome of the write's own, as
	// a version mismatch, is not one.
	scan(row pgx.Row) error
	// rank places the write in its batch (sortBatch).
	rank() opRank
}

// opRank orders the writes of a batch: state writes first, then appends
// by partition.
type opRank struct {
	append    bool
	provider  string
	partition uint32
}

func compareRanks(a, b opRank) int {
	switch {
	case a.append != b.append:
		if a.append {
			return 1
		}
		return -1
	case a.provider != b.provider:
		return strings.Compare(a.provider, b.provider)
	}
	return cmp.Compare(a.partition, b.partition)
}

// sortBatch orders batch by rank, keeping the order of writes of one rank
// (the state writes among themselves, and one partition's appends).
func sortBatch(batch []batchOp) {
	slices.SortStableFunc(batch, func(a, b batchOp) int { return compareRanks(a.rank(), b.rank()) })
}

// writeOp is one state write waiting for its batch: an insert of a record
// that must not exist yet, or an update of one at version.
type writeOp struct {
	queued
	insert  bool
	grainID string
	name    string
	data    []byte // nil: clear
	version int64  // the version an update expects

	// The outcome, once done: the record's new version, or matched false
	// when it was not at version (or existed, for an insert).
	newVersion int64
	matched    bool
}

// committer queues writes and sends them in batches, at most slots at a
// time (the pool's size).
type committer struct {
	s     *Store
	slots int

	mu      sync.Mutex
	queue   []batchOp // mu held
	running int       // batches in flight; mu held
	closed  bool      // mu held: no drain starts
	drains  sync.WaitGroup
}

// do runs op, alone or in a batch, and returns its failure; its outcome
// is then in op. If ctx ends first, do returns its error, and the write
// may still be made. Any goroutine.
func (c *committer) do(ctx context.Context, op batchOp) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q := op.pending()
	q.deadline = time.Now().Add(batchTimeout)
	if d, ok := ctx.Deadline(); ok {
		q.deadline = d
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return storage.ErrClosed
	}
	if c.running < c.slots {
		c.running++
		batch := append(c.takeLocked(), op)
		c.mu.Unlock()
		if len(batch) == 1 {
			c.send(ctx, batch) // alone, under the caller's own context
		} else {
			c.sendQueued(batch)
		}
		c.release()
		return q.err
	}
	q.done = make(chan struct{})
	c.queue = append(c.queue, op)
	c.mu.Unlock()
	select {
	case <-q.done:
		return q.err
	case <-ctx.Done():
		q.abandoned.Store(true)
		return ctx.Err()
	}
}

// takeLocked takes up to maxBatch-1 queued writes, leaving out those
// whose callers gave up. mu held.
func (c *committer) takeLocked() []batchOp {
	batch := make([]batchOp, 0, min(len(c.queue), maxBatch-1)+1)
	n := 0
	for _, op := range c.queue {
		if len(batch) == maxBatch-1 {
			break
		}
		n++
		if q := op.pending(); q.abandoned.Load() {
			close(q.done)
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
			c.sendQueued(batch)
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
		q := op.pending()
		q.err = storage.ErrClosed
		close(q.done)
	}
	c.queue = nil
}

// sendQueued sends a batch of queued writes. Its context ends at the
// latest of the writes' deadlines, and no caller's cancellation ends it: a
// write whose caller gave up after it was taken goes with the others (its
// caller was told nothing either way).
func (c *committer) sendQueued(batch []batchOp) {
	if len(batch) == 0 {
		return
	}
	latest := batch[0].pending().deadline
	for _, op := range batch[1:] {
		if d := op.pending().deadline; d.After(latest) {
			latest = d
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	c.send(ctx, batch)
}

// send runs batch in one implicit transaction, in sortBatch's order, and
// hands each write its outcome. A write alone goes as a plain query, which
// costs the driver less than a batch of one.
func (c *committer) send(ctx context.Context, batch []batchOp) {
	var err error
	if len(batch) == 1 {
		sql, args := batch[0].statement(c.s.service)
		err = batch[0].scan(c.s.pool.QueryRow(ctx, sql, args...))
	} else {
		sortBatch(batch)
		b := &pgx.Batch{}
		for _, op := range batch {
			sql, args := op.statement(c.s.service)
			b.Queue(sql, args...)
		}
		br := c.s.pool.SendBatch(ctx, b)
		for _, op := range batch {
			if err = op.scan(br.QueryRow()); err != nil {
				break
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr // the commit's own failure
		}
	}
	for _, op := range batch {
		q := op.pending()
		if err != nil {
			q.err = err
		}
		if q.done != nil {
			close(q.done)
		}
	}
}

func (op *writeOp) statement(service string) (string, []any) {
	if op.insert {
		return insertStateSQL, []any{service, op.grainID, op.name, op.data}
	}
	return updateStateSQL, []any{service, op.grainID, op.name, op.data, op.version}
}

func (op *writeOp) scan(row pgx.Row) error {
	err := row.Scan(&op.newVersion)
	op.matched = err == nil
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // not at the version expected
	}
	return err
}

func (op *writeOp) rank() opRank { return opRank{} }

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
