package activation

import (
	"errors"
	"fmt"
	"sync"
)

// Errors reported by the scheduler. Their text begins with the package name.
var (
	// ErrClosed is returned by Enqueue after the pool has stopped, and is
	// passed to Task.Done for every turn the pool dropped without running.
	ErrClosed = errors.New("activation: pool closed")
	// ErrNilTask is returned by Enqueue for a Turn without a Task.
	ErrNilTask = errors.New("activation: turn has no task")
)

// A Task is the code of a turn and the party told how it ended.
//
// The pool calls Run at most once, on a worker that holds the group's run
// token, so Run never overlaps another turn of the same group. It then calls
// Done exactly once: with nil after Run returned, with a *PanicError when Run
// panicked, or with ErrClosed when the pool dropped the turn without running
// it. Every turn that Enqueue accepted gets its Done call.
//
// Done must not block or panic. It may run on a worker (e is that worker's
// Exec, usable for Exec.Signal and Exec.Enqueue during the call) or on the
// goroutine that closed the pool (e is nil).
//
// A Task is usually a pointer to a long-lived or pooled object, so that
// queuing it does not allocate.
type Task interface {
	Run(e *Exec)
	Done(e *Exec, err error)
}

// Turn is one unit of work queued on a group: a value, copied into the
// group's queue, so enqueuing a Turn whose Task is a pointer does not
// allocate. It is four words (32 bytes), two to a 64-byte cache line
// (TestGroupLayout fails if it grows): queue copies are most of the
// scheduler's memory traffic, so a turn carries nothing else. Whether a
// turn is a system turn is decided by how it is enqueued (EnqueueSystem),
// not stored in every Turn.
type Turn struct {
	// Task is the code to run. Required.
	Task Task
	// Name identifies the turn in warnings and stats, for example the grain
	// method it serves. It should be a constant or otherwise long-lived.
	Name string
}

// PanicError is passed to Task.Done when Run panicked. The group and the
// pool keep running.
type PanicError struct {
	Group string // label of the group the turn ran on
	Turn  string // name of the turn
	Value any    // the value passed to panic
	Stack []byte // the panicking goroutine's stack
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("activation: turn %q of group %q panicked: %v", e.Turn, e.Group, e.Value)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// segmentSize is the number of turns per queue segment: small enough that
// a lightly used group wastes little, large enough that a busy group takes
// a segment from the pool rarely.
const segmentSize = 16

type segment struct {
	turns [segmentSize]Turn
	next  *segment
}

var segmentPool = sync.Pool{New: func() any { return new(segment) }}

// turnQueue is an unbounded FIFO of turns: one inline slot, then pooled
// fixed-size segments. A queue that holds one turn at a time, the common
// case for an activation, never touches the segment pool; an empty queue
// holds no segment, so an idle group costs only the queue header. Not safe
// for concurrent use: the group's mu guards it.
//
// A bounded per-group queue can deadlock: a turn that enqueues onto a full
// group whose drain needs the enqueuing worker would wait forever. So the
// queue grows without limit; admission control belongs to the layer above.
type turnQueue struct {
	// The header comes first and one last: in a Group the header shares
	// the lock's cache line, and one fills the next line.
	head, tail *segment
	hi, ti     int  // next index to read in head, next index to write in tail
	n          int  // turns in all, one included
	oneFull    bool // one holds the oldest turn
	one        Turn
}

func (q *turnQueue) push(t Turn) {
	q.n++
	if q.n == 1 {
		q.one, q.oneFull = t, true
		return
	}
	if q.tail == nil {
		s := segmentPool.Get().(*segment)
		q.head, q.tail, q.hi, q.ti = s, s, 0, 0
	} else if q.ti == segmentSize {
		s := segmentPool.Get().(*segment)
		q.tail.next = s
		q.tail, q.ti = s, 0
	}
	q.tail.turns[q.ti] = t
	q.ti++
}

// peek returns the oldest turn without removing it.
func (q *turnQueue) peek() (Turn, bool) {
	switch {
	case q.oneFull:
		return q.one, true
	case q.n == 0:
		return Turn{}, false
	}
	return q.head.turns[q.hi], true
}

// at returns the i-th oldest turn, if there is one.
func (q *turnQueue) at(i int) (Turn, bool) {
	if i < 0 || i >= q.n {
		return Turn{}, false
	}
	if q.oneFull {
		if i == 0 {
			return q.one, true
		}
		i--
	}
	s, j := q.head, q.hi+i
	for j >= segmentSize {
		s, j = s.next, j-segmentSize
	}
	return s.turns[j], true
}

// A cursor is a read position in a turnQueue: where its oldest turn was
// when front was called.
type cursor struct {
	q   *turnQueue
	one bool // the oldest turn is in q.one
	seg *segment
	i   int
}

// front returns the position of the oldest turn. Guarded like the queue.
func (q *turnQueue) front() cursor { return cursor{q: q, one: q.oneFull, seg: q.head, i: q.hi} }

// copy copies the len(buf) oldest turns from c into buf; the queue must
// hold that many. Turns in the queue are not written again until removed,
// and only the group's token holder removes them, so the token holder may
// copy without the lock, after taking c and the count under it: a
// producer appends behind them and links new segments only past the last
// one read here.
func (c cursor) copy(buf []Turn) {
	k := 0
	if c.one && len(buf) > 0 {
		buf[0] = c.q.one
		k = 1
	}
	s, j := c.seg, c.i
	for ; k < len(buf); k++ {
		if j == segmentSize {
			s, j = s.next, 0
		}
		buf[k] = s.turns[j]
		j++
	}
}

// popN removes the m oldest turns; the queue must hold at least m. It
// returns the segments it emptied, linked through next in front of freed,
// for releaseSegments after the lock is dropped: putting them back to the
// pool under the group's lock kept producers waiting.
func (q *turnQueue) popN(m int, freed *segment) *segment {
	if m <= 0 {
		return freed
	}
	q.n -= m
	if q.oneFull {
		q.one, q.oneFull = Turn{}, false
		m--
	}
	// Consumed slots are not cleared: the write would pull the line back
	// from the producer's core for nothing. A segment's stale turns are
	// released when it is recycled (sync.Pool empties at GC) or reused.
	for m > 0 {
		s := q.head
		end := segmentSize
		if s == q.tail {
			end = q.ti
		}
		k := min(m, end-q.hi)
		q.hi += k
		m -= k
		if q.hi < end {
			break
		}
		if s == q.tail {
			q.head, q.tail = nil, nil
		} else {
			q.head, q.hi = s.next, 0
		}
		s.next = freed
		freed = s
	}
	return freed
}

// releaseSegments returns a chain made by popN to the pool. No lock needed:
// the segments are no longer reachable from any queue.
func releaseSegments(s *segment) {
	for s != nil {
		next := s.next
		s.next = nil
		segmentPool.Put(s)
		s = next
	}
}
