package silo

import (
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/storage"
	"google.golang.org/grpc/codes"
)

func TestStateStatsCountOperations(t *testing.T) {
	t.Parallel()
	idle, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if st := idle.StateStats(); st.Reads != 0 || st.Providers != nil {
		t.Fatalf("StateStats before Start = %+v, want zero", st)
	}

	w := newRegisterWorld()
	m := storage.NewMemory(0)
	s := newStateSilo(t, w, memoryStore(m))
	ctx := testCtx(t)
	if _, err := reg(s, "a").Get(ctx, &probe.RegisterOp{}); err != nil { // read at activation
		t.Fatal(err)
	}
	set, err := reg(s, "a").Set(ctx, &probe.RegisterOp{Value: 1}) // write
	if err != nil {
		t.Fatal(err)
	}
	// Another writer moves the ETag: the grain's next write conflicts.
	if _, err := m.WriteState(ctx, grain.NewID(probe.RegisterGrainType, "a"), "register", nil, set.Etag); err != nil {
		t.Fatal(err)
	}
	_, err = reg(s, "a").Set(ctx, &probe.RegisterOp{Value: 2})
	wantCode(t, err, codes.FailedPrecondition, "a write with a stale ETag")
	m.SetDown(true)
	_, err = reg(s, "b").Get(ctx, &probe.RegisterOp{}) // a failed read at activation
	wantCode(t, err, codes.Unavailable, "activating while the store is down")
	m.SetDown(false)

	want := StateOps{Reads: 2, Writes: 2, ReadFailures: 1, WriteFailures: 1, Conflicts: 1}
	st := s.StateStats()
	if st.StateOps != want {
		t.Errorf("totals = %+v, want %+v", st.StateOps, want)
	}
	if len(st.Providers) != 1 || st.Providers[0] != (ProviderStateOps{Provider: grain.DefaultStorage, StateOps: want}) {
		t.Errorf("providers = %+v, want only %q with the totals", st.Providers, grain.DefaultStorage)
	}
	if st.Failures() != 2 {
		t.Errorf("Failures() = %d, want 2", st.Failures())
	}
}

// The reminder table is found on the provider itself, not on the counter
// in front of it.
func TestStateStatsKeepReminderTable(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	m := storage.NewMemory(0)
	s := newStateSilo(t, w, func(c *Config) {
		memoryStore(m)(c)
		c.Reminders = &RemindersConfig{}
	})
	if s.rt.ReminderTable != storage.ReminderTable(m) {
		t.Fatalf("reminder table = %T, want the memory store", s.rt.ReminderTable)
	}
	if _, ok := s.rt.Providers[grain.DefaultStorage].(*local.CountingProvider); !ok {
		t.Fatalf("provider = %T, want a local.CountingProvider", s.rt.Providers[grain.DefaultStorage])
	}
}
