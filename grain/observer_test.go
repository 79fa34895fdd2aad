package grain_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// subRef is an observer reference for the manager's tests.
type subRef struct{ id grain.ID }

func (r subRef) ID() grain.ID { return r.id }

func ref(key string) subRef { return subRef{grain.NewID("t.Observer", "client/"+key)} }

func keys(refs []subRef) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.id.Key
	}
	return out
}

func sameKeys(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != "client/"+want[i] {
			return false
		}
	}
	return true
}

// TestObserverManagerExpiry: subscriptions last their expiry past the
// last renewal, in subscription order.
func TestObserverManagerExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	m := grain.NewObserverManager[subRef](time.Minute, func() time.Time { return now })
	m.Subscribe(ref("a"))
	now = now.Add(30 * time.Second)
	m.Subscribe(ref("b"))
	m.Subscribe(ref("a")) // renewed, keeps its place
	if got := keys(m.Subscribers()); !sameKeys(got, "a", "b") {
		t.Fatalf("subscribers %v, want a, b", got)
	}
	now = now.Add(45 * time.Second) // a renewed 45 s ago, b subscribed 45 s ago
	if m.Len() != 2 {
		t.Fatalf("%d subscribers before expiry, want 2", m.Len())
	}
	now = now.Add(16 * time.Second)
	if got := keys(m.Subscribers()); len(got) != 0 {
		t.Fatalf("subscribers %v after expiry, want none", got)
	}
	m.Subscribe(ref("c"))
	m.Unsubscribe(ref("c").ID())
	m.Unsubscribe(ref("never").ID())
	if m.Len() != 0 {
		t.Fatalf("%d subscribers after unsubscribing, want 0", m.Len())
	}
}

// TestObserverManagerNotify: Notify calls every live subscriber in order,
// drops those that are gone (NotFound), keeps those that failed
// otherwise (Unavailable included: a client between gateways), and
// returns the first error other than those two.
func TestObserverManagerNotify(t *testing.T) {
	m := grain.NewObserverManager[subRef](time.Hour, nil)
	for _, k := range []string{"ok", "gone", "down", "bad", "worse"} {
		m.Subscribe(ref(k))
	}
	bad := status.Error(codes.Internal, "bad")
	errs := map[string]error{
		"client/gone":  status.Error(codes.NotFound, "gone"),
		"client/down":  status.Error(codes.Unavailable, "down"),
		"client/bad":   bad,
		"client/worse": errors.New("worse"),
	}
	var called []string
	err := m.Notify(context.Background(), func(_ context.Context, r subRef) error {
		called = append(called, r.id.Key)
		return errs[r.id.Key]
	})
	if err != bad {
		t.Fatalf("Notify returned %v, want the first other error %v", err, bad)
	}
	if !sameKeys(called, "ok", "gone", "down", "bad", "worse") {
		t.Fatalf("called %v", called)
	}
	if got := keys(m.Subscribers()); !sameKeys(got, "ok", "down", "bad", "worse") {
		t.Fatalf("kept %v, want ok, down, bad, worse", got)
	}
}
