package membership

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/jonboulle/clockwork"
)

// splitNet partitions members on loopback: each address is on a side,
// and nothing crosses between sides. Sends across are dropped, as a
// network would, and dials across fail.
type splitNet struct {
	mu   sync.Mutex
	side map[string]int // gossip address → side; 0 for none yet
}

func (n *splitNet) split(sides ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.side = map[string]int{}
	for i, addrs := range sides {
		for _, a := range addrs {
			n.side[a] = i + 1
		}
	}
}

func (n *splitNet) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.side = nil
}

func (n *splitNet) cut(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.side[from] != n.side[to]
}

// splitTransport is a member's net transport on a splitNet.
type splitTransport struct {
	*memberlist.NetTransport
	net  *splitNet
	self string
}

var errCut = errors.New("test network: partitioned")

func (s *splitTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if s.net.cut(s.self, addr) {
		return time.Now(), nil
	}
	return s.NetTransport.WriteTo(b, addr)
}

func (s *splitTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if s.net.cut(s.self, a.Addr) {
		return time.Now(), nil
	}
	return s.NetTransport.WriteToAddress(b, a)
}

func (s *splitTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if s.net.cut(s.self, addr) {
		return nil, errCut
	}
	return s.NetTransport.DialTimeout(addr, timeout)
}

func (s *splitTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if s.net.cut(s.self, a.Addr) {
		return nil, errCut
	}
	return s.NetTransport.DialAddressTimeout(a, timeout)
}

// splitConfig is localConfig on n, with syncs every 300 ms, so a member
// declared dead is gossiped to for 2 s (10 probe intervals) only, and
// reconnecting on clock.
func splitConfig(t *testing.T, n *splitNet, clock clockwork.Clock) func(string, ...string) Config {
	return func(name string, seeds ...string) Config {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{"127.0.0.1"},
			Logger:    log.New(io.Discard, "", 0),
		})
		if err != nil {
			t.Fatal(err)
		}
		cfg := localConfig(name, seeds...)
		cfg.Transport = &splitTransport{NetTransport: nt, net: n, self: net.JoinHostPort("127.0.0.1", strconv.Itoa(nt.GetAutoBindPort()))}
		cfg.PushPullInterval = 300 * time.Millisecond
		cfg.Clock = clock
		return cfg
	}
}

// TestHealedPartitionMerges: silo2 is cut off from silo0 and silo1 until
// each side has declared the other failed and gossiping to the dead has
// stopped. After the heal, memberlist alone does not bring the sides
// together (the control: the reconnect clock stands still), and one
// ReconnectInterval on that clock does.
func TestHealedPartitionMerges(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	n := &splitNet{}
	ms, recs := startCluster(t, 3, splitConfig(t, n, clock))
	addr := func(i int) string { return ms[i].Local().GossipAddr }
	id := func(i int) string { return ms[i].Local().ID }
	n.split([]string{addr(0), addr(1)}, []string{addr(2)})
	recs[0].waitKind(t, EventFailed, id(2))
	recs[1].waitKind(t, EventFailed, id(2))
	recs[2].waitAll(t, EventFailed, id(0), id(1))
	// Hold the partition past the 2 s of gossip to the dead, which
	// memberlist times on the real clock: the fault's length, not a wait
	// for an event.
	time.Sleep(3 * time.Second)
	n.heal()
	// Gossip runs every 50 ms and syncs every 300 ms: a second without
	// news shows that only reconnecting can merge the sides.
	select {
	case e := <-recs[0].c:
		t.Fatalf("before any reconnect, silo0 saw %v after the heal: the test does not need reconnecting", e)
	case e := <-recs[2].c:
		t.Fatalf("before any reconnect, silo2 saw %v after the heal: the test does not need reconnecting", e)
	case <-time.After(time.Second):
	}
	clock.Advance(localConfig("x").ReconnectInterval)
	recs[0].waitKind(t, EventJoined, id(2))
	recs[1].waitKind(t, EventJoined, id(2))
	recs[2].waitAll(t, EventJoined, id(0), id(1))
}

// waitAll waits for an event of kind about each of ids, in any order.
func (r *recorder) waitAll(t testing.TB, kind EventKind, ids ...string) {
	t.Helper()
	seen := map[string]bool{}
	for len(seen) < len(ids) {
		e := r.waitFor(t, fmt.Sprintf("%v of %v", kind, ids), func(e Event) bool {
			return e.Kind == kind && slices.Contains(ids, e.Member.ID)
		}, nil)
		seen[e.Member.ID] = true
	}
}

func TestReconnectorSchedule(t *testing.T) {
	t.Parallel()
	const every = time.Second
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	var r reconnector
	r.failed("m", "10.0.0.1:7946", t0, every)
	r.failed("x", "", t0, every) // no address: nothing to try
	expect := func(now time.Duration, want ...string) {
		t.Helper()
		got := r.due(at(now), time.Minute)
		if len(got) != len(want) {
			t.Fatalf("at %v: due %v, want %v", now, got, want)
		}
		for _, id := range want {
			if _, ok := got[id]; !ok {
				t.Fatalf("at %v: due %v, want %v", now, got, want)
			}
		}
	}
	expect(0)
	gen := r.due(at(every), time.Minute)["m"].gen
	expect(every) // in flight
	// Failures double the wait, up to the cap.
	waits := []time.Duration{2 * every, 4 * every, 4 * every}
	now := every
	for _, w := range waits {
		r.attempted("m", gen, false, at(now), 4*every)
		expect(now + w - time.Millisecond)
		now += w
		expect(now, "m")
	}
	// A success ends the attempts.
	r.attempted("m", gen, true, at(now), 4*every)
	expect(10 * every)

	// A member that fails again while a join is in flight: no second
	// join meanwhile, and the first one's success does not count.
	r.failed("m", "10.0.0.1:7946", at(20*every), every)
	first := r.due(at(21*every), time.Minute)["m"]
	r.failed("m", "10.0.0.1:7946", at(21*every), every)
	expect(23 * every) // the first join is still in flight
	r.attempted("m", first.gen, true, at(23*every), 4*every)
	expect(23*every, "m")
	r.forget("m")

	// Past the timeout, a member is dropped.
	r.failed("old", "10.0.0.2:7946", t0, every)
	if got := r.due(at(2*time.Minute), time.Minute); len(got) != 0 {
		t.Fatalf("due past the timeout: %v", got)
	}
	if len(r.members) != 0 || len(r.order) != 0 {
		t.Fatalf("left after the timeout: %v %v", r.members, r.order)
	}

	// Seen alive: forgotten.
	r.failed("back", "10.0.0.3:7946", t0, every)
	r.forget("back")
	expect(every)

	// At most maxReconnectsInFlight joins at once, and maxReconnecting
	// members, the oldest dropped first.
	for i := range maxReconnecting + 10 {
		r.failed("n"+strconv.Itoa(i), "10.0.1."+strconv.Itoa(i%250)+":7946", t0, every)
	}
	if len(r.members) != maxReconnecting || r.order[0] != "n10" {
		t.Fatalf("%d members, oldest %s; want %d, n10", len(r.members), r.order[0], maxReconnecting)
	}
	if got := r.due(at(every), time.Minute); len(got) != maxReconnectsInFlight {
		t.Fatalf("%d joins at once, want %d", len(got), maxReconnectsInFlight)
	}
	if got := r.due(at(every), time.Minute); len(got) != 0 {
		t.Fatalf("more joins while %d are in flight: %v", maxReconnectsInFlight, got)
	}
}
