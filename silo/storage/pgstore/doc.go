// Package pgstore is the PostgreSQL storage provider: a Store keeps grain
// state records and reminders in two tables of one database, which any
// number of silos share.
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
// # Errors
//
// Every operation runs on the context it is given, so an unreachable or
// silent server fails it when the context ends; new connections are also
// bounded by Config.ConnectTimeout. Errors begin with "pgstore:" and wrap
// storage.ErrETagMismatch, storage.ErrTooLarge, storage.ErrClosed,
// storage.ErrInvalid (a grain ID or name that is not valid UTF-8 without
// NUL bytes, a grain ID that does not read back, a reminder's first tick
// outside the years 1678 to 2262), the context's error or the driver's.
//
// # Privileges
//
// Open creates and migrates the tables when they are missing or older,
// which needs the CREATE privilege on the schema; on a database whose
// schema is current it needs only rights on the tables and the sequence
// granary_reminder_version.
package pgstore
