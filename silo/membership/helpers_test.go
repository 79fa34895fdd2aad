package membership

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/testwait"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// defaultTestTimeout bounds every wait for an event. Failure detection
// with DefaultLocalConfig takes about a second; the rest is slack for
// -race on a loaded machine.
const defaultTestTimeout = 15 * time.Second

// TestMain checks that no goroutine outlives the tests. memberlist's own
// goroutines end shortly after Shutdown (see Close); goleak retries for
// long enough to see them go.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger logs to stderr when MEMBERSHIP_TEST_LOG is set. It is not
// zaptest's logger: memberlist's goroutines may log after a test ends.
func testLogger() *zap.Logger {
	if os.Getenv("MEMBERSHIP_TEST_LOG") == "" {
		return zap.NewNop()
	}
	l, err := zap.NewDevelopment()
	if err != nil {
		panic(err)
	}
	return l
}

// localConfig is DefaultLocalConfig for a member of cluster "test".
func localConfig(name string, seeds ...string) Config {
	cfg := DefaultLocalConfig()
	cfg.ClusterID = "test"
	cfg.Name = name
	cfg.GRPCAddr = "127.0.0.1:9000"
	cfg.Roles = []string{"worker"}
	cfg.Types = []string{"Counter", "Chat"}
	cfg.Seeds = seeds
	cfg.Logger = testLogger()
	return cfg
}

// recorder collects the events of one member on a buffered channel.
type recorder struct {
	name string
	c    chan Event
}

func newRecorder(name string) *recorder { return &recorder{name: name, c: make(chan Event, 1024)} }

// on is the onEvent callback.
func (r *recorder) on(e Event) { r.c <- e }

// waitFor consumes events until one satisfies pred, failing the test if
// none does within defaultTestTimeout. skip, if not nil, is called on the
// events passed over and may fail the test.
func (r *recorder) waitFor(t testing.TB, what string, pred func(Event) bool, skip func(Event)) Event {
	t.Helper()
	return testwait.Until(t, r.c, defaultTestTimeout, r.name+": "+what, func(e Event) bool {
		if pred(e) {
			return true
		}
		if skip != nil {
			skip(e)
		}
		return false
	})
}

// waitKind waits for an event of kind about member id.
func (r *recorder) waitKind(t testing.TB, kind EventKind, id string) Event {
	t.Helper()
	return r.waitFor(t, kind.String()+" "+id, func(e Event) bool {
		return e.Kind == kind && e.Member.ID == id
	}, nil)
}

// waitJoined waits until every id in ids has joined, in any order.
func (r *recorder) waitJoined(t testing.TB, ids ...string) map[string]Member {
	t.Helper()
	got := make(map[string]Member)
	for len(got) < len(ids) {
		e := r.waitFor(t, fmt.Sprintf("join of %v", ids), func(e Event) bool {
			return e.Kind == EventJoined && slices.Contains(ids, e.Member.ID)
		}, nil)
		got[e.Member.ID] = e.Member
	}
	return got
}

// next waits for the next event, which must be kind about id: a barrier,
// since each member's events arrive in order.
func (r *recorder) next(t testing.TB, kind EventKind, id string) Event {
	t.Helper()
	return r.waitFor(t, kind.String()+" "+id, func(e Event) bool { return e.Kind == kind && e.Member.ID == id },
		func(e Event) { t.Fatalf("%s: unexpected event %v before %v %s", r.name, e, kind, id) })
}

// none fails if an event is already queued: for checks after something
// that would have produced one has finished.
func (r *recorder) none(t testing.TB) {
	t.Helper()
	select {
	case e := <-r.c:
		t.Fatalf("%s: unexpected event %v", r.name, e)
	default:
	}
}

// startMember starts a Memberlist for cfg and closes it at cleanup.
func startMember(t testing.TB, cfg Config) (*Memberlist, *recorder) {
	t.Helper()
	rec := newRecorder(cfg.Name)
	m, err := New(cfg, rec.on)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() { _ = m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start(%s): %v", cfg.Name, err)
	}
	return m, rec
}

// startCluster starts n members of cfgFor's configuration, each seeded
// with the first, and waits until each has seen the others join.
func startCluster(t testing.TB, n int, cfgFor func(name string, seeds ...string) Config) ([]*Memberlist, []*recorder) {
	t.Helper()
	ms := make([]*Memberlist, n)
	recs := make([]*recorder, n)
	for i := range n {
		name := "silo" + strconv.Itoa(i)
		var seeds []string
		if i > 0 {
			seeds = []string{ms[0].Local().GossipAddr}
		}
		ms[i], recs[i] = startMember(t, cfgFor(name, seeds...))
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

// ids returns the IDs of ms.
func ids(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// freePort returns a port free for both TCP and UDP on 127.0.0.1 a moment
// ago, for the tests that must know a member's port before it starts.
func freePort(t testing.TB) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// hostPort splits a gossip address and returns its port.
func portOf(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// mustContain fails unless err's text contains every part.
func mustContain(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}
