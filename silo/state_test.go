package silo

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/storage"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

func memoryStore(m *storage.Memory) func(*Config) {
	return func(c *Config) { c.Storage = map[string]storage.Provider{grain.DefaultStorage: m} }
}

// deactivate deactivates Register key's activation on s, a silo alone,
// and waits until it is gone.
func deactivate(t *testing.T, s *Silo, key string) {
	t.Helper()
	ctx := testCtx(t)
	id := grain.NewID(probe.RegisterGrainType, key)
	if ok, err := s.Deactivate(ctx, id); err != nil || !ok {
		t.Fatalf("Deactivate(%v) on %s = %v, %v: want it active there", id, s.cfg.Name, ok, err)
	}
	testwait.For(t, defaultTestTimeout, key+" to deactivate", func() bool {
		_, found, err := s.Lookup(ctx, id)
		return err == nil && !found
	})
}

func TestStateReadBeforeActivateAndAfterDeactivation(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	m := storage.NewMemory(0)
	s := newStateSilo(t, w, memoryStore(m))
	ctx := testCtx(t)
	r, err := reg(s, "a").Get(ctx, &probe.RegisterOp{})
	if err != nil || r.Value != 0 || r.Etag != "" {
		t.Fatalf("first Get = %v, %v; want 0 with no ETag", r, err)
	}
	set, err := reg(s, "a").Set(ctx, &probe.RegisterOp{Value: 7})
	if err != nil || set.Value != 7 || set.Etag == "" {
		t.Fatalf("Set = %v, %v", set, err)
	}
	deactivate(t, s, "a")
	r, err = reg(s, "a").Get(ctx, &probe.RegisterOp{})
	if err != nil || r.Value != 7 || r.Etag != set.Etag || r.Activation == set.Activation {
		t.Fatalf("Get after deactivation = %v, %v; want 7 at %q from a new activation", r, err, set.Etag)
	}
	if n := w.activationsOf("a"); n != 2 {
		t.Fatalf("%d activations, want 2", n)
	}
}

