package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// formatVersion is the layout this package writes (see the package doc).
// Open refuses a file with a newer one.
const formatVersion = 1

// DefaultOpenTimeout is how long Open waits for the file lock unless
// configured otherwise.
const DefaultOpenTimeout = time.Second

// flockRetry is how often bbolt tries to take the file lock held by
// another process.
const flockRetry = 50 * time.Millisecond

// batchDelay is the longest a write waits for others to join its batch
// (bbolt's MaxBatchDelay). bbolt's default, 10ms, is many times a commit
// on a local SSD and idles the disk between batches, so concurrent writers
// get far less throughput than with 1ms. See BenchmarkStateWrite and
// docs/benchmarks.md#the-embedded-stores-batch-delay.
const batchDelay = time.Millisecond

var (
	bucketMeta        = []byte("meta")
	bucketState       = []byte("state")
	bucketReminders   = []byte("reminders")
	bucketReminderIdx = []byte("reminderIdx")
	bucketStreams     = []byte("streams")
	keyFormat         = []byte("format")
)

// Config configures a Store.
type Config struct {
	// Path is the database file. Its directory is created (mode 0o755)
	// if missing. Required.
	Path string
	// MaxStateSize is the largest state, in bytes, WriteState stores;
	// larger ones fail with storage.ErrTooLarge. 0 means
	// storage.DefaultMaxStateSize.
	MaxStateSize int
	// OpenTimeout is how long Open waits for the file lock when another
	// process (or another Store in this one) holds it, before failing; it
	// tries every 50ms, so it fails at most 50ms later. 0 means
	// DefaultOpenTimeout.
	OpenTimeout time.Duration
	// Clock gives the stream log's records their times; nil means
	// storage.SystemClock. A silo passes its own clock, so that a fake
	// one in tests governs retention too.
	Clock storage.Clock
}

// DefaultConfig returns the configuration of a store at path with every
// other field at its default.
func DefaultConfig(path string) Config {
	return Config{Path: path, MaxStateSize: storage.DefaultMaxStateSize, OpenTimeout: DefaultOpenTimeout}
}

func (c Config) validate() error {
	switch {
	case c.Path == "":
		return errors.New("boltstore: config: Path: required")
	case c.MaxStateSize < 0:
		return fmt.Errorf("boltstore: config: MaxStateSize: %d is negative (0 means the default)", c.MaxStateSize)
	case c.OpenTimeout < 0:
		return fmt.Errorf("boltstore: config: OpenTimeout: %v is negative (0 means the default)", c.OpenTimeout)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxStateSize == 0 {
		c.MaxStateSize = storage.DefaultMaxStateSize
	}
	if c.OpenTimeout == 0 {
		c.OpenTimeout = DefaultOpenTimeout
	}
	return c
}

// Store is a storage.Provider, storage.ReminderTable and
// storage.StreamLog kept in a bbolt file. Its methods may be called from
// any goroutine, concurrently.
type Store struct {
	db           *bolt.DB
	path         string
	maxStateSize int
	clock        storage.Clock
	appends      appender // the stream log's appends, in group commits

	// writers counts the write operations in flight, to let a lone
	// writer commit without waiting for a batch.
	writers atomic.Int64

	// mu is held shared by every operation and exclusively by Close, so
	// Close waits for the operations in flight.
	mu     sync.RWMutex
	closed bool // mu held
}

var (
	_ storage.Provider      = (*Store)(nil)
	_ storage.ReminderTable = (*Store)(nil)
)

// Open opens the store in cfg.Path, creating the file (and its directory)
// if missing. It fails if cfg is invalid, if another process holds the
// file for longer than cfg.OpenTimeout, or if the file is not a store of a
// format this package reads.
func Open(cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o755); err != nil {
		return nil, fmt.Errorf("boltstore: open %s: %w", cfg.Path, err)
	}
	// bbolt tries the lock every flockRetry and gives up once the next
	// wait would take it past its timeout: add one, to wait OpenTimeout.
	db, err := bolt.Open(cfg.Path, 0o600, &bolt.Options{Timeout: cfg.OpenTimeout + flockRetry})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("boltstore: open %s: another process holds the file (waited %v for its lock): %w", cfg.Path, cfg.OpenTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("boltstore: open %s: %w", cfg.Path, err)
	}
	db.MaxBatchDelay = batchDelay
	if err := db.Update(initLayout); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("boltstore: open %s: %w", cfg.Path, err)
	}
	s := &Store{db: db, path: cfg.Path, maxStateSize: cfg.MaxStateSize, clock: cfg.Clock}
	if s.clock == nil {
		s.clock = storage.SystemClock{}
	}
	s.appends.s = s
	return s, nil
}

