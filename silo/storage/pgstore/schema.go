package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrationLock is the key of the advisory lock that serialises
// migrations: "granary" in ASCII.
const migrationLock int64 = 0x6772616e617279

// migrations are the schema's steps: migrations[i] takes the schema from
// version i to i+1. Append only: a released step never changes, since
// databases have applied it. A step is plain CREATE, not CREATE IF NOT
// EXISTS, so a step applied twice fails rather than hides a broken lock.
var migrations = []string{
	// 1: state records and reminders.
	`
CREATE TABLE granary_state (
	service_id text   NOT NULL,
	grain_id   text   NOT NULL,
	state_name text   NOT NULL,
	version    bigint NOT NULL, -- the ETag: 1, 2, ... on every write and clear
	data       bytea,           -- NULL once cleared
	PRIMARY KEY (service_id, grain_id, state_name)
);
CREATE TABLE granary_reminders (
	service_id text   NOT NULL,
	grain_id   text   NOT NULL,
	name       text   NOT NULL,
	hash       bigint NOT NULL, -- the uint64 ring hash with its top bit flipped, so that order is kept
	first_tick bigint,          -- nanoseconds since the Unix epoch; NULL for the zero time
	period_ns  bigint NOT NULL,
	version    bigint NOT NULL, -- the ETag, from granary_reminder_version
	PRIMARY KEY (service_id, grain_id, name)
);
CREATE INDEX granary_reminders_hash ON granary_reminders (service_id, hash);
CREATE SEQUENCE granary_reminder_version;
`,
	// 2: durable streams' logs and cursors. Offsets are uint64s below
	// 2^63, times nanoseconds since the Unix epoch.
	`
CREATE TABLE granary_stream_partitions (
	service_id    text   NOT NULL,
	provider      text   NOT NULL,
	partition     bigint NOT NULL, -- the uint32 partition number
	next_offset   bigint NOT NULL, -- the offset the next append assigns: 1, 2, ..., never reused
	payload_bytes bigint NOT NULL, -- the payload bytes of the records kept, for trimming by size
	last_time     bigint NOT NULL, -- the last append's time: no later append's is earlier
	PRIMARY KEY (service_id, provider, partition)
);
CREATE TABLE granary_stream_records (
	service_id text   NOT NULL,
	provider   text   NOT NULL,
	partition  bigint NOT NULL,
	log_offset bigint NOT NULL,
	time_ns    bigint NOT NULL,
	stream     text   NOT NULL,
	type       text   NOT NULL,
	payload    bytea  NOT NULL,
	PRIMARY KEY (service_id, provider, partition, log_offset)
);
-- For OffsetAt and trimming by age: times rise with offsets, so the first
-- entry at or after a time is the first offset.
CREATE INDEX granary_stream_records_time ON granary_stream_records (service_id, provider, partition, time_ns, log_offset);
CREATE TABLE granary_stream_cursors (
	service_id   text   NOT NULL,
	provider     text   NOT NULL,
	partition    bigint NOT NULL,
	subscription text   NOT NULL,
	log_offset   bigint NOT NULL, -- the last offset the subscription handled
	PRIMARY KEY (service_id, provider, partition, subscription)
);
`,
}

// schemaVersion is the version of the schema this code creates and knows.
var schemaVersion = len(migrations)

// migrate brings the database's schema to schemaVersion, in one
// transaction under the migration lock, so that concurrent Opens apply
// each step once, and a failed step leaves the schema as it was.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		// CREATE ... IF NOT EXISTS needs the CREATE privilege even when
		// the table exists: look first, so a role with rights on the
		// tables alone can open a database whose schema is current.
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('granary_schema') IS NOT NULL`).Scan(&exists); err != nil {
			return fmt.Errorf("look for granary_schema: %w", err)
		}
		if !exists {
			if _, err := tx.Exec(ctx, `
CREATE TABLE granary_schema (
	version    integer PRIMARY KEY,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
				return fmt.Errorf("create granary_schema: %w", err)
			}
		}
		var current int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM granary_schema`).Scan(&current); err != nil {
			return fmt.Errorf("read the schema version: %w", err)
		}
		if current > schemaVersion {
			return fmt.Errorf("the database's schema is at version %d, newer than this code's %d: "+
				"a newer Granary migrated it; run that version, or use another database", current, schemaVersion)
		}
		for v := current + 1; v <= schemaVersion; v++ {
			if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("migrate to version %d: %w", v, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO granary_schema (version) VALUES ($1)`, v); err != nil {
				return fmt.Errorf("record version %d: %w", v, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: schema: %w", err)
	}
	return nil
}
