package membership

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/testwait"
)

// hubCluster starts n members of one cluster on h and waits until each
// has seen the others join.
func hubCluster(t *testing.T, h *Hub, n int) ([]*HubMember, []*recorder) {
	t.Helper()
	ms := make([]*HubMember, n)
	recs := make([]*recorder, n)
	for i := range n {
		recs[i] = newRecorder(fmt.Sprintf("h%d", i))
		cfg := Config{ClusterID: "test", Name: fmt.Sprintf("h%d", i), GRPCAddr: fmt.Sprintf("10.0.0.%d:1", i), Types: []string{"Counter"}}
		ms[i] = h.Member(cfg, recs[i].on)
		t.Cleanup(func() { _ = ms[i].Close() })
		if err := ms[i].Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for i, rec := range recs {
		var others []string
		for j, m := range ms {
			if j != i {
				others = append(others, m.Local().ID)
			}
		}
		rec.waitJoined(t, others...)
	}
	return ms, recs
}

func TestHubJoinUpdateLeave(t *testing.T) {
	t.Parallel()
	h := NewHub()
	ms, recs := hubCluster(t, h, 3)
	want := ids(ms[0].Members())
	if len(want) != 3 || !slices.IsSorted(want) {
		t.Fatalf("Members() = %v", want)
	}
	for _, m := range ms[1:] {
		if got := ids(m.Members()); !slices.Equal(got, want) {
			t.Fatalf("%s sees %v, want %v", m.Local().ID, got, want)
		}
	}
	if err := ms[0].Update(func(m *Member) { m.Status, m.Activations = StatusActive, 12 }); err != nil {
		t.Fatal(err)
	}
	id0 := ms[0].Local().ID
	for _, rec := range recs[1:] {
		if e := rec.waitKind(t, EventUpdated, id0); e.Member.Status != StatusActive || e.Member.Activations != 12 {
			t.Errorf("%s: %+v", rec.name, e.Member)
		}
	}
	if err := ms[0].Update(func(m *Member) { m.Name = "x" }); !errors.Is(err, ErrImmutable) {
		t.Errorf("Update(Name) = %v", err)
	}
	if err := ms[0].Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs[1:] {
		if e := rec.waitKind(t, EventLeft, id0); e.Member.Status != StatusDead {
			t.Errorf("left status %v", e.Member.Status)
		}
	}
	id1 := ms[1].Local().ID
	if err := ms[1].Close(); err != nil {
		t.Fatal(err)
	}
	recs[2].waitKind(t, EventFailed, id1)
	if got := ids(ms[2].Members()); !slices.Equal(got, []string{ms[2].Local().ID}) {
		t.Errorf("survivor sees %v", got)
	}
	for _, rec := range recs {
		rec.none(t)
	}
	if err := ms[0].Update(func(*Member) {}); !errors.Is(err, ErrClosed) {
		t.Errorf("Update after Leave = %v", err)
	}
	if err := ms[0].Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Leave = %v", err)
	}
}

func TestHubKill(t *testing.T) {
	t.Parallel()
	h := NewHub()
	ms, recs := hubCluster(t, h, 3)
	victim := ms[1].Local().ID
	h.Kill(victim)
	// Queued before Kill returned: the events are on their way.
	recs[0].waitKind(t, EventFailed, victim)
	recs[2].waitKind(t, EventFailed, victim)
	if err := ms[1].Update(func(m *Member) { m.Queued = 1 }); !errors.Is(err, ErrClosed) {
		t.Errorf("killed member's Update = %v", err)
	}
	if err := ms[0].Update(func(m *Member) { m.Queued = 1 }); err != nil {
		t.Fatal(err)
	}
	recs[2].waitKind(t, EventUpdated, ms[0].Local().ID)
	recs[1].none(t) // the dead hear nothing
	h.Kill(victim)  // twice: ignored
	h.Kill("nobody")
}

func TestHubPartitionHeal(t *testing.T) {
	t.Parallel()
	h := NewHub()
	ms, recs := hubCluster(t, h, 4)
	a := []string{ms[0].Local().ID, ms[1].Local().ID}
	b := []string{ms[2].Local().ID, ms[3].Local().ID}
	h.Partition(a, b)
	for i, rec := range recs {
		other := b
		if i >= 2 {
			other = a
		}
		for _, id := range other {
			rec.waitKind(t, EventFailed, id)
		}
	}
	if got := ids(ms[0].Members()); !slices.Equal(got, a) {
		t.Errorf("side a sees %v", got)
	}
	// An update stays on its side.
	if err := ms[0].Update(func(m *Member) { m.Status = StatusActive }); err != nil {
		t.Fatal(err)
	}
	recs[1].waitKind(t, EventUpdated, ms[0].Local().ID)
	// Side b must not hear it: an update made on side b afterwards is the
	// next event each member of side b sees.
	for _, i := range []int{2, 3} {
		if err := ms[5-i].Update(func(m *Member) { m.Queued = 1 }); err != nil {
			t.Fatal(err)
		}
		recs[i].next(t, EventUpdated, ms[5-i].Local().ID)
	}

	h.Heal()
	for i, rec := range recs {
		other := b
		if i >= 2 {
			other = a
		}
		got := rec.waitJoined(t, other...)
		if i >= 2 && got[ms[0].Local().ID].Status != StatusActive {
			t.Errorf("healed view of %s is stale: %+v", ms[0].Local().ID, got[ms[0].Local().ID])
		}
	}
	for _, m := range ms {
		if n := len(m.Members()); n != 4 {
			t.Errorf("%s sees %d members after heal", m.Local().ID, n)
		}
	}
}

