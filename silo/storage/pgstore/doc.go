// Package pgstore is the PostgreSQL storage provider: a Store keeps grain
// state records, reminders, and the durable streams' logs and cursors in
// tables of one database, which any number of silos share. It implements
// storage.Provider, storage.ReminderTable and storage.StreamLog.
//
// # Tables
//
// Open creates the tables, or migrates them to the schema this code
// knows, under a transaction-scoped advisory lock, so silos may open a
// store on the same database concurrently. The table granary_schema
// lists the schema versions applied; a database whose schema is newer
// than this code's is refused.
//
//   - granary_state: one row per (service, grain, state name), with the
//     record's version and its data, NULL once the record is cleared.
//   - granary_reminders: one row per (service, grain, reminder name),
//     indexed by (service, ring hash) for the range reads of reminder
//     ownership.
//   - granary_stream_partitions: one row per (service, stream provider,
//     partition), with the offset the next append assigns, the payload
//     bytes kept and the last append's time. An append's upsert of this
//     row assigns its offsets and its time, and holds the row locked until
//     it commits, so appends to a partition are serialized and commit in
//     offset order; a trim locks it too, to keep the byte count true.
//   - granary_stream_records: one row per record, keyed by (service,
//     provider, partition, offset) and indexed by time for OffsetAt and
//     trimming by age. Times never decrease along a partition (an append
//     takes the later of the store's clock and the last append's time),
//     so the first record at or after a time is the first offset.
//   - granary_stream_cursors: one row per (service, provider, partition,
//     subscription), which an upsert moves forward only.
//
// Rows carry a service ID (Config.ServiceID), so several services, or
// tests, can share a database without seeing each other's rows.
//
// # ETags
//
// A state record's ETag is its version number (storage.FormatVersion),
// which starts at 1 and grows by one on every write and clear. A clear
// keeps the row, with its data NULL, so ETags from before the clear are
// refused. Each write or clear is a single statement that checks the
// version: an INSERT ... ON CONFLICT DO NOTHING for a record the writer
// saw as missing, else an UPDATE ... WHERE version = the ETag's. A
// reminder's ETag is a number from a sequence, so no ETag is reused for a
// reminder, even after it is removed and added again.
//
// # Group commit
//
// State writes and stream appends that arrive while every connection is
// busy go together, as one pipelined batch in one transaction, when a
// connection frees (commit.go). A batch sends its appends after its state
// writes and by partition, so that batches lock partitions in one order
// and never deadlock one another.
//
// # Errors
//
// Every operation runs on the context it is given, so an unreachable or
// silent server fails it when the context ends; new connections are also
// bounded by Config.ConnectTimeout. Errors begin with "pgstore:" and wrap
// storage.ErrETagMismatch, storage.ErrTooLarge, storage.ErrClosed,
// storage.ErrInvalid (a grain ID or name that is not valid UTF-8 without
// NUL bytes, a grain ID that does not read back, a reminder's first tick
// outside the years 1678 to 2262; a stream provider, subscription, stream
// or event type that is not valid UTF-8 without NUL bytes, a cursor at
// 2^63 or beyond, and the stream log's own cases), the context's error or
// the driver's.
//
// # Privileges
//
// Open creates and migrates the tables when they are missing or older,
// which needs the CREATE privilege on the schema; on a database whose
// schema is current it needs only rights on the tables and the sequence
// granary_reminder_version.
package pgstore
