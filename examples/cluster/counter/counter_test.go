package counter

import (
	"context"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/storage"
	"go.uber.org/goleak"
)

const defaultTestTimeout = 30 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startSilo starts a silo alone named name, with Counter registered and,
// if store is not nil, store as its default provider.
func startSilo(t *testing.T, ctx context.Context, name string, store storage.Provider) *silo.Silo {
	t.Helper()
	cfg := silo.DefaultConfig()
	cfg.Name = name
	if store != nil {
		cfg.Storage = map[string]storage.Provider{grain.DefaultStorage: store}
	}
	s, err := silo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := Register(s, store != nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func add(t *testing.T, ctx context.Context, s *silo.Silo, key string, delta int64) *clusterpb.AddReply {
	t.Helper()
	r, err := clusterpb.NewCounterRef(s, key).Add(ctx, &clusterpb.AddRequest{Delta: delta})
	if err != nil {
		t.Fatalf("Add to %s: %v", key, err)
	}
	return r
}

// TestCounts checks each kind of counter: it counts, says where it ran,
// and the persistent one goes on from its stored count on another silo
// while the one in memory starts again from zero.
func TestCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	tests := []struct {
		name        string
		store       storage.Provider
		afterMoving int64 // the count after adding 5 on a second silo
	}{
		{"memory", nil, 5},
		{"persistent", storage.NewMemory(0), 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := startSilo(t, ctx, "first", tt.store)
			add(t, ctx, first, "k", 1)
			r := add(t, ctx, first, "k", 2)
			if r.GetValue() != 3 || r.GetSilo() != "first" || r.GetActivation() == 0 {
				t.Errorf("second Add: %v; want 3 from an activation on first", r)
			}
			if other := add(t, ctx, first, "other", 1); other.GetValue() != 1 {
				t.Errorf("another counter: %d; want 1", other.GetValue())
			}
			if err := first.Stop(ctx); err != nil {
				t.Fatal(err)
			}

			second := startSilo(t, ctx, "second", tt.store)
			defer func() {
				if err := second.Stop(ctx); err != nil {
					t.Errorf("stopping: %v", err)
				}
			}()
			if r := add(t, ctx, second, "k", 5); r.GetValue() != tt.afterMoving || r.GetSilo() != "second" {
				t.Errorf("Add on the second silo: %v; want %d from second", r, tt.afterMoving)
			}
		})
	}
}
