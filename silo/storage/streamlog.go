package storage

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// StreamPartition names one partition of one durable stream provider's log.
type StreamPartition struct {
	Provider string // the stream provider's name, e.g. "durable"
	N        uint32 // partition number
}

// String returns "provider/N", for errors and logs.
func (p StreamPartition) String() string {
	return p.Provider + "/" + strconv.FormatUint(uint64(p.N), 10)
}

// StreamRecord is one event in a partition's log.
type StreamRecord struct {
	// Offset is assigned by Append: consecutive within a partition from
	// 1, never reused, even after trimming.
	Offset uint64
	// Stream is the stream's "namespace/key", opaque to the log.
	Stream string
	// Type is the event's proto message full name, opaque to the log.
	Type string
	// Time is when the record was appended, by the log's clock, stored at
	// nanosecond precision. Assigned by Append, and never decreasing
	// within a partition, even if the clock goes back.
	Time time.Time
	// Payload is the encoded event, never interpreted.
	Payload []byte
}

// Size is what a record counts against a provider's size limit: its
// payload, stream and type together.
func (r *StreamRecord) Size() int { return len(r.Payload) + len(r.Stream) + len(r.Type) }

// A StreamLog keeps durable streams' events, in one append-only log per
// partition, and their subscribers' cursors. Its methods may be called
// from any goroutine, concurrently.
//
// A partition's kept records are always the offsets [oldest, next):
// trimming removes only the oldest, and offsets are never reused, so a
// reader that has handled offset n resumes at n+1 whatever was trimmed
// meanwhile. Records become visible to Read in offset order: once a Read
// returns offset n, no record below n is still to appear.
type StreamLog interface {
	// Append adds recs to p's log in order, atomically (all or none),
	// assigns their Offset and Time (setting them in recs), and returns
	// once they are durable. Concurrent Appends to a partition are
	// serialized; each caller's records stay contiguous. Appending no
	// records does nothing. A record over the provider's size limit
	// (Size, against its MaxStateSize) fails the whole Append with
	// ErrTooLarge.
	Append(ctx context.Context, p StreamPartition, recs []StreamRecord) error
	// Read returns up to max records of p with Offset >= from, in offset
	// order. If from is below the oldest record kept (trimmed), it starts
	// at the oldest kept. An empty result means nothing at or after from
	// yet. max must be positive.
	Read(ctx context.Context, p StreamPartition, from uint64, max int) ([]StreamRecord, error)
	// Bounds returns the oldest offset kept (0 if the log is empty) and
	// the offset the next Append will assign (1 for a log never appended
	// to).
	Bounds(ctx context.Context, p StreamPartition) (oldest, next uint64, err error)
	// OffsetAt returns the offset of the first record kept that was
	// appended at or after t (next if none).
	OffsetAt(ctx context.Context, p StreamPartition, t time.Time) (uint64, error)
	// Trim removes records of p appended before olderThan (zero: no age
	// limit), then the oldest records until the payload bytes kept are at
	// most maxBytes (0: no size limit; negative is ErrInvalid). It returns
	// how many were removed. It never changes the offsets of what remains
	// or the next offset.
	Trim(ctx context.Context, p StreamPartition, olderThan time.Time, maxBytes int64) (removed int, err error)
	// SaveCursor records that subscription sub has handled every event
	// of its stream up to offset (the next to deliver is offset+1). A
	// cursor only moves forward: saving an offset below the stored one
	// is a no-op (not an error). sub must not be empty.
	SaveCursor(ctx context.Context, p StreamPartition, sub string, offset uint64) error
	// Cursor returns sub's saved offset in p, and whether one is saved.
	Cursor(ctx context.Context, p StreamPartition, sub string) (offset uint64, ok bool, err error)
	// DeleteCursor forgets sub's cursor in p; deleting a missing one is
	// not an error.
	DeleteCursor(ctx context.Context, p StreamPartition, sub string) error
}

// A Clock tells the time. A stream log takes its records' times from one;
// clockwork's clocks, real and fake, are Clocks.
type Clock interface{ Now() time.Time }

// SystemClock is the Clock of time.Now.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Checks every StreamLog makes before touching its store, so that all
// providers refuse the same calls, with the same errors.

// CheckPartition returns an ErrInvalid error for a partition without a
// provider name.
func CheckPartition(p StreamPartition) error {
	if p.Provider == "" {
		return fmt.Errorf("%w: stream partition %d has no provider name", ErrInvalid, p.N)
	}
	return nil
}

// CheckSubscription returns an ErrInvalid error for an empty subscription
// name.
func CheckSubscription(p StreamPartition, sub string) error {
	if sub == "" {
		return fmt.Errorf("%w: empty subscription name in stream partition %s", ErrInvalid, p)
	}
	return nil
}

// CheckReadMax returns an ErrInvalid error for a Read's max that is not
// positive.
func CheckReadMax(p StreamPartition, max int) error {
	if max <= 0 {
		return fmt.Errorf("%w: read of stream partition %s for at most %d records: max must be positive", ErrInvalid, p, max)
	}
	return nil
}

// CheckTrimBytes returns an ErrInvalid error for a negative size limit.
func CheckTrimBytes(p StreamPartition, maxBytes int64) error {
	if maxBytes < 0 {
		return fmt.Errorf("%w: trim of stream partition %s to %d bytes: the limit is negative (0 means none)", ErrInvalid, p, maxBytes)
	}
	return nil
}

// CheckRecords returns an ErrTooLarge error for the first of recs whose
// Size is over limit bytes.
func CheckRecords(p StreamPartition, recs []StreamRecord, limit int) error {
	for i := range recs {
		if n := recs[i].Size(); n > limit {
			return fmt.Errorf("%w: record %d of an append to stream partition %s (stream %q) is %d bytes with its stream and type, over the limit of %d (MaxStateSize)",
				ErrTooLarge, i, p, recs[i].Stream, n, limit)
		}
	}
	return nil
}
