package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/storagetest"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

// defaultTestTimeout bounds every wait in these tests: a test that needs
// it has failed.
const defaultTestTimeout = 10 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openStore opens a store in a new temporary directory and closes it when
// the test ends.
func openStore(t testing.TB, maxStateSize int) *Store {
	t.Helper()
	return openAt(t, Config{Path: filepath.Join(t.TempDir(), "granary.db"), MaxStateSize: maxStateSize})
}

func openAt(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, storage.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestContract(t *testing.T) {
	storagetest.RunProvider(t, storagetest.Factory{
		Open: func(t *testing.T, maxStateSize int) storage.Provider { return openStore(t, maxStateSize) },
		Reopen: func(t *testing.T, p storage.Provider) storage.Provider {
			s := p.(*Store)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return openAt(t, Config{Path: s.Path(), MaxStateSize: s.maxStateSize})
		},
	})
}

func TestReminderContract(t *testing.T) {
	storagetest.RunReminderTable(t, func(t *testing.T) storage.ReminderTable { return openStore(t, 0) })
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "Path"},
		{Config{Path: filepath.Join(dir, "a.db"), MaxStateSize: -1}, "MaxStateSize"},
		{Config{Path: filepath.Join(dir, "b.db"), OpenTimeout: -time.Second}, "OpenTimeout"},
	} {
		s, err := Open(tc.cfg)
		if err == nil {
			s.Close()
			t.Fatalf("Open(%+v) succeeded", tc.cfg)
		}
		if want := "boltstore: config: " + tc.field + ": "; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Open(%+v) = %q, want it to begin %q", tc.cfg, err, want)
		}
	}
}

func TestDefaultConfig(t *testing.T) {
	got := DefaultConfig("x.db")
	want := Config{Path: "x.db", MaxStateSize: storage.DefaultMaxStateSize, OpenTimeout: time.Second}
	if got != want {
		t.Fatalf("DefaultConfig = %+v, want %+v", got, want)
	}
	if got := (Config{Path: "x.db"}).withDefaults(); got != want {
		t.Fatalf("zero fields default to %+v, want %+v", got, want)
	}
	if err := got.validate(); err != nil {
		t.Fatal(err)
	}
}

func TestCreatesDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "granary.db")
	s := openAt(t, Config{Path: path})
	if s.Path() != path {
		t.Fatalf("Path() = %q, want %q", s.Path(), path)
	}
	if _, err := s.WriteState(testCtx(t), grain.NewID("t.T", "k"), "s", []byte("x"), ""); err != nil {
		t.Fatal(err)
	}
}

func TestLocked(t *testing.T) {
	s := openStore(t, 0)
	const timeout = 100 * time.Millisecond
	start := time.Now()
	s2, err := Open(Config{Path: s.Path(), OpenTimeout: timeout})
	elapsed := time.Since(start)
	if err == nil {
		s2.Close()
		t.Fatal("second Open of a held file succeeded")
	}
	if !strings.Contains(err.Error(), s.Path()) || !strings.Contains(err.Error(), "another process holds") {
		t.Errorf("second Open: %q; want it to name %s and say another process holds it", err, s.Path())
	}
	if elapsed < timeout || elapsed > defaultTestTimeout {
		t.Errorf("second Open failed after %v, want at least %v", elapsed, timeout)
	}
	// The first store is unharmed.
	if _, err := s.WriteState(testCtx(t), grain.NewID("t.T", "k"), "s", []byte("x"), ""); err != nil {
		t.Fatal(err)
	}
}

// setFormat rewrites the format version of the closed store at path.
func setFormat(t *testing.T, path string, v []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: defaultTestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, v) }); err != nil {
		t.Fatal(err)
	}
}

func TestFormatVersion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version []byte
		want    string // "" to open
	}{
		{"current", binary.BigEndian.AppendUint64(nil, formatVersion), ""},
		{"newer", binary.BigEndian.AppendUint64(nil, formatVersion+1), "format version 2 is newer than this build reads (1)"},
		{"zero", binary.BigEndian.AppendUint64(nil, 0), "format version 0"},
		{"short", []byte{1}, "format version is 1 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "granary.db")
			s, err := Open(Config{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			setFormat(t, path, tc.version)
			s, err = Open(Config{Path: path})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
				return
			}
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %q; want it to name %s and say %q", err, path, tc.want)
			}
			// The refused file was released: it opens again.
			setFormat(t, path, binary.BigEndian.AppendUint64(nil, formatVersion))
		})
	}
}

func TestNotABoltFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "granary.db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("not a database "), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Config{Path: path})
	if err == nil {
		s.Close()
		t.Fatal("Open of a file that is not a database succeeded")
	}
	if !strings.HasPrefix(err.Error(), "boltstore: open "+path) {
		t.Fatalf("Open: %q; want it to name the file", err)
	}
}

func TestClose(t *testing.T) {
	s := openStore(t, 0)
	ctx := testCtx(t)
	id := grain.NewID("t.T", "k")
	etag, err := s.WriteState(ctx, id, "s", []byte("x"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
	storagetest.WantClosed(t, s, id, etag)
}

// TestCloseDuringOperations: operations racing Close either complete or
// fail with ErrClosed.
func TestCloseDuringOperations(t *testing.T) {
	s := openStore(t, 0)
	var (
		wg      sync.WaitGroup
		started sync.WaitGroup
	)
	errc := make(chan error, 16)
	for w := range 16 {
		started.Add(1)
		wg.Go(func() {
			ctx := testCtx(t)
			id := grain.NewID("t.T", fmt.Sprint(w))
			etag := ""
			for i := 0; ; i++ {
				var err error
				if w%2 == 0 {
					etag, err = s.WriteState(ctx, id, "s", []byte("data"), etag)
				} else {
					_, err = s.ReadState(ctx, id, "s")
				}
				if i == 0 {
					started.Done()
				}
				if err != nil {
					if !errors.Is(err, storage.ErrClosed) {
						errc <- fmt.Errorf("writer %d: %w", w, err)
					}
					return
				}
			}
		})
	}
	started.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func TestCancelled(t *testing.T) {
	s := openStore(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	id := grain.NewID("t.T", "k")
	errs := map[string]error{}
	_, errs["ReadState"] = s.ReadState(ctx, id, "s")
	_, errs["WriteState"] = s.WriteState(ctx, id, "s", []byte("x"), "")
	_, errs["ClearState"] = s.ClearState(ctx, id, "s", "")
	_, errs["UpsertReminder"] = s.UpsertReminder(ctx, storage.ReminderEntry{Grain: id, Name: "r"})
	errs["RemoveReminder"] = s.RemoveReminder(ctx, id, "r", "")
	_, errs["GrainReminders"] = s.GrainReminders(ctx, id)
	_, errs["RangeReminders"] = s.RangeReminders(ctx, []storage.HashRange{{Lo: 0, Hi: math.MaxUint64}})
	for name, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", name, err)
		}
	}
	// Nothing was written.
	if r, err := s.ReadState(testCtx(t), id, "s"); err != nil || r.ETag != "" {
		t.Fatalf("after cancelled writes: %+v, %v", r, err)
	}
}

func TestPersistence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "granary.db")
	ctx := testCtx(t)
	id := grain.NewID("t.T", "k")
	s := openAt(t, Config{Path: path})
	kept, err := s.WriteState(ctx, id, "kept", []byte("value"), "")
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.WriteState(ctx, id, "cleared", []byte("gone"), "")
	if err != nil {
		t.Fatal(err)
	}
	cleared, err := s.ClearState(ctx, id, "cleared", e)
	if err != nil {
		t.Fatal(err)
	}
	rem := storage.ReminderEntry{Grain: id, Name: "r", Hash: 77, FirstTick: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC), Period: time.Minute}
	if rem.ETag, err = s.UpsertReminder(ctx, rem); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, Config{Path: path})
	if r, err := s.ReadState(ctx, id, "kept"); err != nil || !r.Exists || string(r.Data) != "value" || r.ETag != kept {
		t.Fatalf("kept state after reopen: %+v, %v", r, err)
	}
	if r, err := s.ReadState(ctx, id, "cleared"); err != nil || r.Exists || r.Data != nil || r.ETag != cleared {
		t.Fatalf("cleared state after reopen: %+v, %v", r, err)
	}
	for name, get := range map[string]func() ([]storage.ReminderEntry, error){
		"GrainReminders": func() ([]storage.ReminderEntry, error) { return s.GrainReminders(ctx, id) },
		"RangeReminders": func() ([]storage.ReminderEntry, error) {
			return s.RangeReminders(ctx, []storage.HashRange{{Lo: 77, Hi: 77}})
		},
	} {
		rs, err := get()
		if err != nil || len(rs) != 1 || rs[0] != rem {
			t.Fatalf("%s after reopen: %+v, %v; want [%+v]", name, rs, err, rem)
		}
	}
	// The reminder sequence continues: no ETag is reused.
	e2, err := s.UpsertReminder(ctx, storage.ReminderEntry{Grain: id, Name: "other"})
	if err != nil || e2 == rem.ETag {
		t.Fatalf("upsert after reopen = %q, %v; want a new ETag (not %q)", e2, err, rem.ETag)
	}
}

