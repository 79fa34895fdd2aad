// Package reload keeps a value parsed from files and parses it again when
// the files change, without a goroutine: a reader asks for the value, and
// the files are read again at most once per interval, on the reader's
// goroutine. A reader that finds another reading the files takes the
// value in use rather than wait. A change that does not parse is logged
// once per state of the files, a missing file included, and the value in
// use is kept. security/tlsfiles (certificates) and security/auth (token
// files) are its users.
//
// It imports zap and the clock only.
package reload

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
)

// Options tune a Value.
type Options[T any] struct {
	// Read returns the files' contents; any change of them is a change.
	Read func() ([]byte, error)
	// Parse turns the contents into the value, or refuses them.
	Parse func(raw []byte) (T, error)
	// Interval is how often at most the files are read again.
	Interval time.Duration
	// Clock paces the reads. Default: the real clock.
	Clock clockwork.Clock
	// Logger receives Failed as a warning and Loaded as information,
	// with Loaded's fields. Default: none.
	Logger         *zap.Logger
	Failed, Loaded string
	Fields         func(T) []zap.Field
}

// Value is a value parsed from files. Its methods may be called from any
// goroutine.
type Value[T any] struct {
	o Options[T]

	cur       atomic.Pointer[loaded[T]]
	nextCheck atomic.Int64 // unix nanoseconds of the next read
	mu        sync.Mutex   // one read at a time; guards failed
	failed    []byte       // the contents that last failed, to log them once
	failedErr string       // and their error
}

type loaded[T any] struct {
	raw []byte
	v   T
}

// New reads and parses the files, which must parse.
func New[T any](o Options[T]) (*Value[T], error) {
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	raw, err := o.Read()
	if err != nil {
		return nil, err
	}
	v, err := o.Parse(raw)
	if err != nil {
		return nil, err
	}
	r := &Value[T]{o: o}
	r.cur.Store(&loaded[T]{raw: raw, v: v})
	r.nextCheck.Store(o.Clock.Now().Add(o.Interval).UnixNano())
	return r, nil
}

// Get returns the value in use, after reading the files again when that
// is due.
func (r *Value[T]) Get() T {
	if now := r.o.Clock.Now().UnixNano(); now >= r.nextCheck.Load() && r.mu.TryLock() {
		if now >= r.nextCheck.Load() {
			r.nextCheck.Store(now + r.o.Interval.Nanoseconds())
			_ = r.checkLocked() // logged by checkLocked
		}
		r.mu.Unlock()
	}
	return r.cur.Load().v
}

// Check reads the files now, and takes their contents if they changed and
// parse. It returns the error that kept a change out.
func (r *Value[T]) Check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextCheck.Store(r.o.Clock.Now().Add(r.o.Interval).UnixNano())
	return r.checkLocked()
}

// checkLocked reads the files. mu held.
func (r *Value[T]) checkLocked() error {
	raw, err := r.o.Read()
	if err == nil && bytes.Equal(raw, r.cur.Load().raw) {
		r.failed, r.failedErr = nil, ""
		return nil
	}
	var v T
	if err == nil {
		v, err = r.o.Parse(raw)
	}
	if err != nil {
		if !bytes.Equal(raw, r.failed) || err.Error() != r.failedErr {
			r.failed, r.failedErr = raw, err.Error()
			r.o.Logger.Warn(r.o.Failed, zap.Error(err))
		}
		return err
	}
	r.failed, r.failedErr = nil, ""
	r.cur.Store(&loaded[T]{raw: raw, v: v})
	var fields []zap.Field
	if r.o.Fields != nil {
		fields = r.o.Fields(v)
	}
	r.o.Logger.Info(r.o.Loaded, fields...)
	return nil
}
