package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
	"github.com/jackc/pgx/v5"
)

const (
	readStateSQL = `SELECT version, data FROM granary_state
WHERE service_id = $1 AND grain_id = $2 AND state_name = $3`
	stateVersionSQL = `SELECT version FROM granary_state
WHERE service_id = $1 AND grain_id = $2 AND state_name = $3`
	insertStateSQL = `INSERT INTO granary_state (service_id, grain_id, state_name, version, data)
VALUES ($1, $2, $3, 1, $4) ON CONFLICT DO NOTHING
RETURNING version`
	// updateStateSQL writes data, or clears the record when data is NULL.
	updateStateSQL = `UPDATE granary_state SET data = $4, version = version + 1
WHERE service_id = $1 AND grain_id = $2 AND state_name = $3 AND version = $5
RETURNING version`
)

// ReadState implements storage.Provider.
func (s *Store) ReadState(ctx context.Context, id grain.ID, name string) (storage.Record, error) {
	if err := s.check("read state"); err != nil {
		return storage.Record{}, err
	}
	if err := checkText(id, name); err != nil {
		return storage.Record{}, err
	}
	var (
		version int64
		data    []byte
	)
	err := s.pool.QueryRow(ctx, readStateSQL, s.service, id.String(), name).Scan(&version, &data)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return storage.Record{}, nil
	case err != nil:
		return storage.Record{}, s.fail(ctx, fmt.Sprintf("read %s state %q", id, name), err)
	case data == nil: // cleared
		return storage.Record{ETag: formatVersion(version)}, nil
	}
	return storage.Record{Data: data, ETag: formatVersion(version), Exists: true}, nil
}

// WriteState implements storage.Provider.
func (s *Store) WriteState(ctx context.Context, id grain.ID, name string, data []byte, etag string) (string, error) {
	if err := s.check("write state"); err != nil {
		return "", err
	}
	if err := checkText(id, name); err != nil {
		return "", err
	}
	if err := storage.CheckSize(id, name, data, s.maxStateSize); err != nil {
		return "", fmt.Errorf("pgstore: %w", err)
	}
	if data == nil {
		data = []byte{} // nil would be NULL: a cleared record
	}
	op := func() string { return fmt.Sprintf("write %s state %q", id, name) }
	if etag == "" {
		return s.commit(ctx, op, &writeOp{insert: true, grainID: id.String(), name: name, data: data}, id, etag)
	}
	return s.update(ctx, op, id, name, data, etag)
}

// ClearState implements storage.Provider.
func (s *Store) ClearState(ctx context.Context, id grain.ID, name string, etag string) (string, error) {
	if err := s.check("clear state"); err != nil {
		return "", err
	}
	if err := checkText(id, name); err != nil {
		return "", err
	}
	op := func() string { return fmt.Sprintf("clear %s state %q", id, name) }
	if etag == "" {
		// Succeeds only if there has never been a record: a writer that
		// saw one, even cleared, has its ETag.
		stored, err := s.storedVersion(ctx, id, name)
		if err != nil {
			return "", s.fail(ctx, op(), err)
		}
		if stored != 0 {
			return "", fmt.Errorf("pgstore: %w", storage.Mismatch(id, name, formatVersion(stored), etag))
		}
		return "", nil
	}
	return s.update(ctx, op, id, name, nil, etag)
}

// update sets the record's data (nil: clears it) if its version is etag's,
// and returns the new ETag.
func (s *Store) update(ctx context.Context, op func() string, id grain.ID, name string, data []byte, etag string) (string, error) {
	v, ok := storage.ParseVersion(etag)
	if !ok || v > math.MaxInt64 {
		// Names no version, so matches no record.
		return "", s.mismatch(ctx, op(), id, name, etag)
	}
	return s.commit(ctx, op, &writeOp{grainID: id.String(), name: name, data: data, version: int64(v)}, id, etag)
}

// commit runs a write through the group committer and returns the
// record's new ETag.
func (s *Store) commit(ctx context.Context, op func() string, w *writeOp, id grain.ID, etag string) (string, error) {
	err := s.commits.do(ctx, w)
	switch {
	case err != nil:
		return "", s.fail(ctx, op(), err)
	case !w.matched:
		return "", s.mismatch(ctx, op(), id, w.name, etag)
	}
	return formatVersion(w.newVersion), nil
}

// mismatch returns the storage.Mismatch error of a write or clear that
// found the record not at etag, naming the version it is at now.
func (s *Store) mismatch(ctx context.Context, op string, id grain.ID, name, etag string) error {
	stored, err := s.storedVersion(ctx, id, name)
	if err != nil {
		return s.fail(ctx, op, err)
	}
	return fmt.Errorf("pgstore: %w", storage.Mismatch(id, name, formatVersion(stored), etag))
}

// storedVersion returns the record's version: 0 if there has never been
// one.
func (s *Store) storedVersion(ctx context.Context, id grain.ID, name string) (int64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, stateVersionSQL, s.service, id.String(), name).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// formatVersion is the ETag of a version read from the database, which is
// never negative.
func formatVersion(v int64) string { return storage.FormatVersion(uint64(v)) }