func TestStateSurvivesRestartEmbedded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := newRegisterWorld()
	withDir := func(c *Config) { c.DataDir = dir }
	s, err := startStateSilo(t, w, withDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	for i := range 3 {
		if _, err := reg(s, "k").Set(ctx, &probe.RegisterOp{Value: int64(10 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reg(s, "other").Set(ctx, &probe.RegisterOp{Value: 99}); err != nil {
		t.Fatal(err)
	}
	stopSilo(t, s)

	// Another silo over the same directory reads what the first stored.
	s2 := newStateSilo(t, w, withDir)
	for key, want := range map[string]int64{"k": 12, "other": 99, "never": 0} {
		r, err := reg(s2, key).Get(ctx, &probe.RegisterOp{})
		if err != nil || r.Value != want {
			t.Fatalf("after restart %s = %v, %v; want %d", key, r, err, want)
		}
	}
	if _, err := filepath.Glob(filepath.Join(dir, local.EmbeddedStoreFile)); err != nil {
		t.Fatal(err)
	}
}

func TestStateEmbeddedFileLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := newRegisterWorld()
	newStateSilo(t, w, func(c *Config) { c.DataDir = dir })
	_, err := startStateSilo(t, w, func(c *Config) { c.DataDir = dir; c.Name = "second" })
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "DataDir" || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second silo on one DataDir: %v, want a DataDir config error naming the file", err)
	}
}

func TestStateMissingProvider(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	_, err := startStateSilo(t, w, nil)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "Storage" || !strings.Contains(err.Error(), `"register"`) {
		t.Fatalf("no provider for a declared state: %v, want a Storage config error naming the state", err)
	}
	other := grain.NewStateSpec[*probe.RegisterState]("extra", "archive")
	_, err = startStateSilo(t, w, memoryStore(storage.NewMemory(0)), grain.WithState(other))
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `"archive"`) {
		t.Fatalf("unknown provider: %v, want an error naming it", err)
	}
	s, _ := New(DefaultConfig())
	dup := grain.WithState(registerState)
	if err := probe.RegisterRegisterGrain(s, func(grain.ID) probe.RegisterGrain { return &registerGrain{} }, grain.WithState(registerState), dup); err == nil {
		t.Fatal("a state declared twice was accepted")
	}
}

// RegisterGrain refuses a kept-alive type with a collection age, from a
// register option or from the silo's per-type configuration, naming both
// settings; keep-alive alone, or with another type's age, is accepted.
func TestRegisterGrainRefusesKeepAliveWithCollectionAge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		types map[string]TypeConfig
		opts  []grain.RegisterOption
		want  string // "" for success
	}{
		{name: "keep-alive alone", opts: []grain.RegisterOption{grain.WithKeepAlive()}},
		{
			name:  "another type's age",
			types: map[string]TypeConfig{"other.Type": {CollectionAge: time.Minute}},
			opts:  []grain.RegisterOption{grain.WithKeepAlive()},
		},
		{
			name: "with WithCollectionAge",
			opts: []grain.RegisterOption{grain.WithCollectionAge(time.Minute), grain.WithKeepAlive()},
			want: "WithKeepAlive (grain option keep_alive) cannot be combined with WithCollectionAge (grain option collection_age)",
		},
		{
			name:  "with Config.Types",
			types: map[string]TypeConfig{probe.RegisterGrainType: {CollectionAge: time.Minute}},
			opts:  []grain.RegisterOption{grain.WithKeepAlive()},
			want:  `WithKeepAlive (grain option keep_alive) cannot be combined with Config.Types["` + probe.RegisterGrainType + `"].CollectionAge`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Types = tt.types
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = probe.RegisterRegisterGrain(s, func(grain.ID) probe.RegisterGrain { return &registerGrain{} }, tt.opts...)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("RegisterGrain: %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("RegisterGrain: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// A method using a state its type did not declare fails with Internal,
// naming the state; the silo goes on.
func TestStateUndeclared(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	s := newStateSilo(t, w, memoryStore(storage.NewMemory(0)), func(o *grain.TypeOptions) { o.States = nil })
	_, err := reg(s, "a").Get(testCtx(t), &probe.RegisterOp{})
	wantCode(t, err, codes.Internal, "undeclared state")
	if !strings.Contains(err.Error(), "WithState") {
		t.Fatalf("error %q does not say how to declare the state", err)
	}
}

// Two activations of one grain (here, a stateless worker's) that read the
// same record write at once: exactly one wins, and the other fails with
// FailedPrecondition, leaving the winner's value stored.
func TestStateConcurrentActivationsOneWins(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	m := storage.NewMemory(0)
	s := newStateSilo(t, w, memoryStore(m), grain.WithStatelessWorker(2))
	hold := make(chan struct{})
	w.mu.Lock()
	w.hold["dup"] = hold
	w.mu.Unlock()
	ctx := testCtx(t)
	f1 := reg(s, "dup").SetAsync(ctx, &probe.RegisterOp{Value: 1})
	f2 := reg(s, "dup").SetAsync(ctx, &probe.RegisterOp{Value: 2})
	for range 2 {
		select {
		case <-w.arrived:
		case <-ctx.Done():
			t.Fatal("the two writes did not both reach their activations")
		}
	}
	if n := w.activationsOf("dup"); n != 2 {
		t.Fatalf("%d activations, want 2", n)
	}
	close(hold)
	r1, err1 := f1.Await(ctx)
	r2, err2 := f2.Await(ctx)
	if (err1 == nil) == (err2 == nil) {
		t.Fatalf("writes: %v, %v; want exactly one to succeed", err1, err2)
	}
	won, lost := r1, err2
	if err1 != nil {
		won, lost = r2, err1
	}
	wantCode(t, lost, codes.FailedPrecondition, "the losing write")
	rec, err := m.ReadState(ctx, grain.NewID(probe.RegisterGrainType, "dup"), "register")
	if err != nil || rec.ETag != won.Etag {
		t.Fatalf("stored record %+v, %v; want the winner's, at %q", rec, err, won.Etag)
	}
	var st probe.RegisterState
	if err := proto.Unmarshal(rec.Data, &st); err != nil || st.Value != won.Value {
		t.Fatalf("stored value %d, want the winner's %d", st.Value, won.Value)
	}
}

// While the store is down, calls that need it fail with Unavailable: the
// activation that cannot read its state, and a write. When it returns,
// they succeed, and nothing acknowledged was lost.
func TestStateStoreDown(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	m := storage.NewMemory(0)
	s := newStateSilo(t, w, memoryStore(m))
	ctx := testCtx(t)
	if _, err := reg(s, "up").Set(ctx, &probe.RegisterOp{Value: 5}); err != nil {
		t.Fatal(err)
	}
	m.SetDown(true)
	_, err := reg(s, "new").Get(ctx, &probe.RegisterOp{})
	wantCode(t, err, codes.Unavailable, "activating while the store is down")
	_, err = reg(s, "up").Set(ctx, &probe.RegisterOp{Value: 6})
	wantCode(t, err, codes.Unavailable, "writing while the store is down")
	m.SetDown(false)
	if r, err := reg(s, "new").Get(ctx, &probe.RegisterOp{}); err != nil || r.Value != 0 {
		t.Fatalf("activating after the store came back: %v, %v", r, err)
	}
	if r, err := reg(s, "up").Get(ctx, &probe.RegisterOp{}); err != nil || r.Value != 5 {
		t.Fatalf("after the store came back: %v, %v; want the acknowledged 5", r, err)
	}
	if r, err := reg(s, "up").Set(ctx, &probe.RegisterOp{Value: 7}); err != nil || r.Value != 7 {
		t.Fatalf("write after the store came back: %v, %v", r, err)
	}
}

func TestStateSizeLimit(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	const limit = 64 << 10
	s := newStateSilo(t, w, memoryStore(storage.NewMemory(limit)))
	ctx := testCtx(t)
	near, err := reg(s, "big").Set(ctx, &probe.RegisterOp{Value: 1, Pad: limit - 64})
	if err != nil {
		t.Fatalf("a state near the limit: %v", err)
	}
	_, err = reg(s, "big").Set(ctx, &probe.RegisterOp{Value: 2, Pad: limit})
	wantCode(t, err, codes.InvalidArgument, "a state over the limit")
	if !strings.Contains(err.Error(), "MaxStateSize") {
		t.Fatalf("error %q does not name the limit", err)
	}
	if r, err := reg(s, "big").Get(ctx, &probe.RegisterOp{}); err != nil || r.Value != 1 || r.Etag != near.Etag {
		t.Fatalf("after the refused write: %v, %v; want the value stored before", r, err)
	}
}

// A silo in a cluster refuses DataDir: an activation may move to any
// silo, so a store of its own would split the grains' state and reminders.
func TestStateDataDirRefusedInCluster(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cc := DefaultClusterConfig()
	cc.Membership.ClusterID = "test"
	cfg.Cluster = &cc
	cfg.DataDir = t.TempDir()
	var ce *ConfigError
	if _, err := New(cfg); !errors.As(err, &ce) || ce.Field != "DataDir" {
		t.Fatalf("a cluster silo with DataDir: %v, want a DataDir config error", err)
	}
}