// initLayout checks the file's format version, writing it into a new file,
// and creates the buckets.
func initLayout(tx *bolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	switch v := meta.Get(keyFormat); {
	case v == nil:
		if err := meta.Put(keyFormat, binary.BigEndian.AppendUint64(nil, formatVersion)); err != nil {
			return err
		}
	case len(v) != 8:
		return fmt.Errorf("format version is %d bytes, not 8: not a store file", len(v))
	case binary.BigEndian.Uint64(v) > formatVersion:
		return fmt.Errorf("format version %d is newer than this build reads (%d)", binary.BigEndian.Uint64(v), formatVersion)
	case binary.BigEndian.Uint64(v) == 0:
		return errors.New("format version 0: not a store file")
	}
	// A file from before a bucket existed gets it here, empty: adding a
	// bucket keeps the format version, since older builds ignore it.
	for _, name := range [][]byte{bucketState, bucketReminders, bucketReminderIdx, bucketStreams} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	return nil
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close waits for the operations in flight and closes the file. Later
// calls, and operations after it, fail with storage.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.errClosed()
	}
	s.closed = true
	// No operation is in flight (mu is held), so the appends queued are
	// those whose callers gave up: the appender drops them.
	s.appends.close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("boltstore: close %s: %w", s.path, err)
	}
	return nil
}

func (s *Store) errClosed() error { return fmt.Errorf("boltstore: %s: %w", s.path, storage.ErrClosed) }

// enter starts an operation: it fails if ctx is done or the store closed,
// and otherwise returns holding s.mu shared, which the caller releases.
func (s *Store) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return s.errClosed()
	}
	return nil
}

// update runs fn in a write transaction: in a batch shared with
// concurrent writers, or on its own when there are none. fn may run more
// than once, each time in a new transaction, and must compute all it does
// and reports from the transaction it is given. s.mu held shared.
func (s *Store) update(fn func(*bolt.Tx) error) error {
	defer s.writers.Add(-1)
	if s.writers.Add(1) == 1 {
		return s.db.Update(fn)
	}
	return s.db.Batch(fn)
}

// checkName refuses names with the key separator in them.
func checkName(what, name string) error {
	if strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("boltstore: %w: %s name %q contains a NUL byte", storage.ErrInvalid, what, name)
	}
	return nil
}

// recordKey is the key of grain id's state or reminder name.
func recordKey(id grain.ID, name string) []byte {
	k := make([]byte, 0, len(id.Type)+1+len(id.Key)+1+len(name))
	k = append(k, id.Type...)
	k = append(k, '/')
	k = append(k, id.Key...)
	k = append(k, 0)
	return append(k, name...)
}

// grainPrefix is the prefix of grain id's keys in the state and
// reminders buckets.
func grainPrefix(id grain.ID) []byte {
	k := recordKey(id, "")
	return k[:len(k):len(k)]
}

// splitKey splits a record key into its grain and name at the last NUL
// byte (names have none).
func splitKey(k []byte) (grain.ID, string, error) {
	i := bytes.LastIndexByte(k, 0)
	if i < 0 {
		return grain.ID{}, "", fmt.Errorf("corrupt key %q: no separator", k)
	}
	id, err := grain.ParseID(string(k[:i]))
	if err != nil {
		return grain.ID{}, "", fmt.Errorf("corrupt key %q: %w", k, err)
	}
	return id, string(k[i+1:]), nil
}

// State records.

const stateHeader = 9 // version (8) | exists (1)

// stateVersion returns the version of the state record v (nil: none).
func stateVersion(id grain.ID, name string, v []byte) (uint64, error) {
	if v == nil {
		return 0, nil
	}
	if len(v) < stateHeader {
		return 0, fmt.Errorf("%s state %q: corrupt record of %d bytes", id, name, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func encodeState(version uint64, exists bool, data []byte) []byte {
	v := make([]byte, stateHeader, stateHeader+len(data))
	binary.BigEndian.PutUint64(v, version)
	if exists {
		v[8] = 1
	}
	return append(v, data...)
}

// ReadState implements storage.Provider.
func (s *Store) ReadState(ctx context.Context, id grain.ID, name string) (storage.Record, error) {
	if err := s.enter(ctx); err != nil {
		return storage.Record{}, err
	}
	defer s.mu.RUnlock()
	if err := checkName("state", name); err != nil {
		return storage.Record{}, err
	}
	key := recordKey(id, name)
	var r storage.Record
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketState).Get(key)
		version, err := stateVersion(id, name, v)
		if err != nil || version == 0 {
			return err
		}
		r.ETag = storage.FormatVersion(version)
		if r.Exists = v[8] != 0; r.Exists {
			r.Data = bytes.Clone(v[stateHeader:]) // non-nil, even when empty
		}
		return nil
	})
	if err != nil {
		return storage.Record{}, s.txErr(err)
	}
	return r, nil
}

