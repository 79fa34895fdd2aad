package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/silo/storage"
	bolt "go.etcd.io/bbolt"
)

// The stream log: the layout is in the package doc.

var (
	keyStreamMeta       = []byte("meta")
	bucketStreamLog     = []byte("log")
	bucketStreamCursors = []byte("cursors")
)

var _ storage.StreamLog = (*Store)(nil)

// maxAppendBatch bounds the appends one group commit takes, to bound the
// transaction and the wait of the last in it.
const maxAppendBatch = 1024

// logFillPercent is how full the log's pages are left when they split:
// keys only ever go at the end, so a page once split is never added to,
// and bbolt's default of half would leave every page half empty.
const logFillPercent = 1.0

// streamMeta is a partition's "meta" value: next (8) | bytes (8) |
// last (8).
type streamMeta struct {
	next  uint64 // the offset the next append assigns, from 1
	bytes int64  // the payload bytes of the records kept
	last  int64  // the time of the last append, nanoseconds since the Unix epoch
}

const streamMetaSize = 24

func (m streamMeta) encode() []byte {
	v := make([]byte, 0, streamMetaSize)
	v = binary.BigEndian.AppendUint64(v, m.next)
	v = binary.BigEndian.AppendUint64(v, uint64(m.bytes))
	return binary.BigEndian.AppendUint64(v, uint64(m.last))
}

// readMeta reads the meta of partition bucket pb: a partition without
// one (only cursors saved) is at offset 1.
func readMeta(pb *bolt.Bucket) (streamMeta, error) {
	v := pb.Get(keyStreamMeta)
	if v == nil {
		return streamMeta{next: 1, last: math.MinInt64}, nil
	}
	if len(v) != streamMetaSize {
		return streamMeta{}, fmt.Errorf("corrupt stream partition meta of %d bytes", len(v))
	}
	return streamMeta{
		next:  binary.BigEndian.Uint64(v),
		bytes: int64(binary.BigEndian.Uint64(v[8:])),
		last:  int64(binary.BigEndian.Uint64(v[16:])),
	}, nil
}

// partitionKey is p's key in the streams bucket: the provider's name and
// then N, 4 bytes big-endian. N's fixed width keeps the keys of providers
// whose names extend each other apart, so names may hold any byte.
func partitionKey(p storage.StreamPartition) []byte {
	return binary.BigEndian.AppendUint32(append(make([]byte, 0, len(p.Provider)+4), p.Provider...), p.N)
}

// checkPartition refuses a partition the contract refuses, or whose key
// bbolt cannot hold.
func checkPartition(p storage.StreamPartition) error {
	if err := storage.CheckPartition(p); err != nil {
		return fmt.Errorf("boltstore: %w", err)
	}
	if len(p.Provider)+4 > bolt.MaxKeySize {
		return fmt.Errorf("boltstore: %w: stream provider name of %d bytes, over the %d a key holds", storage.ErrInvalid, len(p.Provider), bolt.MaxKeySize-4)
	}
	return nil
}

func checkSubscription(p storage.StreamPartition, sub string) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	if err := storage.CheckSubscription(p, sub); err != nil {
		return fmt.Errorf("boltstore: %w", err)
	}
	if len(sub) > bolt.MaxKeySize {
		return fmt.Errorf("boltstore: %w: subscription name of %d bytes, over the %d a key holds", storage.ErrInvalid, len(sub), bolt.MaxKeySize)
	}
	return nil
}

// partitionBucket returns the bucket of the partition at key; nil if it
// has none.
func partitionBucket(tx *bolt.Tx, key []byte) *bolt.Bucket {
	return tx.Bucket(bucketStreams).Bucket(key)
}

// createPartition returns the bucket of the partition at key, creating it
// and its log and cursors buckets if missing. In a write transaction.
func createPartition(tx *bolt.Tx, key []byte) (*bolt.Bucket, error) {
	pb, err := tx.Bucket(bucketStreams).CreateBucketIfNotExists(key)
	if err != nil {
		return nil, err
	}
	for _, name := range [][]byte{bucketStreamLog, bucketStreamCursors} {
		if _, err := pb.CreateBucketIfNotExists(name); err != nil {
			return nil, err
		}
	}
	return pb, nil
}

// Records.
//
// A record's key is its offset, 8 bytes big-endian, so the log bucket is
// in offset order; its value is its time in Unix nanoseconds (8), its
// stream and type each as a uvarint length and the bytes, and the
// payload, the rest.

