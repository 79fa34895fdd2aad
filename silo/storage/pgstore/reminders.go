package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
	"github.com/jackc/pgx/v5"
)

const (
	upsertReminderSQL = `INSERT INTO granary_reminders
	(service_id, grain_id, name, hash, first_tick, period_ns, version)
VALUES ($1, $2, $3, $4, $5, $6, nextval('granary_reminder_version'))
ON CONFLICT (service_id, grain_id, name) DO UPDATE SET
	hash = excluded.hash, first_tick = excluded.first_tick,
	period_ns = excluded.period_ns, version = excluded.version
RETURNING version`
	removeReminderSQL = `DELETE FROM granary_reminders
WHERE service_id = $1 AND grain_id = $2 AND name = $3`
	removeReminderVersionSQL = removeReminderSQL + ` AND version = $4`
	reminderVersionSQL       = `SELECT version FROM granary_reminders
WHERE service_id = $1 AND grain_id = $2 AND name = $3`
	// Names compare as bytes, as Go strings do, whatever the database's
	// collation.
	grainRemindersSQL = `SELECT name, hash, first_tick, period_ns, version FROM granary_reminders
WHERE service_id = $1 AND grain_id = $2
ORDER BY name COLLATE "C"`
	// The ranges are disjoint ($2 and $3 from mergeRanges), so the join
	// yields each row once; each range is one scan of the (service_id,
	// hash) index.
	rangeRemindersSQL = `SELECT r.grain_id, r.name, r.hash, r.first_tick, r.period_ns, r.version
FROM unnest($2::bigint[], $3::bigint[]) AS q(lo, hi)
JOIN granary_reminders r ON r.service_id = $1 AND r.hash BETWEEN q.lo AND q.hi
ORDER BY r.hash`
)

// UpsertReminder implements storage.ReminderTable.
func (s *Store) UpsertReminder(ctx context.Context, r storage.ReminderEntry) (string, error) {
	if err := s.check("upsert reminder"); err != nil {
		return "", err
	}
	if err := checkText(r.Grain, r.Name); err != nil {
		return "", err
	}
	if err := storage.CheckID(r.Grain); err != nil {
		return "", fmt.Errorf("pgstore: %w", err)
	}
	op := func() string { return fmt.Sprintf("upsert %s reminder %q", r.Grain, r.Name) }
	firstTick, err := encodeTime(r.FirstTick)
	if err != nil {
		return "", fmt.Errorf("pgstore: %s: %w", op(), err)
	}
	var version int64
	err = s.pool.QueryRow(ctx, upsertReminderSQL, s.service, r.Grain.String(), r.Name,
		encodeHash(r.Hash), firstTick, int64(r.Period)).Scan(&version)
	if err != nil {
		return "", s.fail(ctx, op(), err)
	}
	return formatVersion(version), nil
}

// RemoveReminder implements storage.ReminderTable.
func (s *Store) RemoveReminder(ctx context.Context, id grain.ID, name, etag string) error {
	if err := s.check("remove reminder"); err != nil {
		return err
	}
	if err := checkText(id, name); err != nil {
		return err
	}
	op := func() string { return fmt.Sprintf("remove %s reminder %q", id, name) }
	if etag == "" {
		if _, err := s.pool.Exec(ctx, removeReminderSQL, s.service, id.String(), name); err != nil {
			return s.fail(ctx, op(), err)
		}
		return nil
	}
	if v, ok := storage.ParseVersion(etag); ok && v <= math.MaxInt64 {
		tag, err := s.pool.Exec(ctx, removeReminderVersionSQL, s.service, id.String(), name, int64(v))
		if err != nil {
			return s.fail(ctx, op(), err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
	}
	// Not removed: either there is no such reminder, which is not an
	// error, or it has another version.
	var stored int64
	err := s.pool.QueryRow(ctx, reminderVersionSQL, s.service, id.String(), name).Scan(&stored)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return s.fail(ctx, op(), err)
	}
	return fmt.Errorf("pgstore: reminder: %w", storage.Mismatch(id, name, formatVersion(stored), etag))
}

// GrainReminders implements storage.ReminderTable.
func (s *Store) GrainReminders(ctx context.Context, id grain.ID) ([]storage.ReminderEntry, error) {
	if err := s.check("read reminders"); err != nil {
		return nil, err
	}
	if err := checkText(id, ""); err != nil {
		return nil, err
	}
	op := func() string { return fmt.Sprintf("read %s reminders", id) }
	rows, err := s.pool.Query(ctx, grainRemindersSQL, s.service, id.String())
	if err != nil {
		return nil, s.fail(ctx, op(), err)
	}
	defer rows.Close()
	var out []storage.ReminderEntry
	for rows.Next() {
		var (
			e   = storage.ReminderEntry{Grain: id}
			row reminderRow
		)
		if err := rows.Scan(&e.Name, &row.hash, &row.firstTick, &row.period, &row.version); err != nil {
			return nil, s.fail(ctx, op(), err)
		}
		row.fill(&e)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, op(), err)
	}
	return out, nil
}

