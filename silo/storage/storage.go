// Package storage defines what keeps grain state, reminders and durable
// streams: the Provider, ReminderTable and StreamLog interfaces, their
// errors, and Memory, an in-memory provider for tests that can fail, delay
// and block operations. The embedded (bbolt) provider is in
// storage/boltstore, the PostgreSQL one in storage/pgstore, and the
// contract every provider meets is the test suite in storage/storagetest.
//
// # ETags
//
// A state record has an ETag, an opaque version that changes on every
// write and clear and is never reused for the record. A write or clear
// names the ETag the writer last saw ("" for no record) and succeeds only
// if the record still has it; otherwise it fails with ErrETagMismatch and
// changes nothing. Clearing keeps the record's ETag history: a cleared
// record reads as not existing, with a new ETag, so a writer holding an
// ETag from before the clear is refused too.
//
// # Stream logs
//
// A StreamLog owns the durable streams' events and their subscribers'
// progress: for each partition of each durable stream provider, an
// append-only log of records, and a cursor per subscription. The log
// assigns each record its offset, consecutive from 1 and never reused,
// and its time, from the provider's Clock but never before the
// partition's previous append, so that offsets and times rise together
// and OffsetAt can search by time. Trimming removes only the oldest
// records, by age or by total payload size, and leaves the next offset
// as it was. A cursor only moves forward, so a subscriber that saves
// late, or twice, never replays what it already acknowledged. What the
// records mean, which partition a stream belongs to and when to trim is
// the stream provider's business, not the log's.
//
// # Errors
//
// Providers return ErrETagMismatch, ErrTooLarge and ErrInvalid (wrapped,
// with detail) for those cases; ErrClosed once closed; a cancelled or
// expired context's error; and for any failure to reach the store, an
// error the runtime reports to callers as Unavailable. A stream log's
// ErrInvalid cases are a partition without a provider name, an empty
// subscription name, a Read's max below 1, a negative Trim size, and
// names or streams the store cannot hold.
package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/granaryio/granary/grain"
)

var (
	// ErrETagMismatch: the record's ETag is not the one the write or
	// clear named; nothing was changed.
	ErrETagMismatch = errors.New("storage: etag mismatch")
	// ErrTooLarge: the state is larger than the provider's limit; nothing
	// was stored.
	ErrTooLarge = errors.New("storage: state too large")
	// ErrClosed: the provider was closed.
	ErrClosed = errors.New("storage: provider closed")
	// ErrInvalid: the store cannot hold this grain ID or name (say, a NUL
	// byte where the store keeps text); trying again cannot succeed.
	ErrInvalid = errors.New("storage: grain ID or name the store cannot hold")
)

// DefaultMaxStateSize is the largest encoded state a provider stores
// unless configured otherwise: 4 MiB.
const DefaultMaxStateSize = 4 << 20

// Record is a stored state record.
type Record struct {
	// Data is the encoded state; nil when the record does not exist.
	Data []byte
	// ETag is the record's version; "" when there has never been a record.
	ETag string
	// Exists is false when there is no record, or it was cleared.
	Exists bool
}

// Provider keeps grain state records, one per grain and state name. Its
// methods may be called from any goroutine, concurrently.
type Provider interface {
	// ReadState returns the record of grain id's state name: Record{}
	// when there has never been one.
	ReadState(ctx context.Context, id grain.ID, name string) (Record, error)
	// WriteState stores data as the record if its ETag is etag ("" when
	// the writer saw no record), and returns the new ETag.
	WriteState(ctx context.Context, id grain.ID, name string, data []byte, etag string) (newETag string, err error)
	// ClearState removes the record's data if its ETag is etag, and
	// returns the record's new ETag. Clearing a record that never existed,
	// with etag "", succeeds and returns "".
	ClearState(ctx context.Context, id grain.ID, name string, etag string) (newETag string, err error)
}

// HashRange is the inclusive range [Lo, Hi] of ring positions. A range that
// would wrap around the top of the ring is given as two.
type HashRange struct{ Lo, Hi uint64 }

