// Package boltstore is the embedded storage provider: grain state and
// reminders in one bbolt (go.etcd.io/bbolt) file on the silo's disk. A
// *Store implements storage.Provider and storage.ReminderTable, and meets
// the contract of storage/storagetest.
//
// It suits a single silo, or silos that each own their data: the file is
// locked by the process that opens it, so one store serves one process.
// A second Open of the same file, from this process or another, waits
// Config.OpenTimeout for the lock and then fails naming the file.
//
// # Layout
//
// The file holds four buckets:
//
//	meta        "format" -> 8-byte big-endian format version (1)
//	state       grainID "\x00" stateName -> version (8) | exists (1) | data
//	reminders   grainID "\x00" name -> reminder (below)
//	reminderIdx hash (8) grainID "\x00" name -> empty
//
// where grainID is grain.ID.String() and all integers are big-endian. A
// reminder value is its hash (8), first tick as Unix seconds (8) and
// nanoseconds (4), period in nanoseconds (8) and version (8). The index
// orders reminders by ring position, so RangeReminders seeks each range
// with a cursor instead of scanning the table. Open refuses a file whose
// format version is newer than this package writes.
//
// Because the separator is a NUL byte, state and reminder names must not
// contain one (grain keys may): the store refuses such names, so that
// every key splits into one grain and one name.
//
// # Versions and ETags
//
// A state record's version counts from 1 and grows by one on every write
// and clear; its ETag is storage.FormatVersion(version). A cleared record
// stays behind as a tombstone (exists 0, no data) keeping its version, so
// an ETag from before the clear is refused. Reminder versions come from
// one sequence for the whole table, so a reminder removed and upserted
// again never reuses an ETag.
//
// # Concurrency
//
// Every method may be called from any goroutine, concurrently. Reads run
// in read transactions and copy their results out before the transaction
// ends. Writes run through DB.Batch, so concurrent writers share one
// commit and one fsync; a writer alone, with no other write in flight,
// commits directly rather than waiting out the batch delay. An ETag
// mismatch does not fail the batch transaction: the write function
// records it and changes nothing. Batch may run a write function more than
// once, so each computes everything it does from the transaction it is
// given.
//
// Close waits for the operations in flight, then closes the file; later
// operations fail with storage.ErrClosed. The store starts no goroutines
// of its own (bbolt's batch timer runs only while a batch is pending).
package boltstore