// WriteState implements storage.Provider.
func (s *Store) WriteState(ctx context.Context, id grain.ID, name string, data []byte, etag string) (string, error) {
	if err := s.enter(ctx); err != nil {
		return "", err
	}
	defer s.mu.RUnlock()
	if err := checkName("state", name); err != nil {
		return "", err
	}
	if err := storage.CheckSize(id, name, data, s.maxStateSize); err != nil {
		return "", err
	}
	key := recordKey(id, name)
	given, ok := storage.ParseVersion(etag)
	return s.putState(id, name, key, etag, given, ok, true, data)
}

// ClearState implements storage.Provider.
func (s *Store) ClearState(ctx context.Context, id grain.ID, name string, etag string) (string, error) {
	if err := s.enter(ctx); err != nil {
		return "", err
	}
	defer s.mu.RUnlock()
	if err := checkName("state", name); err != nil {
		return "", err
	}
	key := recordKey(id, name)
	given, ok := storage.ParseVersion(etag)
	if ok && given == 0 {
		// Only a record that never existed has version 0: if there is
		// none, there is nothing to write, and if there is one, "" is a
		// mismatch. Either way a read transaction decides.
		var stored uint64
		err := s.db.View(func(tx *bolt.Tx) error {
			var err error
			stored, err = stateVersion(id, name, tx.Bucket(bucketState).Get(key))
			return err
		})
		if err != nil {
			return "", s.txErr(err)
		}
		if stored != 0 {
			return "", storage.Mismatch(id, name, storage.FormatVersion(stored), etag)
		}
		return "", nil
	}
	return s.putState(id, name, key, etag, given, ok, false, nil)
}

// putState stores the record at key as a new version, with data (exists)
// or as a tombstone, if it is at version given; ok false (an ETag that
// names no version) is a mismatch. mu held shared.
func (s *Store) putState(id grain.ID, name string, key []byte, etag string, given uint64, ok, exists bool, data []byte) (string, error) {
	var (
		version  uint64
		mismatch error
	)
	err := s.update(func(tx *bolt.Tx) error {
		version, mismatch = 0, nil
		b := tx.Bucket(bucketState)
		stored, err := stateVersion(id, name, b.Get(key))
		if err != nil {
			return err
		}
		if !ok || given != stored {
			mismatch = storage.Mismatch(id, name, storage.FormatVersion(stored), etag)
			return nil
		}
		version = stored + 1
		return b.Put(key, encodeState(version, exists, data))
	})
	if err != nil {
		return "", s.txErr(err)
	}
	if mismatch != nil {
		return "", mismatch
	}
	return storage.FormatVersion(version), nil
}

// txErr wraps the error of a transaction, bbolt's or one of the
// "corrupt ..." errors of decoding, with the store's path.
func (s *Store) txErr(err error) error { return fmt.Errorf("boltstore: %s: %w", s.path, err) }

// Reminders.

// reminderSize is the size of a reminder value: hash (8), first tick
// seconds (8) and nanoseconds (4), period (8), version (8).
const reminderSize = 36

type reminder struct {
	hash      uint64
	firstTick time.Time
	period    time.Duration
	version   uint64
}

func (r reminder) encode() []byte {
	v := make([]byte, 0, reminderSize)
	v = binary.BigEndian.AppendUint64(v, r.hash)
	v = binary.BigEndian.AppendUint64(v, uint64(r.firstTick.Unix()))
	v = binary.BigEndian.AppendUint32(v, uint32(r.firstTick.Nanosecond()))
	v = binary.BigEndian.AppendUint64(v, uint64(r.period))
	return binary.BigEndian.AppendUint64(v, r.version)
}

func decodeReminder(k, v []byte) (reminder, error) {
	if len(v) != reminderSize {
		return reminder{}, fmt.Errorf("reminder %q: corrupt value of %d bytes", k, len(v))
	}
	return reminder{
		hash:      binary.BigEndian.Uint64(v),
		firstTick: time.Unix(int64(binary.BigEndian.Uint64(v[8:])), int64(binary.BigEndian.Uint32(v[16:]))).UTC(),
		period:    time.Duration(binary.BigEndian.Uint64(v[20:])),
		version:   binary.BigEndian.Uint64(v[28:]),
	}, nil
}

