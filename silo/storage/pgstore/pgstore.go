package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/granaryio/granary/silo/storage"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of Config.
const (
	DefaultServiceID      = "default"
	DefaultConnectTimeout = 10 * time.Second
)

// Config configures a Store. Set DSN or Pool; every other field has a
// default.
type Config struct {
	// DSN names the database, as a libpq URL
	// ("postgres://user:password@host:5432/db?sslmode=disable") or a
	// key=value string ("host=db user=granary dbname=granary"). Required
	// unless Pool is set.
	DSN string
	// Pool, when set, is used instead of a pool of the store's own, for
	// an application that already has one. Close does not close it.
	Pool *pgxpool.Pool
	// ServiceID separates the rows of services (and tests) that share one
	// database: a store sees only its service's. Default "default".
	ServiceID string
	// MaxStateSize is the largest state, in bytes, the store writes;
	// larger ones fail with storage.ErrTooLarge. 0 means
	// storage.DefaultMaxStateSize (4 MiB).
	MaxStateSize int
	// MaxConns is the size of the pool the store makes from DSN: the most
	// operations it runs at once. 0 means pgxpool's default, the larger of
	// 4 and the number of CPUs. Not allowed with Pool.
	MaxConns int32
	// ConnectTimeout bounds Open's first contact with the server, and
	// each new connection of the store's pool. 0 means the DSN's
	// connect_timeout if it has one, else 10s.
	ConnectTimeout time.Duration
	// Clock gives the stream log's records their times; nil means
	// storage.SystemClock. A silo passes its own clock, so that a fake
	// one in tests governs retention too.
	Clock storage.Clock
}

// validate reports the first field that is wrong, by name.
func (c Config) validate() error {
	switch {
	case c.DSN == "" && c.Pool == nil:
		return configError("DSN", "required unless Pool is set")
	case c.DSN != "" && c.Pool != nil:
		return configError("DSN", "set together with Pool; set one of them")
	case strings.ContainsRune(c.ServiceID, 0) || !utf8.ValidString(c.ServiceID):
		return configError("ServiceID", "%q is not valid UTF-8 text without NUL bytes", c.ServiceID)
	case c.MaxStateSize < 0:
		return configError("MaxStateSize", "%d is negative", c.MaxStateSize)
	case c.MaxConns < 0:
		return configError("MaxConns", "%d is negative", c.MaxConns)
	case c.MaxConns != 0 && c.Pool != nil:
		return configError("MaxConns", "set with Pool, which has its own size")
	case c.ConnectTimeout < 0:
		return configError("ConnectTimeout", "%v is negative", c.ConnectTimeout)
	}
	return nil
}

func configError(field, format string, args ...any) error {
	return fmt.Errorf("pgstore: config: %s: %s", field, fmt.Sprintf(format, args...))
}

// Store is a storage.Provider, storage.ReminderTable and
// storage.StreamLog on PostgreSQL. Its methods may be called from any
// goroutine, concurrently.
type Store struct {
	pool         *pgxpool.Pool
	ownPool      bool // the store made pool, and closes it
	service      string
	maxStateSize int
	clock        storage.Clock
	closed       atomic.Bool
	commits      committer // state writes and stream appends, in group commits
}

var (
	_ storage.Provider      = (*Store)(nil)
	_ storage.ReminderTable = (*Store)(nil)
)

// Open connects to the database of cfg, creates or migrates its tables,
// and returns the store. It fails if the server does not answer within
// cfg.ConnectTimeout, if ctx ends, or if the database's schema is newer
// than this code knows.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{
		pool:         cfg.Pool,
		service:      cfg.ServiceID,
		maxStateSize: cfg.MaxStateSize,
		clock:        cfg.Clock,
	}
	if s.clock == nil {
		s.clock = storage.SystemClock{}
	}
	if s.service == "" {
		s.service = DefaultServiceID
	}
	if s.maxStateSize == 0 {
		s.maxStateSize = storage.DefaultMaxStateSize
	}
	timeout := cfg.ConnectTimeout
	if s.pool == nil {
		pc, err := pgxpool.ParseConfig(cfg.DSN)
		if err != nil {
			return nil, configError("DSN", "%v", err)
		}
		if timeout == 0 {
			timeout = pc.ConnConfig.ConnectTimeout
		}
		if timeout == 0 {
			timeout = DefaultConnectTimeout
		}
		pc.ConnConfig.ConnectTimeout = timeout
		if cfg.MaxConns > 0 {
			pc.MaxConns = cfg.MaxConns
		}
		// Makes no connection yet: the Ping below is the first.
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, fmt.Errorf("pgstore: open: %w", err)
		}
		s.pool, s.ownPool = pool, true
	}
	if timeout == 0 {
		timeout = DefaultConnectTimeout
	}
	if err := s.start(ctx, timeout); err != nil {
		s.Close()
		return nil, err
	}
	s.commits = committer{s: s, slots: int(s.pool.Config().MaxConns)}
	return s, nil
}

// start checks that the server answers within timeout, then migrates the
// schema.
func (s *Store) start(ctx context.Context, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	err := s.pool.Ping(pctx)
	timedOut := pctx.Err() != nil
	cancel()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return fmt.Errorf("pgstore: open: %w: %w", ctx.Err(), err)
	case timedOut:
		return fmt.Errorf("pgstore: open: the server did not answer within %v (ConnectTimeout): %w", timeout, err)
	default:
		return fmt.Errorf("pgstore: open: %w", err)
	}
	if err := migrate(ctx, s.pool); err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%w: %w", err, ctx.Err())
		}
		return err
	}
	return nil
}

// Close closes the store: later operations fail with storage.ErrClosed.
// It closes the store's own pool, waiting for the operations in flight to
// return, but not a Config.Pool. Close is idempotent; any goroutine.
func (s *Store) Close() {
	if s.closed.Swap(true) {
		return
	}
	s.commits.close()
	if s.ownPool {
		s.pool.Close()
	}
}

// check fails an operation on a closed store.
func (s *Store) check(op string) error {
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %s: %w", op, storage.ErrClosed)
	}
	return nil
}

// fail wraps an operation's error from the driver: as storage.ErrClosed
// if the store was closed meanwhile, and with ctx's error if ctx ended
// and the driver's error does not already say so.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %s: %w (%v)", op, storage.ErrClosed, err)
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("pgstore: %s: %w: %w", op, cerr, err)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}
