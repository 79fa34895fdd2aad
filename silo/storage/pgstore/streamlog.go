package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/granaryio/granary/silo/storage"
	"github.com/jackc/pgx/v5"
)

var _ storage.StreamLog = (*Store)(nil)

const (
	// appendSQL appends a batch of records to a partition in one
	// statement: the upsert of the partition's row takes the offsets and
	// the time, and holds the row locked until the transaction commits,
	// so appends to a partition are serialized, each one's records are
	// contiguous, and they commit in offset order: a reader never sees an
	// offset before every lower one. $4 is the number of records, $5
	// their payload bytes, $6 the clock's time; the records are the
	// arrays $7, $8, $9.
	appendSQL = `WITH p AS (
	INSERT INTO granary_stream_partitions AS t
		(service_id, provider, partition, next_offset, payload_bytes, last_time)
	VALUES ($1, $2, $3, 1 + $4::bigint, $5::bigint, $6::bigint)
	ON CONFLICT (service_id, provider, partition) DO UPDATE SET
		next_offset = t.next_offset + $4::bigint,
		payload_bytes = t.payload_bytes + $5::bigint,
		last_time = greatest(t.last_time, $6::bigint)
	RETURNING next_offset - $4::bigint AS first, last_time
), r AS (
	INSERT INTO granary_stream_records
		(service_id, provider, partition, log_offset, time_ns, stream, type, payload)
	SELECT $1, $2, $3, p.first + r.i - 1, p.last_time, r.stream, r.type, r.payload
	FROM p, unnest($7::text[], $8::text[], $9::bytea[]) WITH ORDINALITY AS r(stream, type, payload, i)
)
SELECT first, last_time FROM p`
	readSQL = `SELECT log_offset, time_ns, stream, type, payload FROM granary_stream_records
WHERE service_id = $1 AND provider = $2 AND partition = $3 AND log_offset >= $4
ORDER BY log_offset LIMIT $5`
	// One statement, so both values are of one snapshot.
	boundsSQL = `SELECT
	coalesce((SELECT min(log_offset) FROM granary_stream_records
		WHERE service_id = $1 AND provider = $2 AND partition = $3), 0),
	coalesce((SELECT next_offset FROM granary_stream_partitions
		WHERE service_id = $1 AND provider = $2 AND partition = $3), 1)`
	offsetAtSQL = `SELECT coalesce(
	(SELECT log_offset FROM granary_stream_records
		WHERE service_id = $1 AND provider = $2 AND partition = $3 AND time_ns >= $4
		ORDER BY time_ns, log_offset LIMIT 1),
	(SELECT next_offset FROM granary_stream_partitions
		WHERE service_id = $1 AND provider = $2 AND partition = $3),
	1)`
	// lockPartitionSQL locks the partition's row against appends and
	// other trims for the rest of the transaction.
	lockPartitionSQL = `SELECT payload_bytes FROM granary_stream_partitions
WHERE service_id = $1 AND provider = $2 AND partition = $3 FOR UPDATE`
	trimAgeSQL = `WITH d AS (
	DELETE FROM granary_stream_records
	WHERE service_id = $1 AND provider = $2 AND partition = $3 AND time_ns < $4
	RETURNING octet_length(payload) AS n
)
SELECT count(*), coalesce(sum(n), 0) FROM d`
	// trimSizeSQL removes the oldest records whose payloads add up to at
	// least $4 bytes: up to the first offset at which the running total,
	// from the oldest, reaches $4. The window reads the primary key in
	// order and stops there.
	trimSizeSQL = `WITH cut AS (
	SELECT log_offset FROM (
		SELECT log_offset, sum(octet_length(payload)) OVER (ORDER BY log_offset) AS freed
		FROM granary_stream_records
		WHERE service_id = $1 AND provider = $2 AND partition = $3
	) q
	WHERE freed >= $4
	ORDER BY log_offset LIMIT 1
), d AS (
	DELETE FROM granary_stream_records
	WHERE service_id = $1 AND provider = $2 AND partition = $3
		AND log_offset <= coalesce((SELECT log_offset FROM cut), 9223372036854775807)
	RETURNING octet_length(payload) AS n
)
SELECT count(*), coalesce(sum(n), 0) FROM d`
	trimmedSQL = `UPDATE granary_stream_partitions SET payload_bytes = payload_bytes - $4
WHERE service_id = $1 AND provider = $2 AND partition = $3`
	// saveCursorSQL moves the cursor forward only: the WHERE of the
	// update leaves a cursor at or past the offset as it is.
	saveCursorSQL = `INSERT INTO granary_stream_cursors AS c
	(service_id, provider, partition, subscription, log_offset)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (service_id, provider, partition, subscription) DO UPDATE SET
	log_offset = excluded.log_offset
WHERE c.log_offset < excluded.log_offset`
	cursorSQL = `SELECT log_offset FROM granary_stream_cursors
WHERE service_id = $1 AND provider = $2 AND partition = $3 AND subscription = $4`
	deleteCursorSQL = `DELETE FROM granary_stream_cursors
WHERE service_id = $1 AND provider = $2 AND partition = $3 AND subscription = $4`
)