// TestStateVersions checks the ETags are the version counter.
func TestStateVersions(t *testing.T) {
	s := openStore(t, 0)
	ctx := testCtx(t)
	id := grain.NewID("t.T", "k")
	etag := ""
	for i, op := range []string{"write", "write", "clear", "clear", "write"} {
		var err error
		if op == "write" {
			etag, err = s.WriteState(ctx, id, "s", []byte(op), etag)
		} else {
			etag, err = s.ClearState(ctx, id, "s", etag)
		}
		if want := storage.FormatVersion(uint64(i + 1)); err != nil || etag != want {
			t.Fatalf("%s %d = %q, %v; want %q", op, i, etag, err, want)
		}
	}
}

func TestDataIsCopied(t *testing.T) {
	s := openStore(t, 0)
	ctx := testCtx(t)
	id := grain.NewID("t.T", "k")
	in := []byte("original")
	etag, err := s.WriteState(ctx, id, "s", in, "")
	if err != nil {
		t.Fatal(err)
	}
	copy(in, "XXXXXXXX")
	r, err := s.ReadState(ctx, id, "s")
	if err != nil || string(r.Data) != "original" {
		t.Fatalf("after the caller changed its data: %q, %v", r.Data, err)
	}
	// Growing the file remaps it; data read before stays valid.
	big := bytes.Repeat([]byte{7}, 1<<20)
	for i := range 8 {
		if _, err := s.WriteState(ctx, grain.NewID("t.T", fmt.Sprint(i)), "s", big, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.WriteState(ctx, id, "s", []byte("new"), etag); err != nil {
		t.Fatal(err)
	}
	if string(r.Data) != "original" {
		t.Fatalf("data read before later writes changed to %q", r.Data)
	}
	r.Data[0] = 'Y'
	if r2, _ := s.ReadState(ctx, id, "s"); string(r2.Data) != "new" {
		t.Fatalf("store reads %q after the caller changed a read's data", r2.Data)
	}
}

// TestBatchedMismatches: writers whose ETag is wrong, batched with writers
// whose ETag is right, neither fail nor undo the others.
func TestBatchedMismatches(t *testing.T) {
	s := openStore(t, 0)
	const writers, rounds = 32, 20
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			ctx := testCtx(t)
			id := grain.NewID("t.T", fmt.Sprint(w))
			etag := ""
			for i := range rounds {
				e, err := s.WriteState(ctx, id, "s", []byte{byte(i)}, etag)
				if err != nil {
					errc <- fmt.Errorf("writer %d round %d: %w", w, i, err)
					return
				}
				if _, err := s.WriteState(ctx, id, "s", []byte("stale"), etag); !errors.Is(err, storage.ErrETagMismatch) {
					errc <- fmt.Errorf("writer %d round %d: stale write: %v, want ErrETagMismatch", w, i, err)
					return
				}
				if _, err := s.ClearState(ctx, id, "s", "bogus"); !errors.Is(err, storage.ErrETagMismatch) {
					errc <- fmt.Errorf("writer %d round %d: bogus clear: %v, want ErrETagMismatch", w, i, err)
					return
				}
				etag = e
			}
			r, err := s.ReadState(ctx, id, "s")
			if err != nil || !bytes.Equal(r.Data, []byte{rounds - 1}) || r.ETag != storage.FormatVersion(rounds) {
				errc <- fmt.Errorf("writer %d: final record %+v, %v", w, r, err)
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func TestClearNeverExisted(t *testing.T) {
	s := openStore(t, 0)
	ctx := testCtx(t)
	id := grain.NewID("t.T", "k")
	if e, err := s.ClearState(ctx, id, "s", "1"); !errors.Is(err, storage.ErrETagMismatch) {
		t.Fatalf(`clear of a missing record with "1" = %q, %v; want ErrETagMismatch`, e, err)
	}
	if e, err := s.ClearState(ctx, id, "s", ""); err != nil || e != "" {
		t.Fatalf(`clear of a missing record with "" = %q, %v`, e, err)
	}
	if r, _ := s.ReadState(ctx, id, "s"); r.Exists || r.ETag != "" || r.Data != nil {
		t.Fatalf("after clearing a missing record: %+v, want Record{}", r)
	}
	if e, err := s.WriteState(ctx, id, "s", []byte("x"), ""); err != nil || e != "1" {
		t.Fatalf(`first write after a no-op clear = %q, %v; want "1"`, e, err)
	}
}

// TestNULSeparator: grain keys may contain the separator; names may not,
// and a grain whose key extends another's with a NUL stays apart from it.
func TestNULSeparator(t *testing.T) {
	s := openStore(t, 0)
	ctx := testCtx(t)
	a := grain.NewID("t.T", "a")
	ab := grain.NewID("t.T", "a\x00b")
	if _, err := s.WriteState(ctx, a, "b\x00c", []byte("x"), ""); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Fatalf("state name with a NUL: %v, want it refused", err)
	}
	if _, err := s.UpsertReminder(ctx, storage.ReminderEntry{Grain: a, Name: "b\x00c"}); err == nil {
		t.Fatal("reminder name with a NUL accepted")
	}
	if _, err := s.WriteState(ctx, ab, "c", []byte("ab"), ""); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.ReadState(ctx, a, "c"); r.Exists {
		t.Fatal("grain a reads grain a\\x00b's state")
	}
	for _, r := range []storage.ReminderEntry{{Grain: ab, Name: "c", Hash: 1}, {Grain: a, Name: "z", Hash: 2}, {Grain: a, Name: "", Hash: 3}} {
		if _, err := s.UpsertReminder(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := s.GrainReminders(ctx, a)
	if err != nil || len(rs) != 2 || rs[0].Name != "" || rs[1].Name != "z" || rs[0].Grain != a {
		t.Fatalf("GrainReminders(a) = %+v, %v; want a's \"\" and \"z\"", rs, err)
	}
	rs, err = s.RangeReminders(ctx, []storage.HashRange{{Lo: 1, Hi: 1}})
	if err != nil || len(rs) != 1 || rs[0].Grain != ab || rs[0].Name != "c" {
		t.Fatalf("RangeReminders([1,1]) = %+v, %v; want a\\x00b's \"c\"", rs, err)
	}
}

func TestReminderMoves(t *testing.T) {
	s := openStore(t, 0)
	ctx := testCtx(t)
	id := grain.NewID("t.T", "k")
	r := storage.ReminderEntry{Grain: id, Name: "r", Hash: 5}
	if _, err := s.UpsertReminder(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.Hash = 10
	if _, err := s.UpsertReminder(ctx, r); err != nil {
		t.Fatal(err)
	}
	if rs, err := s.RangeReminders(ctx, []storage.HashRange{{Lo: 5, Hi: 5}}); err != nil || len(rs) != 0 {
		t.Fatalf("old position after a move: %+v, %v", rs, err)
	}
	if rs, err := s.RangeReminders(ctx, []storage.HashRange{{Lo: 10, Hi: 10}}); err != nil || len(rs) != 1 {
		t.Fatalf("new position after a move: %+v, %v", rs, err)
	}
	if err := s.RemoveReminder(ctx, id, "r", ""); err != nil {
		t.Fatal(err)
	}
	if rs, err := s.RangeReminders(ctx, []storage.HashRange{{Lo: 0, Hi: math.MaxUint64}}); err != nil || len(rs) != 0 {
		t.Fatalf("index after removal: %+v, %v", rs, err)
	}
}

func TestRangeRemindersRanges(t *testing.T) {
	s := openStore(t, 0)
	ctx := testCtx(t)
	for i, h := range []uint64{0, 10, 20, math.MaxUint64} {
		if _, err := s.UpsertReminder(ctx, storage.ReminderEntry{Grain: grain.NewID("t.T", fmt.Sprint(i)), Name: "r", Hash: h}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		ranges []storage.HashRange
		want   []uint64
	}{
		{[]storage.HashRange{{Lo: 0, Hi: 15}, {Lo: 5, Hi: 25}}, []uint64{0, 10, 20}},                         // overlapping: each once
		{[]storage.HashRange{{Lo: 20, Hi: math.MaxUint64}, {Lo: 0, Hi: 0}}, []uint64{0, 20, math.MaxUint64}}, // wrapped: by hash
		{[]storage.HashRange{{Lo: 0, Hi: math.MaxUint64}, {Lo: 10, Hi: 10}}, []uint64{0, 10, 20, math.MaxUint64}},
		{[]storage.HashRange{{Lo: 11, Hi: 10}}, nil}, // empty
		{[]storage.HashRange{{Lo: 11, Hi: 19}}, nil},
	} {
		rs, err := s.RangeReminders(ctx, tc.ranges)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, r := range rs {
			got = append(got, r.Hash)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("RangeReminders(%v) hashes %v, want %v", tc.ranges, got, tc.want)
		}
	}
}

func TestReminderTimes(t *testing.T) {
	s := openStore(t, 0)
	ctx := testCtx(t)
	id := grain.NewID("t.T", "k")
	for _, tick := range []time.Time{
		{},
		time.Date(1500, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(2500, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2026, 6, 1, 12, 0, 0, 5, time.FixedZone("X", 3600)),
		time.Now(), // with a monotonic reading
	} {
		if _, err := s.UpsertReminder(ctx, storage.ReminderEntry{Grain: id, Name: "r", FirstTick: tick, Period: -time.Nanosecond}); err != nil {
			t.Fatal(err)
		}
		rs, err := s.GrainReminders(ctx, id)
		if err != nil || len(rs) != 1 {
			t.Fatalf("GrainReminders = %+v, %v", rs, err)
		}
		if got := rs[0].FirstTick; !got.Equal(tick) || got.Location() != time.UTC || got.IsZero() != tick.IsZero() {
			t.Errorf("FirstTick %v read as %v", tick, got)
		}
		if rs[0].Period != -time.Nanosecond {
			t.Errorf("Period read as %v", rs[0].Period)
		}
	}
}

func TestRemoveReminderMismatch(t *testing.T) {
	s := openStore(t, 0)
	ctx := testCtx(t)
	id := grain.NewID("t.T", "k")
	e, err := s.UpsertReminder(ctx, storage.ReminderEntry{Grain: id, Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveReminder(ctx, id, "r", "bogus"); !errors.Is(err, storage.ErrETagMismatch) {
		t.Fatalf("RemoveReminder with a bogus ETag: %v", err)
	}
	if rs, _ := s.GrainReminders(ctx, id); len(rs) != 1 || rs[0].ETag != e {
		t.Fatalf("after a refused removal: %+v", rs)
	}
}

// BenchmarkStateWrite: grains' writes, each with the last ETag, of their own 100-byte
// states through the store, one writer and 64.
func BenchmarkStateWrite(b *testing.B) {
	storagetest.BenchmarkStateWrite(b, openStore(b, 0))
}

// BenchmarkStateWriteRaw is the baseline: the same writes as bare bbolt
// puts, Update for one writer and Batch for many, as the store commits.
func BenchmarkStateWriteRaw(b *testing.B) {
	s := openStore(b, 0)
	bucket := []byte("bench")
	if err := s.db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists(bucket); return err }); err != nil {
		b.Fatal(err)
	}
	var writers atomic.Int64
	storagetest.BenchmarkWrites(b, func(b *testing.B, w int) func([]byte) error {
		key := []byte(fmt.Sprint(w))
		return func(data []byte) error {
			put := func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(key, data) }
			if writers.Add(1) == 1 {
				defer writers.Add(-1)
				return s.db.Update(put)
			}
			defer writers.Add(-1)
			return s.db.Batch(put)
		}
	})
}
