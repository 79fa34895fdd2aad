package pgstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/pgtest"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/storagetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

// defaultTestTimeout bounds every wait in these tests: a test that needs
// it has failed.
const defaultTestTimeout = 30 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens a store on the test server (unless cfg names a
// database or pool), for a service of t's own, closed at cleanup.
func openStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.DSN == "" && cfg.Pool == nil {
		cfg.DSN = pgtest.DSN(t)
	}
	if cfg.ServiceID == "" {
		cfg.ServiceID = pgtest.ServiceID(t)
	}
	s, err := Open(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	t.Cleanup(func() { deleteService(t, s, cfg.DSN) })
	return s
}

// deleteService deletes the rows of s's service, so that the tests
// leave the shared database as they found it: through s's pool, or a
// connection to dsn if the test closed it.
func deleteService(t testing.TB, s *Store, dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	exec := s.pool.Exec
	if s.closed.Load() && s.ownPool {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("deleting the test's rows: %v", err)
			return
		}
		defer conn.Close(ctx)
		exec = conn.Exec
	}
	for _, table := range []string{"granary_state", "granary_reminders",
		"granary_stream_partitions", "granary_stream_records", "granary_stream_cursors"} {
		if _, err := exec(ctx, "DELETE FROM "+table+" WHERE service_id = $1", s.service); err != nil {
			t.Errorf("deleting the test's rows: %v", err)
		}
	}
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// tempDatabase creates an empty database for t, dropped at cleanup, and
// returns its DSN: for the tests of the schema, which need one no other
// test has migrated.
func tempDatabase(t *testing.T) string {
	t.Helper()
	dsn := pgtest.DSN(t)
	ctx := testCtx(t)
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("admin connection: %v", err)
	}
	name := "granary_mig_" + randomHex(t, 6)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		t.Fatalf("CREATE DATABASE (the role needs CREATEDB): %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("DROP DATABASE %s: %v", name, err)
		}
		admin.Close(ctx)
	})
	return withDatabase(t, dsn, name)
}

// withDatabase returns dsn naming database name instead.
func withDatabase(t *testing.T, dsn, name string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatalf("%s: %v", pgtest.EnvDSN, err)
		}
		u.Path = "/" + name
		return u.String()
	}
	return dsn + " dbname=" + name // a later keyword overrides an earlier one
}