// checkPartition refuses a partition the contract refuses, or whose
// provider name the text column cannot hold. Every operation checks
// first: in a batch, the server would refuse the append and with it the
// whole batch.
func checkPartition(p storage.StreamPartition) error {
	if err := storage.CheckPartition(p); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	if !textOK(p.Provider) {
		return fmt.Errorf("pgstore: %w: stream provider name %q is not valid UTF-8 without NUL bytes, which the database's text columns require", storage.ErrInvalid, p.Provider)
	}
	return nil
}

func checkSubscription(p storage.StreamPartition, sub string) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	if err := storage.CheckSubscription(p, sub); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	if !textOK(sub) {
		return fmt.Errorf("pgstore: %w: subscription name %q is not valid UTF-8 without NUL bytes, which the database's text columns require", storage.ErrInvalid, sub)
	}
	return nil
}

// appendOp is one Append waiting for its batch.
type appendOp struct {
	queued
	p        storage.StreamPartition
	streams  []string
	types    []string
	payloads [][]byte // copies: a caller that gives up may reuse its own
	bytes    int64
	now      int64

	// The outcome, once done: the first record's offset and the records'
	// time.
	first int64
	time  int64
}

func (op *appendOp) statement(service string) (string, []any) {
	return appendSQL, []any{service, op.p.Provider, int64(op.p.N), int64(len(op.streams)), op.bytes, op.now,
		op.streams, op.types, op.payloads}
}

func (op *appendOp) scan(row pgx.Row) error { return row.Scan(&op.first, &op.time) }

func (op *appendOp) rank() opRank {
	return opRank{append: true, provider: op.p.Provider, partition: op.p.N}
}

// Append implements storage.StreamLog. Concurrent appends go in the group
// commits of the state writes (commit.go).
func (s *Store) Append(ctx context.Context, p storage.StreamPartition, recs []storage.StreamRecord) error {
	if err := s.check("append"); err != nil {
		return err
	}
	if err := checkPartition(p); err != nil {
		return err
	}
	if err := storage.CheckRecords(p, recs, s.maxStateSize); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	op := func() string { return fmt.Sprintf("append to stream partition %s", p) }
	if len(recs) == 0 {
		// Nothing to write, but the context and the server are checked
		// as for any append.
		if err := ctx.Err(); err != nil {
			return s.fail(ctx, op(), err)
		}
		return nil
	}
	w := &appendOp{
		p:        p,
		streams:  make([]string, len(recs)),
		types:    make([]string, len(recs)),
		payloads: make([][]byte, len(recs)),
		now:      unixNanos(s.clock.Now()),
	}
	for i := range recs {
		r := &recs[i]
		if !textOK(r.Stream) || !textOK(r.Type) {
			return fmt.Errorf("pgstore: %w: record %d of an append to stream partition %s: stream %q or type %q is not valid UTF-8 without NUL bytes, which the database's text columns require",
				storage.ErrInvalid, i, p, r.Stream, r.Type)
		}
		w.streams[i], w.types[i] = r.Stream, r.Type
		w.bytes += int64(len(r.Payload))
	}
	// One buffer for the copies; never nil, which would be NULL.
	buf := make([]byte, 0, w.bytes)
	for i := range recs {
		start := len(buf)
		buf = append(buf, recs[i].Payload...)
		w.payloads[i] = buf[start:len(buf):len(buf)]
	}
	if err := s.commits.do(ctx, w); err != nil {
		return s.fail(ctx, op(), err)
	}
	t := time.Unix(0, w.time).UTC()
	for i := range recs {
		recs[i].Offset, recs[i].Time = uint64(w.first)+uint64(i), t
	}
	return nil
}

// Read implements storage.StreamLog.
func (s *Store) Read(ctx context.Context, p storage.StreamPartition, from uint64, max int) ([]storage.StreamRecord, error) {
	if err := s.check("read stream"); err != nil {
		return nil, err
	}
	if err := checkPartition(p); err != nil {
		return nil, err
	}
	if err := storage.CheckReadMax(p, max); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	op := func() string { return fmt.Sprintf("read stream partition %s", p) }
	if err := ctx.Err(); err != nil {
		return nil, s.fail(ctx, op(), err)
	}
	if from > math.MaxInt64 {
		return nil, nil // no offset is that high
	}
	rows, err := s.pool.Query(ctx, readSQL, s.service, p.Provider, int64(p.N), int64(from), max)
	if err != nil {
		return nil, s.fail(ctx, op(), err)
	}
	defer rows.Close()
	var out []storage.StreamRecord
	for rows.Next() {
		var (
			r         storage.StreamRecord
			offset, t int64
		)
		if err := rows.Scan(&offset, &t, &r.Stream, &r.Type, &r.Payload); err != nil {
			return nil, s.fail(ctx, op(), err)
		}
		r.Offset, r.Time = uint64(offset), time.Unix(0, t).UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, op(), err)
	}
	return out, nil
}

