package pgstore

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/pgtest"
	"github.com/granaryio/granary/silo/storage"
)

// TestFarFirstTickInvalid: a first tick past 2262 (a RegisterReminder
// with a due time over ~236 years, which the runtime accepts) cannot be
// stored; the error wraps storage.ErrInvalid, which the runtime reports as
// InvalidArgument rather than as Unavailable, "try again later".
func TestFarFirstTickInvalid(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := openStore(t, Config{DSN: dsn})
	ctx := testCtx(t)
	_, err := s.UpsertReminder(ctx, storage.ReminderEntry{Grain: grain.NewID("t.T", "k"), Name: "far",
		FirstTick: time.Now().Add(time.Duration(math.MaxInt64)), Period: time.Hour})
	if err == nil {
		return // stored: fine
	}
	if !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("UpsertReminder with a first tick the table cannot hold: %v; want it to wrap storage.ErrInvalid, not an error the runtime reports as Unavailable", err)
	}
}