func offsetKey(o uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), o) }

// encodeRecord returns r's key and value in one buffer: key (8) | value.
// The offset and the time are left zero, for the commit to set with
// setRecordKey once it assigns them.
func encodeRecord(r *storage.StreamRecord) []byte {
	n := 8 + 8 + binary.MaxVarintLen64*2 + len(r.Stream) + len(r.Type) + len(r.Payload)
	b := make([]byte, 16, n)
	b = binary.AppendUvarint(b, uint64(len(r.Stream)))
	b = append(b, r.Stream...)
	b = binary.AppendUvarint(b, uint64(len(r.Type)))
	b = append(b, r.Type...)
	return append(b, r.Payload...)
}

// setRecordKey sets the offset and the time of an encodeRecord buffer,
// and returns its key and value.
func setRecordKey(b []byte, offset uint64, ns int64) (key, value []byte) {
	binary.BigEndian.PutUint64(b, offset)
	binary.BigEndian.PutUint64(b[8:], uint64(ns))
	return b[:8], b[8:]
}

// recordFields splits the value v of the record at key k into its time
// in Unix nanoseconds, stream, type and payload, which alias v.
func recordFields(k, v []byte) (ns int64, stream, typ, payload []byte, err error) {
	corrupt := func() error { return fmt.Errorf("stream record %x: corrupt value of %d bytes", k, len(v)) }
	if len(k) != 8 || len(v) < 8 {
		return 0, nil, nil, nil, corrupt()
	}
	ns = int64(binary.BigEndian.Uint64(v))
	rest := v[8:]
	field := func() []byte {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return nil
		}
		f := rest[w : w+int(n)]
		rest = rest[w+int(n):]
		return f
	}
	if stream = field(); stream == nil {
		return 0, nil, nil, nil, corrupt()
	}
	if typ = field(); typ == nil {
		return 0, nil, nil, nil, corrupt()
	}
	return ns, stream, typ, rest, nil
}

// decodeRecord decodes the record at k, v into memory of its own: v is
// bbolt's, valid only in its transaction.
func decodeRecord(k, v []byte) (storage.StreamRecord, error) {
	ns, stream, typ, payload, err := recordFields(k, v)
	if err != nil {
		return storage.StreamRecord{}, err
	}
	return storage.StreamRecord{
		Offset:  binary.BigEndian.Uint64(k),
		Stream:  string(stream),
		Type:    string(typ),
		Time:    time.Unix(0, ns).UTC(),
		Payload: bytes.Clone(payload),
	}, nil
}

// unixNanos returns t in nanoseconds since the Unix epoch, clamped to
// what an int64 holds (the years 1678 to 2262), for comparing with
// records' times.
func unixNanos(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// Group commit. A commit of the embedded store writes its pages and then
// its meta page, each followed by an fsync, so a commit costs two disk
// flushes whatever it holds: appenders that each waited for a commit of
// their own would share a few thousand appends a second. So an append
// that arrives while another commits waits in a queue, and the appends
// queued meanwhile go together in the next transaction, one commit for
// all of them. A lone appender commits at once, with no batch delay to
// wait out, and batches grow with the load: as many appends as arrived
// during the last commit. Unlike bbolt's DB.Batch (the baseline of
// BenchmarkStreamLogAppendViaBatch), nothing waits for a timer, nothing
// is run twice, and each partition's meta is read and written once per
// commit, not once per append.

// appendOp is one Append waiting for its commit.
type appendOp struct {
	key   []byte    // the partition's key
	recs  [][]byte  // the encodeRecord buffers, in order
	one   [1][]byte // backs recs for an append of one record: no slice to allocate
	bytes int64     // the payload bytes of recs
	// abandoned: the caller gave up while the append was queued, so a
	// commit that has not taken it yet leaves it out.
	abandoned atomic.Bool

	// The outcome, set before done is closed: the offset of the first
	// record and the records' time, or err.
	first uint64
	time  int64
	err   error
	done  chan struct{}
}

// appender queues appends and commits them in batches, one commit at a
// time: bbolt has one writer at a time anyway.
type appender struct {
	s *Store

	mu      sync.Mutex
	queue   []*appendOp // mu held
	running bool        // a commit is in flight; mu held
	closed  bool        // mu held: no drain starts
	drains  sync.WaitGroup

	// commitHook, when set (by tests), is told the size of each batch
	// before it commits.
	commitHook func(appends int)
}

// do commits op, alone or in a batch, and returns its outcome. If ctx ends
// first, do returns its error, and the append may still be made. s.mu held
// shared.
func (a *appender) do(ctx context.Context, op *appendOp) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return a.s.errClosed()
	}
	if !a.running {
		// Nothing is queued while no commit runs: commit at once.
		a.running = true
		a.mu.Unlock()
		a.commit([]*appendOp{op})
		a.release()
		return op.err
	}
	op.done = make(chan struct{})
	a.queue = append(a.queue, op)
	a.mu.Unlock()
	select {
	case <-op.done:
		return op.err
	case <-ctx.Done():
		op.abandoned.Store(true)
		return ctx.Err()
	}
}

