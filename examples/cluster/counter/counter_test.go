package counter

import (
	"context"
	"testing"
	"time"

	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/granarytest"
	"go.uber.org/goleak"
)

const defaultTestTimeout = 30 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newCluster starts a cluster of one silo with Counter registered,
// persistent or not, on the cluster's shared memory storage; it stops
// when the test ends.
func newCluster(t *testing.T, persistent bool) *granarytest.Cluster {
	t.Helper()
	return granarytest.New(t, granarytest.Register(func(s *silo.Silo) error { return Register(s, persistent) }))
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
		persistent  bool
		afterMoving int64 // the count after adding 5 on a second silo
	}{
		{"memory", false, 5},
		{"persistent", true, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, tt.persistent)
			first := c.Silo(0)
			add(t, ctx, first, "k", 1)
			r := add(t, ctx, first, "k", 2)
			if r.GetValue() != 3 || r.GetSilo() != first.Member() || r.GetActivation() == 0 {
				t.Errorf("second Add: %v; want 3 from an activation on %s", r, first.Member())
			}
			if other := add(t, ctx, first, "other", 1); other.GetValue() != 1 {
				t.Errorf("another counter: %d; want 1", other.GetValue())
			}
			c.Stop(0)

			second := c.Silo(c.StartSilo())
			if r := add(t, ctx, second, "k", 5); r.GetValue() != tt.afterMoving || r.GetSilo() != second.Member() {
				t.Errorf("Add on the second silo: %v; want %d from %s", r, tt.afterMoving, second.Member())
			}
		})
	}
}