// RangeReminders implements storage.ReminderTable. It reads all ranges in
// one query, and returns the entries by hash.
func (s *Store) RangeReminders(ctx context.Context, ranges []storage.HashRange) ([]storage.ReminderEntry, error) {
	if err := s.check("read reminder ranges"); err != nil {
		return nil, err
	}
	lo, hi := mergeRanges(ranges)
	if len(lo) == 0 {
		return nil, nil
	}
	const op = "read reminder ranges"
	rows, err := s.pool.Query(ctx, rangeRemindersSQL, s.service, lo, hi)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	defer rows.Close()
	var out []storage.ReminderEntry
	for rows.Next() {
		var (
			e       storage.ReminderEntry
			grainID string
			row     reminderRow
		)
		if err := rows.Scan(&grainID, &e.Name, &row.hash, &row.firstTick, &row.period, &row.version); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if e.Grain, err = grain.ParseID(grainID); err != nil {
			return nil, fmt.Errorf("pgstore: %s: a row of service %q: %w", op, s.service, err)
		}
		row.fill(&e)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, op, err)
	}
	return out, nil
}

// reminderRow holds a reminder row's columns as stored.
type reminderRow struct {
	hash      int64
	firstTick *int64
	period    int64
	version   int64
}

func (r reminderRow) fill(e *storage.ReminderEntry) {
	e.Hash = decodeHash(r.hash)
	e.FirstTick = decodeTime(r.firstTick)
	e.Period = time.Duration(r.period)
	e.ETag = formatVersion(r.version)
}

// encodeHash maps a ring hash to a bigint, keeping the order: flipping
// the top bit takes [0, 2^64) onto [-2^63, 2^63) monotonically.
func encodeHash(h uint64) int64 { return int64(h ^ 1<<63) }

// decodeHash undoes encodeHash.
func decodeHash(v int64) uint64 { return uint64(v) ^ 1<<63 }

// mergeRanges returns the ranges as sorted, disjoint and non-adjacent
// ranges of encoded hashes, for rangeRemindersSQL: lo[i] to hi[i]
// inclusive. Empty ranges (Lo > Hi) are dropped.
func mergeRanges(ranges []storage.HashRange) (lo, hi []int64) {
	merged := storage.NormalizeRanges(ranges)
	for _, r := range merged {
		lo = append(lo, encodeHash(r.Lo))
		hi = append(hi, encodeHash(r.Hi))
	}
	return lo, hi
}

// The times a reminder's first tick may be: those whose nanoseconds since
// the Unix epoch fit an int64, the years 1678 to 2262.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// encodeTime returns t as nanoseconds since the Unix epoch; nil for the
// zero time.
func encodeTime(t time.Time) (*int64, error) {
	if t.IsZero() {
		return nil, nil
	}
	if t.Before(minTime) || t.After(maxTime) {
		return nil, fmt.Errorf("%w: first tick %v is outside the years 1678 to 2262 that the table holds", storage.ErrInvalid, t)
	}
	ns := t.UnixNano()
	return &ns, nil
}

// decodeTime undoes encodeTime, in UTC.
func decodeTime(ns *int64) time.Time {
	if ns == nil {
		return time.Time{}
	}
	return time.Unix(0, *ns).UTC()
}