func TestHubPartitionBeforeStart(t *testing.T) {
	t.Parallel()
	h := NewHub()
	ra, rb := newRecorder("a"), newRecorder("b")
	a := h.Member(Config{ClusterID: "c", Name: "a"}, ra.on)
	b := h.Member(Config{ClusterID: "c", Name: "b"}, rb.on)
	defer a.Close()
	defer b.Close()
	h.Partition([]string{a.Local().ID}, []string{b.Local().ID})
	for _, m := range []*HubMember{a, b} {
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.Members()) != 1 || len(b.Members()) != 1 {
		t.Fatal("members cut off before start see each other")
	}
	h.Heal()
	ra.waitKind(t, EventJoined, b.Local().ID)
	rb.waitKind(t, EventJoined, a.Local().ID)
}

func TestHubHoldRelease(t *testing.T) {
	t.Parallel()
	h := NewHub()
	ms, recs := hubCluster(t, h, 2)
	h.Hold(ms[1].Local().ID)
	for i := range 5 {
		if err := ms[0].Update(func(m *Member) { m.Activations = uint64(i + 1) }); err != nil {
			t.Fatal(err)
		}
	}
	recs[1].none(t)
	h.Release(ms[1].Local().ID)
	for i := range 5 {
		e := recs[1].waitKind(t, EventUpdated, ms[0].Local().ID)
		if e.Member.Activations != uint64(i+1) {
			t.Fatalf("update %d delivered as %d: out of order", i+1, e.Member.Activations)
		}
	}
}

func TestHubClustersAreApart(t *testing.T) {
	t.Parallel()
	h := NewHub()
	ra, rb := newRecorder("a"), newRecorder("b")
	a := h.Member(Config{ClusterID: "one", Name: "a"}, ra.on)
	b := h.Member(Config{ClusterID: "two", Name: "b"}, rb.on)
	defer a.Close()
	defer b.Close()
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(a.Members()) != 1 || len(b.Members()) != 1 {
		t.Fatal("members of different clusters see each other")
	}
	ra.none(t)
	rb.none(t)
}

func TestHubStartChecks(t *testing.T) {
	t.Parallel()
	h := NewHub()
	noName := h.Member(Config{ClusterID: "c"}, nil)
	var ce *ConfigError
	if err := noName.Start(context.Background()); !errors.As(err, &ce) || ce.Field != "Name" {
		t.Errorf("Start without Name = %v", err)
	}
	cfg := Config{ClusterID: "c", Name: "big"}
	for i := range 50 {
		cfg.Types = append(cfg.Types, fmt.Sprintf("Some.Long.Namespace.Grain%02d", i))
	}
	big := h.Member(cfg, nil)
	if err := big.Start(context.Background()); !errors.Is(err, ErrMetaTooLarge) {
		t.Errorf("Start too large = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	late := h.Member(Config{ClusterID: "c", Name: "late"}, nil)
	if err := late.Start(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a canceled context = %v", err)
	}
	ok := h.Member(Config{ClusterID: "c", Name: "ok"}, nil)
	if err := ok.Update(func(*Member) {}); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Update before Start = %v", err)
	}
	if err := ok.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ok.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start = %v", err)
	}
	for _, m := range []*HubMember{noName, big, late, ok, ok} {
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHubServiceFromOnEvent checks that onEvent may call the Service's
// other methods (not Leave or Close) without deadlock.
func TestHubServiceFromOnEvent(t *testing.T) {
	t.Parallel()
	h := NewHub()
	seen := make(chan int, 4)
	var b *HubMember
	b = h.Member(Config{ClusterID: "c", Name: "b"}, func(e Event) {
		seen <- len(b.Members())
		_ = b.Update(func(m *Member) { m.Queued++ })
	})
	a := h.Member(Config{ClusterID: "c", Name: "a"}, nil)
	defer a.Close()
	defer b.Close()
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testwait.Recv(t, seen, defaultTestTimeout, "b's first event")
}

// Service values: both implementations satisfy it.
var _ = []Service{(*Memberlist)(nil), (*HubMember)(nil)}

func ExampleHub() {
	ctx := context.Background()
	hub := NewHub()
	events := make(chan Event, 8)
	a := hub.Member(Config{ClusterID: "demo", Name: "a", GRPCAddr: "10.0.0.1:11111"}, func(e Event) { events <- e })
	b := hub.Member(Config{ClusterID: "demo", Name: "b", GRPCAddr: "10.0.0.2:11111", Types: []string{"Counter"}}, nil)
	defer a.Close()
	defer b.Close()
	_ = a.Start(ctx)
	_ = b.Start(ctx)
	e := <-events
	fmt.Println(e.Kind, e.Member.Name, e.Member.Hosts("Counter"))

	hub.Kill(b.Local().ID)
	e = <-events
	fmt.Println(e.Kind, e.Member.Name, e.Member.Status)
	// Output:
	// joined b true
	// failed b dead
}

func ExampleNew() {
	cfg := DefaultLANConfig()
	cfg.ClusterID = "granary-prod"
	cfg.Name = "silo-a"
	cfg.GRPCAddr = "10.0.0.1:11111"
	cfg.Types = []string{"Counter", "ChatRoom"}
	cfg.SeedDNS = "granary-silos.default.svc.cluster.local" // a headless service
	m, err := New(cfg, func(e Event) { fmt.Println(e) })
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	_ = m.Update(func(me *Member) { me.Status = StatusActive })
	// ... serve ...
	_ = m.Leave(ctx)
}