// Contains reports whether h is in the range.
func (r HashRange) Contains(h uint64) bool { return r.Lo <= h && h <= r.Hi }

// NormalizeRanges returns rs as a set in normal form: sorted, with
// overlapping and adjacent ranges merged and empty ones (Lo > Hi) dropped;
// nil when none is left. rs is not modified.
func NormalizeRanges(rs []HashRange) []HashRange {
	out := make([]HashRange, 0, len(rs))
	for _, r := range rs {
		if r.Lo <= r.Hi {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b HashRange) int { return cmp.Compare(a.Lo, b.Lo) })
	n := 0
	for _, r := range out {
		if n > 0 && (out[n-1].Hi == math.MaxUint64 || out[n-1].Hi+1 >= r.Lo) {
			out[n-1].Hi = max(out[n-1].Hi, r.Hi)
			continue
		}
		out[n] = r
		n++
	}
	if n == 0 {
		return nil
	}
	return out[:n]
}

// ReminderEntry is a stored reminder.
type ReminderEntry struct {
	Grain grain.ID
	Name  string
	// Hash is the grain's ring position, which the silo that owns it
	// fires the reminder by; the runtime computes it.
	Hash      uint64
	FirstTick time.Time
	Period    time.Duration
	// ETag is the entry's version: set by the table, ignored on upsert.
	ETag string
}

// ReminderTable keeps reminders, one per grain and name. Its methods may be
// called from any goroutine, concurrently.
type ReminderTable interface {
	// UpsertReminder stores r, replacing the grain's reminder of that name
	// whatever its ETag, and returns the new ETag.
	UpsertReminder(ctx context.Context, r ReminderEntry) (etag string, err error)
	// RemoveReminder removes the grain's reminder name if its ETag is etag,
	// or whatever it is when etag is "". A reminder that does not exist is
	// not an error; a different ETag is ErrETagMismatch.
	RemoveReminder(ctx context.Context, id grain.ID, name, etag string) error
	// GrainReminders returns the grain's reminders, by name.
	GrainReminders(ctx context.Context, id grain.ID) ([]ReminderEntry, error)
	// RangeReminders returns the reminders whose Hash is in any of ranges.
	RangeReminders(ctx context.Context, ranges []HashRange) ([]ReminderEntry, error)
}

// CheckSize returns an ErrTooLarge error when data is over limit bytes.
// Providers call it before writing.
func CheckSize(id grain.ID, name string, data []byte, limit int) error {
	if len(data) > limit {
		return fmt.Errorf("%w: %s state %q is %d bytes, over the limit of %d (MaxStateSize)", ErrTooLarge, id, name, len(data), limit)
	}
	return nil
}

// CheckID returns an ErrInvalid error for a grain ID that does not read
// back from its string form (an empty type or key, or a type with a '/'):
// stores that keep IDs as text refuse it rather than hold a row no read
// can decode. The runtime makes no such IDs.
func CheckID(id grain.ID) error {
	if back, err := grain.ParseID(id.String()); err != nil || back != id {
		return fmt.Errorf("%w: grain ID %q does not read back (type %q, key %q)", ErrInvalid, id, id.Type, id.Key)
	}
	return nil
}

// Mismatch returns an ErrETagMismatch error naming the record and both
// ETags.
func Mismatch(id grain.ID, name, stored, given string) error {
	return fmt.Errorf("%w: %s state %q is at version %q, not %q: another activation wrote it", ErrETagMismatch, id, name, stored, given)
}

// Version helpers: the providers in this module use a record's version
// number, which starts at 1 and grows by one on every write and clear, as
// its ETag.

// FormatVersion is the ETag of version v; "" for 0 (no record).
func FormatVersion(v uint64) string {
	if v == 0 {
		return ""
	}
	return strconv.FormatUint(v, 10)
}

// ParseVersion returns the version an ETag names: 0 for "", and ok false
// for an ETag no version has (which matches no record).
func ParseVersion(etag string) (v uint64, ok bool) {
	if etag == "" {
		return 0, true
	}
	v, err := strconv.ParseUint(etag, 10, 64)
	return v, err == nil && v > 0
}