// release ends a commit: with appends queued meanwhile, a goroutine goes
// on committing them, so that the appender whose commit just ended returns
// to its caller without waiting for others'.
func (a *appender) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queue) == 0 || a.closed {
		a.running = false
		a.dropQueuedLocked()
		return
	}
	a.drains.Go(func() {
		for {
			a.mu.Lock()
			if len(a.queue) == 0 || a.closed {
				a.running = false
				a.dropQueuedLocked()
				a.mu.Unlock()
				return
			}
			batch := a.takeLocked()
			a.mu.Unlock()
			a.commit(batch)
		}
	})
}

// takeLocked takes up to maxAppendBatch queued appends, leaving out
// those whose callers gave up. mu held.
func (a *appender) takeLocked() []*appendOp {
	batch := make([]*appendOp, 0, min(len(a.queue), maxAppendBatch))
	n := 0
	for _, op := range a.queue {
		if len(batch) == maxAppendBatch {
			break
		}
		n++
		if op.abandoned.Load() {
			close(op.done)
			continue
		}
		batch = append(batch, op)
	}
	clear(a.queue[:n])
	a.queue = a.queue[n:]
	if len(a.queue) == 0 {
		a.queue = nil
	}
	return batch
}

// close stops the drains and waits for them. The store holds s.mu, so no
// caller waits for an append: those still queued were abandoned, and are
// dropped.
func (a *appender) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.drains.Wait()
	a.mu.Lock()
	a.dropQueuedLocked()
	a.mu.Unlock()
}

// dropQueuedLocked fails the queued appends, once closed. mu held.
func (a *appender) dropQueuedLocked() {
	if !a.closed {
		return
	}
	for _, op := range a.queue {
		op.err = a.s.errClosed()
		close(op.done)
	}
	a.queue = nil
}

// batchPartition is a partition's state during a commit.
type batchPartition struct {
	pb   *bolt.Bucket
	log  *bolt.Bucket
	meta streamMeta
}

// commit runs batch in one transaction and hands each append its
// outcome. The records of one commit all have its time, the clock's but
// never before a partition's last; the meta of each partition is read
// once and written once.
func (a *appender) commit(batch []*appendOp) {
	if a.commitHook != nil {
		a.commitHook(len(batch))
	}
	now := unixNanos(a.s.clock.Now())
	err := a.s.db.Update(func(tx *bolt.Tx) error {
		parts := make(map[string]*batchPartition, 1)
		for _, op := range batch {
			bp := parts[string(op.key)]
			if bp == nil {
				pb, err := createPartition(tx, op.key)
				if err != nil {
					return err
				}
				meta, err := readMeta(pb)
				if err != nil {
					return fmt.Errorf("stream partition %x: %w", op.key, err)
				}
				meta.last = max(meta.last, now)
				bp = &batchPartition{pb: pb, log: pb.Bucket(bucketStreamLog), meta: meta}
				bp.log.FillPercent = logFillPercent
				parts[string(op.key)] = bp
			}
			op.first, op.time = bp.meta.next, bp.meta.last
			for _, b := range op.recs {
				// bbolt keeps the key and value until the commit: both
				// are op's buffer, which nothing else touches.
				k, v := setRecordKey(b, bp.meta.next, bp.meta.last)
				if err := bp.log.Put(k, v); err != nil {
					return err
				}
				bp.meta.next++
			}
			bp.meta.bytes += op.bytes
		}
		for _, bp := range parts {
			if err := bp.pb.Put(keyStreamMeta, bp.meta.encode()); err != nil {
				return err
			}
		}
		return nil
	})
	for _, op := range batch {
		if err != nil {
			op.err = a.s.txErr(err)
		}
		if op.done != nil {
			close(op.done)
		}
	}
}