// entry decodes the reminders bucket's pair k, v.
func entry(k, v []byte) (storage.ReminderEntry, error) {
	id, name, err := splitKey(k)
	if err != nil {
		return storage.ReminderEntry{}, err
	}
	r, err := decodeReminder(k, v)
	if err != nil {
		return storage.ReminderEntry{}, err
	}
	return storage.ReminderEntry{
		Grain: id, Name: name, Hash: r.hash,
		FirstTick: r.firstTick, Period: r.period,
		ETag: storage.FormatVersion(r.version),
	}, nil
}

// indexKey is the reminderIdx key of the reminder with primary key k.
func indexKey(hash uint64, k []byte) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(k)), hash), k...)
}

// UpsertReminder implements storage.ReminderTable.
func (s *Store) UpsertReminder(ctx context.Context, e storage.ReminderEntry) (string, error) {
	if err := s.enter(ctx); err != nil {
		return "", err
	}
	defer s.mu.RUnlock()
	if err := checkName("reminder", e.Name); err != nil {
		return "", err
	}
	if err := storage.CheckID(e.Grain); err != nil {
		return "", fmt.Errorf("boltstore: %w", err)
	}
	key := recordKey(e.Grain, e.Name)
	var version uint64
	err := s.update(func(tx *bolt.Tx) error {
		prim, idx := tx.Bucket(bucketReminders), tx.Bucket(bucketReminderIdx)
		if old := prim.Get(key); old != nil {
			r, err := decodeReminder(key, old)
			if err != nil {
				return err
			}
			if err := idx.Delete(indexKey(r.hash, key)); err != nil {
				return err
			}
		}
		var err error
		if version, err = prim.NextSequence(); err != nil {
			return err
		}
		r := reminder{hash: e.Hash, firstTick: e.FirstTick, period: e.Period, version: version}
		if err := prim.Put(key, r.encode()); err != nil {
			return err
		}
		return idx.Put(indexKey(e.Hash, key), nil)
	})
	if err != nil {
		return "", s.txErr(err)
	}
	return storage.FormatVersion(version), nil
}

// RemoveReminder implements storage.ReminderTable.
func (s *Store) RemoveReminder(ctx context.Context, id grain.ID, name, etag string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := checkName("reminder", name); err != nil {
		return err
	}
	key := recordKey(id, name)
	var mismatch error
	err := s.update(func(tx *bolt.Tx) error {
		mismatch = nil
		prim := tx.Bucket(bucketReminders)
		old := prim.Get(key)
		if old == nil {
			return nil
		}
		r, err := decodeReminder(key, old)
		if err != nil {
			return err
		}
		if stored := storage.FormatVersion(r.version); etag != "" && etag != stored {
			mismatch = storage.Mismatch(id, "reminder "+name, stored, etag)
			return nil
		}
		if err := tx.Bucket(bucketReminderIdx).Delete(indexKey(r.hash, key)); err != nil {
			return err
		}
		return prim.Delete(key)
	})
	if err != nil {
		return s.txErr(err)
	}
	return mismatch
}

// GrainReminders implements storage.ReminderTable.
func (s *Store) GrainReminders(ctx context.Context, id grain.ID) ([]storage.ReminderEntry, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	prefix := grainPrefix(id)
	var out []storage.ReminderEntry
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketReminders).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if bytes.IndexByte(k[len(prefix):], 0) >= 0 {
				continue // another grain's, whose key extends id's with a NUL
			}
			e, err := entry(k, v)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, s.txErr(err)
	}
	return out, nil // by name: the keys are the prefix and the name
}

// RangeReminders implements storage.ReminderTable. It returns the
// reminders by hash, each once however many of ranges hold it.
func (s *Store) RangeReminders(ctx context.Context, ranges []storage.HashRange) ([]storage.ReminderEntry, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	ranges = storage.NormalizeRanges(ranges)
	var out []storage.ReminderEntry
	err := s.db.View(func(tx *bolt.Tx) error {
		prim := tx.Bucket(bucketReminders)
		c := tx.Bucket(bucketReminderIdx).Cursor()
		var lo [8]byte
		for _, r := range ranges {
			binary.BigEndian.PutUint64(lo[:], r.Lo)
			for k, _ := c.Seek(lo[:]); k != nil; k, _ = c.Next() {
				if len(k) < 8 {
					return fmt.Errorf("corrupt reminder index key %q", k)
				}
				if binary.BigEndian.Uint64(k) > r.Hi {
					break
				}
				v := prim.Get(k[8:])
				if v == nil {
					return fmt.Errorf("corrupt reminder index: key %q has no reminder", k)
				}
				e, err := entry(k[8:], v)
				if err != nil {
					return err
				}
				out = append(out, e)
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.txErr(err)
	}
	return out, nil
}
