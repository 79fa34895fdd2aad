// Package boltstore is the embedded storage provider: grain state,
// reminders and the durable streams' logs and cursors in one bbolt
// (go.etcd.io/bbolt) file on the silo's disk. A *Store implements
// storage.Provider, storage.ReminderTable and storage.StreamLog, and meets
// the contracts of storage/storagetest.
//
// It suits a single silo, or silos that each own their data: the file is
// locked by the process that opens it, so one store serves one process.
// A second Open of the same file, from this process or another, waits
// Config.OpenTimeout for the lock and then fails naming the file.
//
// # Layout
//
// The file holds five buckets:
//
//	meta        "format" -> 8-byte big-endian format version (1)
//	state       grainID "\x00" stateName -> version (8) | exists (1) | data
//	reminders   grainID "\x00" name -> reminder (below)
//	reminderIdx hash (8) grainID "\x00" name -> empty
//	streams     provider N (4) -> a bucket per stream partition:
//	              "meta"    -> next offset (8) | payload bytes kept (8) | last append's time (8)
//	              "log"     -> bucket: offset (8) -> stream record (below)
//	              "cursors" -> bucket: subscription -> offset (8)
//
// where grainID is grain.ID.String() and all integers are big-endian. A
// reminder value is its hash (8), first tick as Unix seconds (8) and
// nanoseconds (4), period in nanoseconds (8) and version (8). The index
// orders reminders by ring position, so RangeReminders seeks each range
// with a cursor instead of scanning the table.
//
// A stream record's value is its time as Unix nanoseconds (8), its stream
// and its type each as a uvarint length and the bytes, and its payload,
// the rest. The log's keys are the offsets, so it is in offset order, and
// the records kept are always the offsets from the first key to the
// partition's next offset: trimming deletes from the front, and the next
// offset lives in "meta", not in the keys, so it survives trimming the
// log empty. Times never decrease along a log (an append takes the later
// of the clock and the last append's time), so OffsetAt binary-searches
// the offsets, with no index of times. The payload bytes kept are counted
// in "meta" on every append and trim, so trimming by size reads only the
// records it removes.
//
// Open refuses a file whose format version is newer than this package
// writes. The streams bucket came after version 1 and did not change it:
// Open adds the bucket to a file that lacks it, and older builds ignore
// it.
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
// Stream appends, the hottest writes, have a group commit of their own
// (streamlog.go): an append that finds no commit in flight commits at
// once; those that arrive meanwhile queue, and go together in the next
// transaction, each partition's meta read and written once for all of
// them. Every append still returns only once its commit is on disk, and
// its records are contiguous, since one transaction applies the queued
// appends one after the other.
//
// Close waits for the operations in flight, then closes the file; later
// operations fail with storage.ErrClosed. The store starts no goroutines
// of its own but while writes are queued: bbolt's batch timer while a
// batch is pending, and the goroutine that commits the queued appends
// until the queue is empty.
package boltstore
