package silo

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/pgtest"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/pgstore"
)

// openPostgres opens a store on the test server, in a service of its own,
// closed when the test ends (after the silos that use it, if the test
// makes them after this).
func openPostgres(t *testing.T) *pgstore.Store {
	t.Helper()
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	st, err := pgstore.Open(ctx, pgstore.Config{DSN: dsn, ServiceID: pgtest.ServiceID(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// A grain's state survives the kill of the silo it was active on: it
// activates again on a survivor, which reads what was acknowledged.
func TestStateSurvivesSiloKillPostgres(t *testing.T) {
	t.Parallel()
	st := openPostgres(t)
	w := newRegisterWorld()
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{
		tweak:    func(c *Config) { c.Storage = map[string]storage.Provider{grain.DefaultStorage: st} },
		register: func(s *Silo, name string) { w.register(t, s, name) },
	})
	ctx := testCtx(t)
	// Find keys that activate on b, and store a value in each.
	want := map[string]int64{}
	for i, key := range keys("k", 200) {
		if len(want) == 3 {
			break
		}
		r, err := reg(tc.silo("a"), key).Set(ctx, &probe.RegisterOp{Value: int64(100 + i)})
		if err != nil {
			t.Fatal(err)
		}
		if r.Silo == "b" {
			want[key] = r.Value
		}
	}
	if len(want) < 3 {
		t.Fatalf("%d of 200 keys placed on b, want 3", len(want))
	}
	tc.kill("b")
	for _, key := range slices.Sorted(maps.Keys(want)) {
		var r *probe.RegisterReply
		testwait.For(t, defaultTestTimeout, key+" to answer from a survivor", func() bool {
			c, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			var err error
			r, err = reg(tc.silo("c"), key).Get(c, &probe.RegisterOp{})
			return err == nil
		})
		if r.Silo == "b" || r.Value != want[key] {
			t.Fatalf("%s after b was killed: %d on %s, want %d on a survivor", key, r.Value, r.Silo, want[key])
		}
		if got, err := reg(tc.silo("a"), key).Set(ctx, &probe.RegisterOp{Value: r.Value + 1}); err != nil || got.Value != r.Value+1 {
			t.Fatalf("writing %s after the move: %v, %v", key, got, err)
		}
	}
}