// queryInts runs a query of one integer column on dsn's database.
func queryInts(t *testing.T, dsn, sql string, args ...any) []int64 {
	t.Helper()
	ctx := testCtx(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestProvider(t *testing.T) {
	dsn := pgtest.DSN(t)
	storagetest.RunProvider(t, storagetest.Factory{
		Open: func(t *testing.T, maxStateSize int) storage.Provider {
			return openStore(t, Config{DSN: dsn, MaxStateSize: maxStateSize})
		},
		Reopen: func(t *testing.T, p storage.Provider) storage.Provider {
			s := p.(*Store)
			s.Close()
			return openStore(t, Config{DSN: dsn, ServiceID: s.service, MaxStateSize: s.maxStateSize})
		},
	})
}

func TestReminderTable(t *testing.T) {
	dsn := pgtest.DSN(t)
	storagetest.RunReminderTable(t, func(t *testing.T) storage.ReminderTable {
		return openStore(t, Config{DSN: dsn})
	})
}

func TestConfigErrors(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/x") // connects lazily: never, here
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const dsn = "postgres://u:p@127.0.0.1:1/x"
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no DSN", Config{}, "pgstore: config: DSN: required"},
		{"DSN and Pool", Config{DSN: dsn, Pool: pool}, "pgstore: config: DSN: set together with Pool"},
		{"bad DSN", Config{DSN: "host=x port=notaport"}, "pgstore: config: DSN: "},
		{"bad URL", Config{DSN: "postgres://u:secret@[::1/x"}, "pgstore: config: DSN: "},
		{"NUL in ServiceID", Config{DSN: dsn, ServiceID: "a\x00b"}, "pgstore: config: ServiceID: "},
		{"negative MaxStateSize", Config{DSN: dsn, MaxStateSize: -1}, "pgstore: config: MaxStateSize: -1 is negative"},
		{"negative MaxConns", Config{DSN: dsn, MaxConns: -1}, "pgstore: config: MaxConns: -1 is negative"},
		{"MaxConns with Pool", Config{Pool: pool, MaxConns: 4}, "pgstore: config: MaxConns: set with Pool"},
		{"negative ConnectTimeout", Config{DSN: dsn, ConnectTimeout: -time.Second}, "pgstore: config: ConnectTimeout: -1s is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(context.Background(), tc.cfg)
			if err == nil {
				s.Close()
				t.Fatalf("Open succeeded, want %q", tc.want)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Open: %v\nwant an error starting %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

// TestConcurrentOpen: silos opening a store on a fresh database at once
// all succeed, and each migration step is applied once.
func TestConcurrentOpen(t *testing.T) {
	dsn := tempDatabase(t)
	const silos = 8
	var (
		wg     sync.WaitGroup
		stores [silos]*Store
		errs   [silos]error
	)
	start := make(chan struct{})
	ctx := testCtx(t)
	for i := range silos {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = Open(ctx, Config{DSN: dsn, ServiceID: "concurrent", MaxConns: 2})
		})
	}
	close(start)
	wg.Wait()
	for i, s := range stores {
		if s != nil {
			t.Cleanup(s.Close)
		}
		if errs[i] != nil {
			t.Errorf("silo %d: Open: %v", i, errs[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	want := make([]int64, 0, schemaVersion)
	for v := 1; v <= schemaVersion; v++ {
		want = append(want, int64(v))
	}
	if got := queryInts(t, dsn, "SELECT version FROM granary_schema ORDER BY version"); !slices.Equal(got, want) {
		t.Fatalf("granary_schema versions = %v, want %v, each once", got, want)
	}
	// They share one table.
	id := grain.NewID("t.G", "k")
	e, err := stores[0].WriteState(ctx, id, "s", []byte("x"), "")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stores[silos-1].ReadState(ctx, id, "s"); err != nil || r.ETag != e {
		t.Fatalf("another silo reads %+v, %v; want ETag %q", r, err, e)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	dsn := tempDatabase(t)
	ctx := testCtx(t)
	s, err := Open(ctx, Config{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Reopening at the same version is fine, and changes nothing.
	if s, err = Open(ctx, Config{DSN: dsn}); err != nil {
		t.Fatalf("reopen at the current version: %v", err)
	}
	s.Close()
	queryInts(t, dsn, "INSERT INTO granary_schema (version) VALUES ($1) RETURNING version", schemaVersion+1)
	s, err = Open(ctx, Config{DSN: dsn})
	if err == nil {
		s.Close()
		t.Fatal("Open of a database with a newer schema succeeded")
	}
	if !strings.Contains(err.Error(), "newer than this code's") {
		t.Fatalf("Open: %v; want it to say the schema is newer", err)
	}
	t.Logf("refused as: %v", err)
}

// TestOpenUnreachable: Open fails within ConnectTimeout when nothing
// listens, or a server accepts connections but never answers.
func TestOpenUnreachable(t *testing.T) {
	const timeout = 500 * time.Millisecond
	for _, tc := range []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"refused", func(*testing.T) string { return "127.0.0.1:1" }},
		{"silent", silentServer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := "postgres://granary:granary@" + tc.addr(t) + "/granary_test?sslmode=disable"
			start := time.Now()
			s, err := Open(context.Background(), Config{DSN: dsn, ConnectTimeout: timeout})
			elapsed := time.Since(start)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			// A refused connection fails at once, a silent server at the
			// timeout; the margin is for a loaded machine.
			if elapsed > timeout+time.Second {
				t.Fatalf("Open failed after %v, over ConnectTimeout %v: %v", elapsed, timeout, err)
			}
			if !strings.HasPrefix(err.Error(), "pgstore: open: ") {
				t.Fatalf("Open: %v", err)
			}
			t.Logf("failed after %v: %v", elapsed.Round(time.Millisecond), err)
		})
	}
}

// silentServer listens on a local port, accepting connections and never
// writing to them, until the test ends; it returns its address.
func silentServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func TestOpenCancelled(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := Open(ctx, Config{DSN: dsn, ServiceID: pgtest.ServiceID(t)})
	if err == nil {
		s.Close()
		t.Fatal("Open with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Open: %v, want context.Canceled", err)
	}
}

func TestClosed(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := testCtx(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	own := openStore(t, Config{DSN: dsn})
	shared := openStore(t, Config{Pool: pool})
	id := grain.NewID("t.G", "k")
	for _, tc := range []struct {
		name string
		s    *Store
	}{{"own pool", own}, {"Config.Pool", shared}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			e, err := s.WriteState(ctx, id, "s", []byte("x"), "")
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			s.Close() // idempotent
			storagetest.WantClosed(t, s, id, e)
		})
	}
	// Close leaves a Config.Pool open.
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("the pool given in Config.Pool after Close: %v", err)
	}
}

// TestStateNearLimit: states at and just under MaxStateSize round-trip;
// one byte over is refused and changes nothing.
func TestStateNearLimit(t *testing.T) {
	const limit = 1 << 20
	s := openStore(t, Config{MaxStateSize: limit})
	ctx := testCtx(t)
	id := grain.NewID("t.G", "big")
	etag := ""
	for _, n := range []int{limit - 1, limit, limit - 100} {
		data := make([]byte, n)
		if _, err := rand.Read(data); err != nil {
			t.Fatal(err)
		}
		e, err := s.WriteState(ctx, id, "s", data, etag)
		if err != nil {
			t.Fatalf("write of %d bytes: %v", n, err)
		}
		r, err := s.ReadState(ctx, id, "s")
		if err != nil || !r.Exists || r.ETag != e || !bytes.Equal(r.Data, data) {
			t.Fatalf("read after a write of %d bytes: %d bytes at %q, %v; want them back at %q", n, len(r.Data), r.ETag, err, e)
		}
		etag = e
	}
	_, err := s.WriteState(ctx, id, "s", make([]byte, limit+1), etag)
	if !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("write over the limit: %v, want ErrTooLarge", err)
	}
	if r, _ := s.ReadState(ctx, id, "s"); r.ETag != etag || len(r.Data) != limit-100 {
		t.Fatalf("after a refused write: %d bytes at %q, want %d at %q", len(r.Data), r.ETag, limit-100, etag)
	}
}

func TestETagsAreVersions(t *testing.T) {
	s := openStore(t, Config{})
	ctx := testCtx(t)
	id := grain.NewID("t.G", "v")
	var got []string
	e, err := s.WriteState(ctx, id, "s", []byte("a"), "")
	got = append(got, e)
	for _, step := range []func(string) (string, error){
		func(e string) (string, error) { return s.WriteState(ctx, id, "s", []byte("b"), e) },
		func(e string) (string, error) { return s.ClearState(ctx, id, "s", e) },
		func(e string) (string, error) { return s.ClearState(ctx, id, "s", e) },
		func(e string) (string, error) { return s.WriteState(ctx, id, "s", nil, e) },
	} {
		if err != nil {
			t.Fatal(err)
		}
		e, err = step(e)
		got = append(got, e)
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"1", "2", "3", "4", "5"}; !slices.Equal(got, want) {
		t.Fatalf("ETags = %v, want %v", got, want)
	}
	_, err = s.WriteState(ctx, id, "s", []byte("c"), "3")
	if !errors.Is(err, storage.ErrETagMismatch) || !strings.Contains(err.Error(), `at version "5", not "3"`) {
		t.Fatalf("stale write: %v; want a mismatch naming versions 5 and 3", err)
	}
	for _, bad := range []string{"0", "-1", "x", "18446744073709551615"} {
		if _, err := s.WriteState(ctx, id, "s", []byte("c"), bad); !errors.Is(err, storage.ErrETagMismatch) {
			t.Errorf("write with ETag %q: %v, want ErrETagMismatch", bad, err)
		}
	}
}

func TestServicesAreSeparate(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := openStore(t, Config{DSN: dsn})
	b := openStore(t, Config{DSN: dsn})
	ctx := testCtx(t)
	id := grain.NewID("t.G", "shared-key")
	if _, err := a.WriteState(ctx, id, "s", []byte("a"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.UpsertReminder(ctx, storage.ReminderEntry{Grain: id, Name: "r", Hash: 5}); err != nil {
		t.Fatal(err)
	}
	if r, err := b.ReadState(ctx, id, "s"); err != nil || r.ETag != "" {
		t.Fatalf("another service reads %+v, %v", r, err)
	}
	if rs, err := b.RangeReminders(ctx, []storage.HashRange{{Lo: 0, Hi: math.MaxUint64}}); err != nil || len(rs) != 0 {
		t.Fatalf("another service's range read: %v, %v", rs, err)
	}
	if rs, err := b.GrainReminders(ctx, id); err != nil || len(rs) != 0 {
		t.Fatalf("another service's grain read: %v, %v", rs, err)
	}
}

// TestReminderDetails: overlapping, inverted and adjacent ranges, the
// zero first tick, byte order of names, and ETags never reused.
func TestReminderDetails(t *testing.T) {
	s := openStore(t, Config{})
	ctx := testCtx(t)
	id := grain.NewID("t.G", "r")
	names := []string{"b", "B", "a", "é", "Z"}
	for i, name := range names {
		if _, err := s.UpsertReminder(ctx, storage.ReminderEntry{Grain: id, Name: name, Hash: uint64(100 + i), Period: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := s.GrainReminders(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.Name)
		if !r.FirstTick.IsZero() || r.Period != time.Second {
			t.Fatalf("reminder %+v: want a zero first tick and a period of 1s", r)
		}
	}
	want := slices.Sorted(slices.Values(names))
	if !slices.Equal(got, want) {
		t.Fatalf("GrainReminders names %q, want %q (byte order)", got, want)
	}
	ranges := []storage.HashRange{{Lo: 100, Hi: 102}, {Lo: 101, Hi: 103}, {Lo: 104, Hi: 104}, {Lo: 200, Hi: 100}, {Lo: 103, Hi: 103}}
	rs, err = s.RangeReminders(ctx, ranges)
	if err != nil {
		t.Fatal(err)
	}
	var hashes []uint64
	for _, r := range rs {
		hashes = append(hashes, r.Hash)
	}
	if want := []uint64{100, 101, 102, 103, 104}; !slices.Equal(hashes, want) {
		t.Fatalf("RangeReminders(%v) = hashes %v, want each of %v once", ranges, hashes, want)
	}
	e1, err := s.UpsertReminder(ctx, storage.ReminderEntry{Grain: id, Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveReminder(ctx, id, "x", e1); err != nil {
		t.Fatal(err)
	}
	e2, err := s.UpsertReminder(ctx, storage.ReminderEntry{Grain: id, Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if e2 == e1 {
		t.Fatalf("ETag %q reused after removal", e1)
	}
	if err := s.RemoveReminder(ctx, id, "x", e1); !errors.Is(err, storage.ErrETagMismatch) {
		t.Fatalf("removal with the ETag of the removed reminder: %v, want ErrETagMismatch", err)
	}
	if err := s.RemoveReminder(ctx, id, "x", "junk"); !errors.Is(err, storage.ErrETagMismatch) {
		t.Fatalf("removal with a malformed ETag: %v, want ErrETagMismatch", err)
	}
	if err := s.RemoveReminder(ctx, id, "missing", "junk"); err != nil {
		t.Fatalf("removal of a missing reminder with an ETag: %v, want none", err)
	}
	_, err = s.UpsertReminder(ctx, storage.ReminderEntry{Grain: id, Name: "far", FirstTick: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err == nil || !strings.HasPrefix(err.Error(), "pgstore: ") {
		t.Fatalf("a first tick in the year 3000: %v, want an error", err)
	}
}

func TestEncodeHashKeepsOrder(t *testing.T) {
	hs := []uint64{0, 1, 1<<62 + 3, 1<<63 - 1, 1 << 63, 1<<63 + 1, math.MaxUint64 - 1, math.MaxUint64}
	for i, h := range hs {
		if got := decodeHash(encodeHash(h)); got != h {
			t.Fatalf("decodeHash(encodeHash(%d)) = %d", h, got)
		}
		if i > 0 && encodeHash(hs[i-1]) >= encodeHash(h) {
			t.Fatalf("encodeHash(%d) = %d is not below encodeHash(%d) = %d", hs[i-1], encodeHash(hs[i-1]), h, encodeHash(h))
		}
	}
	if encodeHash(0) != math.MinInt64 || encodeHash(math.MaxUint64) != math.MaxInt64 {
		t.Fatal("encodeHash does not map the ring onto the whole of int64")
	}
}

func TestMergeRanges(t *testing.T) {
	type r = storage.HashRange
	const top = math.MaxUint64
	for _, tc := range []struct {
		in   []r
		want []r
	}{
		{nil, nil},
		{[]r{{Lo: 5, Hi: 4}}, nil},
		{[]r{{Lo: 0, Hi: top}}, []r{{Lo: 0, Hi: top}}},
		{[]r{{Lo: 10, Hi: 20}, {Lo: 0, Hi: 5}}, []r{{Lo: 0, Hi: 5}, {Lo: 10, Hi: 20}}},
		{[]r{{Lo: 0, Hi: 5}, {Lo: 6, Hi: 9}}, []r{{Lo: 0, Hi: 9}}},
		{[]r{{Lo: 0, Hi: 5}, {Lo: 3, Hi: 4}, {Lo: 5, Hi: 7}, {Lo: 9, Hi: 9}}, []r{{Lo: 0, Hi: 7}, {Lo: 9, Hi: 9}}},
		{[]r{{Lo: top - 1, Hi: top}, {Lo: top, Hi: top}, {Lo: 0, Hi: 0}}, []r{{Lo: 0, Hi: 0}, {Lo: top - 1, Hi: top}}},
		{[]r{{Lo: 0, Hi: top}, {Lo: 7, Hi: 8}}, []r{{Lo: 0, Hi: top}}},
	} {
		lo, hi := mergeRanges(tc.in)
		var got []r
		for i := range lo {
			got = append(got, r{Lo: decodeHash(lo[i]), Hi: decodeHash(hi[i])})
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("mergeRanges(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestEncodeTime(t *testing.T) {
	if ns, err := encodeTime(time.Time{}); ns != nil || err != nil {
		t.Fatalf("encodeTime(zero) = %v, %v; want nil", ns, err)
	}
	if got := decodeTime(nil); !got.IsZero() {
		t.Fatalf("decodeTime(nil) = %v", got)
	}
	for _, tm := range []time.Time{
		time.Unix(0, 0),
		time.Date(2026, 11, 25, 9, 0, 0, 123456789, time.FixedZone("X", 3600)),
		minTime, maxTime,
	} {
		ns, err := encodeTime(tm)
		if err != nil {
			t.Fatalf("encodeTime(%v): %v", tm, err)
		}
		if got := decodeTime(ns); !got.Equal(tm) {
			t.Fatalf("round trip of %v gave %v", tm, got)
		}
	}
	for _, tm := range []time.Time{minTime.Add(-1), maxTime.Add(1)} {
		if _, err := encodeTime(tm); err == nil {
			t.Fatalf("encodeTime(%v) succeeded", tm)
		}
	}
}