// Append implements storage.StreamLog. Concurrent appends share commits
// (see appender).
func (s *Store) Append(ctx context.Context, p storage.StreamPartition, recs []storage.StreamRecord) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := checkPartition(p); err != nil {
		return err
	}
	if err := storage.CheckRecords(p, recs, s.maxStateSize); err != nil {
		return fmt.Errorf("boltstore: %w", err)
	}
	if len(recs) == 0 {
		return nil
	}
	op := &appendOp{key: partitionKey(p)}
	op.recs = op.one[:]
	if len(recs) > 1 {
		op.recs = make([][]byte, len(recs))
	}
	for i := range recs {
		op.recs[i] = encodeRecord(&recs[i])
		op.bytes += int64(len(recs[i].Payload))
	}
	if err := s.appends.do(ctx, op); err != nil {
		return err
	}
	t := time.Unix(0, op.time).UTC()
	for i := range recs {
		recs[i].Offset, recs[i].Time = op.first+uint64(i), t
	}
	return nil
}

// Read implements storage.StreamLog.
func (s *Store) Read(ctx context.Context, p storage.StreamPartition, from uint64, max int) ([]storage.StreamRecord, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	if err := checkPartition(p); err != nil {
		return nil, err
	}
	if err := storage.CheckReadMax(p, max); err != nil {
		return nil, fmt.Errorf("boltstore: %w", err)
	}
	key := partitionKey(p)
	var out []storage.StreamRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		pb := partitionBucket(tx, key)
		if pb == nil {
			return nil
		}
		meta, err := readMeta(pb)
		if err != nil || from >= meta.next {
			return err
		}
		out = make([]storage.StreamRecord, 0, min(uint64(max), meta.next-from))
		c := pb.Bucket(bucketStreamLog).Cursor()
		for k, v := c.Seek(offsetKey(from)); k != nil && len(out) < max; k, v = c.Next() {
			r, err := decodeRecord(k, v)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, s.txErr(err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// bounds returns the oldest offset kept in pb (0: none) and the next.
func bounds(pb *bolt.Bucket) (oldest uint64, meta streamMeta, err error) {
	if meta, err = readMeta(pb); err != nil {
		return 0, meta, err
	}
	if k, _ := pb.Bucket(bucketStreamLog).Cursor().First(); k != nil {
		if len(k) != 8 {
			return 0, meta, fmt.Errorf("corrupt stream record key %x", k)
		}
		oldest = binary.BigEndian.Uint64(k)
	}
	return oldest, meta, nil
}

// Bounds implements storage.StreamLog.
func (s *Store) Bounds(ctx context.Context, p storage.StreamPartition) (oldest, next uint64, err error) {
	if err := s.enter(ctx); err != nil {
		return 0, 0, err
	}
	defer s.mu.RUnlock()
	if err := checkPartition(p); err != nil {
		return 0, 0, err
	}
	key := partitionKey(p)
	next = 1
	err = s.db.View(func(tx *bolt.Tx) error {
		pb := partitionBucket(tx, key)
		if pb == nil {
			return nil
		}
		var meta streamMeta
		oldest, meta, err = bounds(pb)
		next = meta.next
		return err
	})
	if err != nil {
		return 0, 0, s.txErr(err)
	}
	return oldest, next, nil
}

// OffsetAt implements storage.StreamLog. The records kept are the offsets
// [oldest, next) and their times never decrease, so it binary-searches the
// offsets; no index of times is needed.
func (s *Store) OffsetAt(ctx context.Context, p storage.StreamPartition, t time.Time) (uint64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	if err := checkPartition(p); err != nil {
		return 0, err
	}
	key := partitionKey(p)
	at := unixNanos(t)
	offset := uint64(1)
	err := s.db.View(func(tx *bolt.Tx) error {
		pb := partitionBucket(tx, key)
		if pb == nil {
			return nil
		}
		oldest, meta, err := bounds(pb)
		if err != nil {
			return err
		}
		offset = meta.next
		if oldest == 0 {
			return nil
		}
		log := pb.Bucket(bucketStreamLog)
		lo, hi := oldest, meta.next // the answer is in [lo, hi]
		for lo < hi {
			mid := lo + (hi-lo)/2
			k := offsetKey(mid)
			v := log.Get(k)
			if v == nil {
				return fmt.Errorf("stream record %d missing between the oldest, %d, and the next, %d", mid, oldest, meta.next)
			}
			ns, _, _, _, err := recordFields(k, v)
			if err != nil {
				return err
			}
			if ns >= at {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		offset = lo
		return nil
	})
	if err != nil {
		return 0, s.txErr(err)
	}
	return offset, nil
}

// Trim implements storage.StreamLog. It removes records from the front of
// the log, one at a time, keeping the partition's byte count, and leaves
// its next offset as it is.
func (s *Store) Trim(ctx context.Context, p storage.StreamPartition, olderThan time.Time, maxBytes int64) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	if err := checkPartition(p); err != nil {
		return 0, err
	}
	if err := storage.CheckTrimBytes(p, maxBytes); err != nil {
		return 0, fmt.Errorf("boltstore: %w", err)
	}
	key := partitionKey(p)
	cutoff := int64(math.MinInt64) // no record is before it
	if !olderThan.IsZero() {
		cutoff = unixNanos(olderThan)
	}
	var removed int
	err := s.update(func(tx *bolt.Tx) error {
		removed = 0
		pb := partitionBucket(tx, key)
		if pb == nil {
			return nil
		}
		meta, err := readMeta(pb)
		if err != nil {
			return err
		}
		c := pb.Bucket(bucketStreamLog).Cursor()
		// After a Delete the cursor is not where Next expects: start from
		// the first again each time.
		for k, v := c.First(); k != nil; k, v = c.First() {
			ns, _, _, payload, err := recordFields(k, v)
			if err != nil {
				return err
			}
			if ns >= cutoff && (maxBytes == 0 || meta.bytes <= maxBytes) {
				break
			}
			if err := c.Delete(); err != nil {
				return err
			}
			meta.bytes -= int64(len(payload))
			removed++
		}
		if removed == 0 {
			return nil
		}
		return pb.Put(keyStreamMeta, meta.encode())
	})
	if err != nil {
		return 0, s.txErr(err)
	}
	return removed, nil
}

// SaveCursor implements storage.StreamLog.
func (s *Store) SaveCursor(ctx context.Context, p storage.StreamPartition, sub string, offset uint64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := checkSubscription(p, sub); err != nil {
		return err
	}
	key := partitionKey(p)
	err := s.update(func(tx *bolt.Tx) error {
		pb, err := createPartition(tx, key)
		if err != nil {
			return err
		}
		cb := pb.Bucket(bucketStreamCursors)
		if stored, ok, err := cursorValue(cb, sub); err != nil || (ok && stored >= offset) {
			return err // forward only
		}
		return cb.Put([]byte(sub), binary.BigEndian.AppendUint64(nil, offset))
	})
	if err != nil {
		return s.txErr(err)
	}
	return nil
}

// cursorValue returns the offset of sub in cursors bucket cb.
func cursorValue(cb *bolt.Bucket, sub string) (uint64, bool, error) {
	v := cb.Get([]byte(sub))
	if v == nil {
		return 0, false, nil
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("cursor %q: corrupt value of %d bytes", sub, len(v))
	}
	return binary.BigEndian.Uint64(v), true, nil
}

// Cursor implements storage.StreamLog.
func (s *Store) Cursor(ctx context.Context, p storage.StreamPartition, sub string) (offset uint64, ok bool, err error) {
	if err := s.enter(ctx); err != nil {
		return 0, false, err
	}
	defer s.mu.RUnlock()
	if err := checkSubscription(p, sub); err != nil {
		return 0, false, err
	}
	key := partitionKey(p)
	err = s.db.View(func(tx *bolt.Tx) error {
		pb := partitionBucket(tx, key)
		if pb == nil {
			return nil
		}
		offset, ok, err = cursorValue(pb.Bucket(bucketStreamCursors), sub)
		return err
	})
	if err != nil {
		return 0, false, s.txErr(err)
	}
	return offset, ok, nil
}

// DeleteCursor implements storage.StreamLog.
func (s *Store) DeleteCursor(ctx context.Context, p storage.StreamPartition, sub string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := checkSubscription(p, sub); err != nil {
		return err
	}
	key := partitionKey(p)
	err := s.update(func(tx *bolt.Tx) error {
		pb := partitionBucket(tx, key)
		if pb == nil {
			return nil
		}
		return pb.Bucket(bucketStreamCursors).Delete([]byte(sub))
	})
	if err != nil {
		return s.txErr(err)
	}
	return nil
}