// Bounds implements storage.StreamLog.
func (s *Store) Bounds(ctx context.Context, p storage.StreamPartition) (oldest, next uint64, err error) {
	if err := s.check("stream bounds"); err != nil {
		return 0, 0, err
	}
	if err := checkPartition(p); err != nil {
		return 0, 0, err
	}
	var o, n int64
	if err := s.pool.QueryRow(ctx, boundsSQL, s.service, p.Provider, int64(p.N)).Scan(&o, &n); err != nil {
		return 0, 0, s.fail(ctx, fmt.Sprintf("read the bounds of stream partition %s", p), err)
	}
	return uint64(o), uint64(n), nil
}

// OffsetAt implements storage.StreamLog.
func (s *Store) OffsetAt(ctx context.Context, p storage.StreamPartition, t time.Time) (uint64, error) {
	if err := s.check("stream offset at"); err != nil {
		return 0, err
	}
	if err := checkPartition(p); err != nil {
		return 0, err
	}
	var o int64
	if err := s.pool.QueryRow(ctx, offsetAtSQL, s.service, p.Provider, int64(p.N), unixNanos(t)).Scan(&o); err != nil {
		return 0, s.fail(ctx, fmt.Sprintf("find the offset at %v in stream partition %s", t, p), err)
	}
	return uint64(o), nil
}

// Trim implements storage.StreamLog. It runs in one transaction that
// holds the partition's row locked, so that its byte count stays that of
// the records kept whatever appends and trims run meanwhile.
func (s *Store) Trim(ctx context.Context, p storage.StreamPartition, olderThan time.Time, maxBytes int64) (int, error) {
	if err := s.check("trim stream"); err != nil {
		return 0, err
	}
	if err := checkPartition(p); err != nil {
		return 0, err
	}
	if err := storage.CheckTrimBytes(p, maxBytes); err != nil {
		return 0, fmt.Errorf("pgstore: %w", err)
	}
	args := []any{s.service, p.Provider, int64(p.N)}
	var removed int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		removed = 0
		var kept int64
		err := tx.QueryRow(ctx, lockPartitionSQL, args...).Scan(&kept)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // never appended to
		}
		if err != nil {
			return err
		}
		var freed int64
		if !olderThan.IsZero() {
			var n, b int64
			if err := tx.QueryRow(ctx, trimAgeSQL, append(args, unixNanos(olderThan))...).Scan(&n, &b); err != nil {
				return err
			}
			removed, freed = n, b
		}
		if maxBytes > 0 && kept-freed > maxBytes {
			var n, b int64
			if err := tx.QueryRow(ctx, trimSizeSQL, append(args, kept-freed-maxBytes)...).Scan(&n, &b); err != nil {
				return err
			}
			removed, freed = removed+n, freed+b
		}
		if removed == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, trimmedSQL, append(args, freed)...)
		return err
	})
	if err != nil {
		return 0, s.fail(ctx, fmt.Sprintf("trim stream partition %s", p), err)
	}
	return int(removed), nil
}

// SaveCursor implements storage.StreamLog.
func (s *Store) SaveCursor(ctx context.Context, p storage.StreamPartition, sub string, offset uint64) error {
	if err := s.check("save cursor"); err != nil {
		return err
	}
	if err := checkSubscription(p, sub); err != nil {
		return err
	}
	if offset > math.MaxInt64 {
		return fmt.Errorf("pgstore: %w: cursor %q of stream partition %s at offset %d: the table holds offsets below 2^63", storage.ErrInvalid, sub, p, offset)
	}
	if _, err := s.pool.Exec(ctx, saveCursorSQL, s.service, p.Provider, int64(p.N), sub, int64(offset)); err != nil {
		return s.fail(ctx, fmt.Sprintf("save cursor %q of stream partition %s", sub, p), err)
	}
	return nil
}

// Cursor implements storage.StreamLog.
func (s *Store) Cursor(ctx context.Context, p storage.StreamPartition, sub string) (uint64, bool, error) {
	if err := s.check("read cursor"); err != nil {
		return 0, false, err
	}
	if err := checkSubscription(p, sub); err != nil {
		return 0, false, err
	}
	var o int64
	err := s.pool.QueryRow(ctx, cursorSQL, s.service, p.Provider, int64(p.N), sub).Scan(&o)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, s.fail(ctx, fmt.Sprintf("read cursor %q of stream partition %s", sub, p), err)
	}
	return uint64(o), true, nil
}

// DeleteCursor implements storage.StreamLog.
func (s *Store) DeleteCursor(ctx context.Context, p storage.StreamPartition, sub string) error {
	if err := s.check("delete cursor"); err != nil {
		return err
	}
	if err := checkSubscription(p, sub); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, deleteCursorSQL, s.service, p.Provider, int64(p.N), sub); err != nil {
		return s.fail(ctx, fmt.Sprintf("delete cursor %q of stream partition %s", sub, p), err)
	}
	return nil
}

// unixNanos returns t in nanoseconds since the Unix epoch, clamped to
// what the bigint columns hold (the years 1678 to 2262).
func unixNanos(t time.Time) int64 {
	switch {
	case t.Before(minTime):
		return math.MinInt64
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}
