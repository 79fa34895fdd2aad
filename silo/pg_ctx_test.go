package silo

import (
	"context"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/pgtest"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/pgstore"
	"github.com/jackc/pgx/v5"
)

// TestStatePostgresQueuedWriteOutlivesTurn: a state write queued in
// pgstore's group commit whose caller gives up returns at once, and the
// grain's turn ends, after which the runtime reuses the turn's Context. The
// write never touches that Context when it is sent later (that would be a
// nil dereference that crashes the silo, or a race with the record's next
// use): it is left out of the batch, or sent under its own deadline.
//
// Here: MaxConns 1; grain "x"'s write holds the only connection, blocked
// on a row lock the test holds; grain "y"'s write queues behind it and its
// caller's deadline passes; y's call ends; then the lock goes.
func TestStatePostgresQueuedWriteOutlivesTurn(t *testing.T) {
	// Not parallel: it waits for a lock wait anywhere on the server
	// (pg_locks), which another test's could be.
	dsn := pgtest.DSN(t)
	service := pgtest.ServiceID(t)
	ctx := testCtx(t)
	st, err := pgstore.Open(ctx, pgstore.Config{DSN: dsn, ServiceID: service, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	w := newRegisterWorld()
	s := newStateSilo(t, w, func(c *Config) { c.Storage = map[string]storage.Provider{grain.DefaultStorage: st} })
	for _, k := range []string{"x", "y"} {
		if _, err := reg(s, k).Set(ctx, &probe.RegisterOp{Value: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// Lock x's row from another connection.
	lock, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(context.Background())
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1 FROM granary_state WHERE service_id = $1 AND grain_id = $2 FOR UPDATE`,
		service, grain.NewID(probe.RegisterGrainType, "x").String()); err != nil {
		t.Fatal(err)
	}
	xdone := make(chan error, 1)
	go func() {
		_, err := reg(s, "x").Set(ctx, &probe.RegisterOp{Value: 2})
		xdone <- err
	}()
	testwait.For(t, defaultTestTimeout, "x's write to wait for the row lock", func() bool {
		var n int
		_ = lock.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&n)
		return n > 0
	})
	// y's write queues behind x's, and its caller gives up.
	yctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = reg(s, "y").Set(yctx, &probe.RegisterOp{Value: 2})
	cancel()
	wantCode(t, err, 4 /* DeadlineExceeded */, "y's queued write past its deadline")
	// y's Set deactivates y after its failed write: once y is gone its
	// call's record has been released.
	testwait.For(t, defaultTestTimeout, "y's activation to end", func() bool {
		_, found, err := s.Lookup(ctx, grain.NewID(probe.RegisterGrainType, "y"))
		return err == nil && !found
	})
	// Let x's write go: its connection frees, and the committer sends y's
	// queued write with y's turn Context.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-xdone; err != nil {
		t.Fatal(err)
	}
	// One more write through the committer, so that the queued one has
	// surely been sent before the test ends.
	if _, err := reg(s, "x").Set(ctx, &probe.RegisterOp{Value: 3}); err != nil {
		t.Fatal(err)
	}
}
