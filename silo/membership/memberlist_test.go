package membership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/security"
	"github.com/hashicorp/memberlist"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestJoinThroughSeeds(t *testing.T) {
	t.Parallel()
	ms, _ := startCluster(t, 3, localConfig)
	want := []string{ms[0].Local().ID, ms[1].Local().ID, ms[2].Local().ID}
	slices.Sort(want)
	for _, m := range ms {
		members := m.Members()
		if got := ids(members); !slices.Equal(got, want) {
			t.Fatalf("%s sees %v, want %v", m.Local().ID, got, want)
		}
		for _, o := range members {
			if o.Name == "" || !strings.HasPrefix(o.ID, o.Name+"-") || o.GRPCAddr != "127.0.0.1:9000" ||
				!o.HasRole("worker") || !o.Hosts("Counter") || !o.Hosts("Chat") ||
				o.Status != StatusJoining || !strings.HasPrefix(o.GossipAddr, "127.0.0.1:") {
				t.Errorf("%s sees badly decoded %+v", m.Local().ID, o)
			}
		}
	}
	if a, b := ms[0].Local().ID, ms[1].Local().ID; a == b {
		t.Fatalf("two members share ID %s", a)
	}
}

func TestUpdatePropagates(t *testing.T) {
	t.Parallel()
	ms, recs := startCluster(t, 3, localConfig)
	err := ms[0].Update(func(m *Member) {
		m.Status = StatusActive
		m.Activations, m.Queued = 7, 3
		m.Types = append(m.Types, "Room")
	})
	if err != nil {
		t.Fatal(err)
	}
	id := ms[0].Local().ID
	for _, rec := range recs[1:] {
		e := rec.waitKind(t, EventUpdated, id)
		if e.Member.Status != StatusActive || e.Member.Activations != 7 || e.Member.Queued != 3 || !e.Member.Hosts("Room") {
			t.Errorf("%s got %+v", rec.name, e.Member)
		}
	}
	if l := ms[0].Local(); l.Status != StatusActive || l.Activations != 7 {
		t.Errorf("Local() = %+v", l)
	}
	for _, m := range ms[1:] {
		i := slices.IndexFunc(m.Members(), func(o Member) bool { return o.ID == id })
		if i < 0 || m.Members()[i].Status != StatusActive {
			t.Errorf("%s: Members() misses the update", m.Local().ID)
		}
	}
}

func TestUpdateRules(t *testing.T) {
	t.Parallel()
	m, err := New(localConfig("solo"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Update(func(*Member) {}); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("Update before Start = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v", err)
	}
	before := m.Local()
	for name, fn := range map[string]func(*Member){
		"ID":         func(x *Member) { x.ID = "other" },
		"Name":       func(x *Member) { x.Name = "other" },
		"GossipAddr": func(x *Member) { x.GossipAddr = "1.2.3.4:5" },
		"GRPCAddr":   func(x *Member) { x.GRPCAddr = "1.2.3.4:5" },
		"dead":       func(x *Member) { x.Status = StatusDead },
	} {
		if err := m.Update(fn); !errors.Is(err, ErrImmutable) {
			t.Errorf("%s: Update = %v, want ErrImmutable", name, err)
		}
	}
	big := func(x *Member) {
		for i := range 60 {
			x.Types = append(x.Types, fmt.Sprintf("VeryLongGrainTypeName%03d", i))
		}
	}
	if err := m.Update(big); !errors.Is(err, ErrMetaTooLarge) {
		t.Errorf("Update too large = %v", err)
	}
	if after := m.Local(); !slices.Equal(after.Types, before.Types) || after.Status != before.Status {
		t.Errorf("a failed Update changed Local: %+v", after)
	}
	// Alone, Update does not wait for a broadcast.
	if err := m.Update(func(x *Member) { x.Status = StatusShuttingDown }); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Update(func(*Member) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Update after Close = %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := m.Leave(ctx); err != nil {
		t.Fatalf("Leave after Close = %v", err)
	}
	if err := m.Start(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
}

func TestMetaTooLarge(t *testing.T) {
	t.Parallel()
	cfg := localConfig("big")
	for i := range 40 {
		cfg.Types = append(cfg.Types, fmt.Sprintf("Granary.Samples.Grains.Type%02d", i))
	}
	m, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(context.Background())
	if !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("Start = %v, want ErrMetaTooLarge", err)
	}
	mustContain(t, err, "42 grain types", "roles", "512")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestLeaveIsNotFailure(t *testing.T) {
	t.Parallel()
	ms, recs := startCluster(t, 3, localConfig)
	id := ms[0].Local().ID
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := ms[0].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs[1:] {
		e := rec.waitFor(t, "left "+id, func(e Event) bool {
			return e.Kind == EventLeft && e.Member.ID == id
		}, func(e Event) {
			if e.Member.ID == id && e.Kind == EventFailed {
				t.Errorf("%s: graceful leave seen as failure", rec.name)
			}
		})
		if e.Member.Status != StatusDead {
			t.Errorf("left member's status = %v, want dead", e.Member.Status)
		}
	}
	for _, m := range ms[1:] {
		if slices.Contains(ids(m.Members()), id) {
			t.Errorf("%s still lists %s", m.Local().ID, id)
		}
	}
}

func TestCloseIsFailure(t *testing.T) {
	t.Parallel()
	ms, recs := startCluster(t, 3, localConfig)
	id := ms[2].Local().ID
	start := time.Now()
	if err := ms[2].Close(); err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs[:2] {
		e := rec.waitFor(t, "failure of "+id, func(e Event) bool {
			return e.Kind == EventFailed && e.Member.ID == id
		}, func(e Event) {
			if e.Member.ID == id && e.Kind == EventLeft {
				t.Errorf("%s: Close seen as a leave", rec.name)
			}
		})
		if e.Member.Status != StatusDead {
			t.Errorf("failed member's status = %v", e.Member.Status)
		}
	}
	// DefaultLocalConfig detects in about a second; the cluster's budget
	// to re-place grains is 5 s.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("failure detected after %v, want under 5s", d)
	}
}

// refusedStart starts a member of cfg, whose seeds refuse it, on a fake
// clock under a Start context of joinFor on that clock, and returns
// Start's error once its first join attempt failed and joinFor passed.
func refusedStart(t *testing.T, cfg Config, joinFor time.Duration) error {
	t.Helper()
	clock := clockwork.NewFakeClock()
	cfg.Clock = clock
	x, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	ctx, cancel := clockwork.WithTimeout(context.Background(), clock, joinFor)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- x.Start(ctx) }()
	// The context's timer and the pause after the first attempt.
	if err := clock.BlockUntilContext(testwait.Context(t, defaultTestTimeout), 2); err != nil {
		t.Fatalf("%s: Start did not pause after a join attempt: %v", cfg.Name, err)
	}
	clock.Advance(joinFor)
	return testwait.Recv(t, errc, defaultTestTimeout, cfg.Name+"'s Start to give up")
}

func TestOtherClusterCannotJoin(t *testing.T) {
	t.Parallel()
	aCfg := localConfig("a")
	aCfg.Rejections = security.NewRejections(nil)
	a, recA := startMember(t, aCfg)
	cfg := localConfig("intruder", a.Local().GossipAddr)
	cfg.ClusterID = "other"
	if err := refusedStart(t, cfg, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start in another cluster = %v, want a join timeout", err)
	}
	if got := ids(a.Members()); len(got) != 1 {
		t.Fatalf("a sees %v", got)
	}
	testwait.For(t, defaultTestTimeout, "a to count the gossip of another cluster", func() bool {
		return aCfg.Rejections.Count(security.ListenerGossip, security.ReasonGossipCluster) > 0
	})
	recA.none(t)
}

func TestSecretKey(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef")
	seedCore, seedLogs := observer.New(zap.WarnLevel)
	seedRej := security.NewRejections(zap.New(seedCore))
	keyed := func(name string, seeds ...string) Config {
		cfg := localConfig(name, seeds...)
		cfg.SecretKey = key
		if len(seeds) == 0 {
			cfg.Rejections = seedRej
		}
		return cfg
	}
	ms, recs := startCluster(t, 2, keyed)
	for name, k := range map[string][]byte{"wrong key": []byte("fedcba9876543210"), "no key": nil} {
		cfg := keyed("stranger", ms[0].Local().GossipAddr)
		cfg.SecretKey = k
		core, logs := observer.New(zap.WarnLevel)
		cfg.Rejections = security.NewRejections(zap.New(core))
		if err := refusedStart(t, cfg, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: Start = %v, want a join timeout", name, err)
		}
		if name == "wrong key" {
			// Both sides say why: the seed cannot decrypt the stranger,
			// and the stranger cannot decrypt the seed's answer.
			if cfg.Rejections.Count(security.ListenerGossip, security.ReasonGossipDecrypt) == 0 || logs.Len() == 0 {
				t.Errorf("the silo with the wrong key logged nothing: %v", logs.All())
			}
		}
	}
	testwait.For(t, defaultTestTimeout, "the seed to warn of gossip it cannot decrypt", func() bool {
		return seedRej.Count(security.ListenerGossip, security.ReasonGossipDecrypt) > 0 &&
			seedLogs.FilterField(zap.String("reason", security.ReasonGossipDecrypt)).Len() > 0
	})
	for i, m := range ms {
		if n := len(m.Members()); n != 2 {
			t.Errorf("%s sees %d members", m.Local().ID, n)
		}
		recs[i].none(t)
	}
}

func TestCloseAbortsStart(t *testing.T) {
	// A seed nobody listens on: Start retries until Close.
	cfg := localConfig("lonely")
	cfg.SeedDNS, cfg.SeedPort = "nobody.granary.test", freePort(t)
	resolving := make(chan struct{}, 1)
	cfg.LookupHost = func(context.Context, string) ([]string, error) {
		select {
		case resolving <- struct{}{}:
		default:
		}
		return []string{"127.0.0.1"}, nil
	}
	cfg.Clock = clockwork.NewFakeClock() // Start pauses between attempts until Close
	m, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- m.Start(context.Background()) }()
	testwait.Recv(t, resolving, defaultTestTimeout, "Start's join loop")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Recv(t, errc, defaultTestTimeout, "Start to end"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start = %v, want ErrClosed", err)
	}
}

func TestSeedDNS(t *testing.T) {
	t.Parallel()
	a, recA := startMember(t, localConfig("a"))
	var calls atomic.Int32
	cfg := localConfig("b")
	cfg.SeedDNS = "silos.granary.test"
	cfg.SeedPort = portOf(t, a.Local().GossipAddr)
	cfg.LookupHost = func(ctx context.Context, host string) ([]string, error) {
		if host != "silos.granary.test" {
			return nil, fmt.Errorf("unexpected lookup of %q", host)
		}
		if calls.Add(1) == 1 { // the service has no endpoints yet
			return nil, errors.New("no such host")
		}
		return []string{"127.0.0.1"}, nil
	}
	clock := clockwork.NewFakeClock()
	cfg.Clock = clock
	recB := newRecorder("b")
	b, err := New(cfg, recB.on)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	errc := make(chan error, 1)
	go func() { errc <- b.Start(testwait.Context(t, defaultTestTimeout)) }()
	// The pause after the failed lookup; then one JoinRetryInterval.
	if err := clock.BlockUntilContext(testwait.Context(t, defaultTestTimeout), 1); err != nil {
		t.Fatalf("Start did not pause after the failed lookup: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("resolved %d times before the pause, want 1", n)
	}
	clock.Advance(cfg.JoinRetryInterval)
	if err := testwait.Recv(t, errc, defaultTestTimeout, "Start"); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n < 2 {
		t.Fatalf("resolved %d times, want a retry", n)
	}
	recA.waitJoined(t, b.Local().ID)
	recB.waitJoined(t, a.Local().ID)
}

func TestSeedsOnlySelfFoundCluster(t *testing.T) {
	port := freePort(t)
	cfg := localConfig("founder", fmt.Sprintf("localhost:%d", port))
	cfg.BindPort = port
	cfg.SeedDNS = "silos.granary.test"
	cfg.LookupHost = func(ctx context.Context, host string) ([]string, error) {
		return []string{"127.0.0.1"}, nil // both names resolve to itself
	}
	m, _ := startMember(t, cfg)
	if n := len(m.Members()); n != 1 {
		t.Fatalf("founder sees %d members", n)
	}
}

// countingTransport is a net transport that counts the packets it sends:
// proof that Config.Transport is the one used.
type countingTransport struct {
	*memberlist.NetTransport
	sent atomic.Int64
}

func (c *countingTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	c.sent.Add(1)
	return c.NetTransport.WriteToAddress(b, a)
}

func TestCustomTransport(t *testing.T) {
	t.Parallel()
	a, _ := startMember(t, localConfig("a"))
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{"127.0.0.1"},
		Logger:    log.New(io.Discard, "", 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	ct := &countingTransport{NetTransport: nt}
	cfg := localConfig("b", a.Local().GossipAddr)
	cfg.Transport = ct
	b, recB := startMember(t, cfg)
	recB.waitJoined(t, a.Local().ID)
	if err := b.Update(func(m *Member) { m.Status = StatusActive }); err != nil {
		t.Fatal(err)
	}
	// b's gossip of the update goes through ct.
	if ct.sent.Load() == 0 {
		t.Fatal("custom transport unused")
	}
}

func TestDelegateRefusesBadMembers(t *testing.T) {
	t.Parallel()
	m, err := New(localConfig("self"), nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder("self")
	m.q = newEventQueue(rec.on)
	m.q.start()
	defer m.q.stop()
	d := &delegate{m}

	good := Member{ID: "peer-1", Name: "peer", GRPCAddr: "10.0.0.2:1", Types: []string{"T"}}
	goodMeta, err := encodeMeta(&good, m.cluster)
	if err != nil {
		t.Fatal(err)
	}
	foreignMeta, _ := encodeMeta(&good, clusterHash("other"))
	noName := good
	noName.Name = "someone"
	misnamedMeta, _ := encodeMeta(&noName, m.cluster)

	bad := map[string][]byte{
		"garbage":        []byte("\xff\xff\xff\xff"),
		"truncated":      goodMeta[:len(goodMeta)-3],
		"empty":          nil,
		"foreign":        foreignMeta,
		"misnamed":       misnamedMeta,
		"no cluster":     goodMeta[:len(goodMeta)-10],
		"status unknown": append(slices.Clone(goodMeta), 0x28, 0x09), // status = 9
	}
	for name, meta := range bad {
		n := &memberlist.Node{Name: "peer-1", Meta: meta}
		if err := d.NotifyAlive(n); err == nil {
			t.Errorf("%s: NotifyAlive accepted it", name)
		}
		if err := d.NotifyMerge([]*memberlist.Node{{Name: "self-x", Meta: goodMeta}, n}); err == nil {
			t.Errorf("%s: NotifyMerge accepted it", name)
		}
		d.NotifyJoin(n) // logged and ignored, never a panic
		d.NotifyUpdate(n)
		d.NotifyLeave(n)
	}
	ok := &memberlist.Node{Name: "peer-1", Meta: goodMeta}
	if err := d.NotifyAlive(ok); err != nil {
		t.Errorf("good node refused: %v", err)
	}
	if err := d.NotifyMerge([]*memberlist.Node{ok}); err != nil {
		t.Errorf("good merge refused: %v", err)
	}
	d.NotifyJoin(&memberlist.Node{Name: m.id, Meta: []byte("self is never an event")})
	d.NotifyJoin(ok)
	if e := rec.next(t, EventJoined, "peer-1"); !e.Member.Hosts("T") {
		t.Errorf("joined %+v", e.Member)
	}
	d.NotifyLeave(ok)
	rec.next(t, EventFailed, "peer-1")
	d.NotifyJoin(ok)
	rec.next(t, EventJoined, "peer-1")

	// A leave intent reports EventLeft; memberlist's later notifications
	// about the member are not events.
	for _, msg := range [][]byte{
		nil,
		{msgLeaveIntent},
		encodeLeaveIntent(clusterHash("other"), "peer-1"),
		append([]byte{9}, encodeLeaveIntent(m.cluster, "peer-1")[1:]...),
		encodeLeaveIntent(m.cluster, m.id),
		encodeLeaveIntent(m.cluster, "stranger-1"),
	} {
		d.NotifyMsg(msg) // dropped
	}
	d.NotifyMsg(encodeLeaveIntent(m.cluster, "peer-1"))
	if e := rec.next(t, EventLeft, "peer-1"); e.Member.Status != StatusDead {
		t.Errorf("left %+v", e.Member)
	}
	d.NotifyUpdate(ok)
	d.NotifyLeave(ok)
	d.NotifyJoin(ok) // its death was seen: a new alive would be news
	rec.next(t, EventJoined, "peer-1")
	rec.none(t)
	if got := m.broadcasts.NumQueued(); got != 1 {
		t.Errorf("%d intents queued for re-gossip, want 1", got)
	}
}

func TestEventsAreSerialAndOrdered(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	inside := false
	var got []int
	done := make(chan struct{})
	q := newEventQueue(func(e Event) {
		mu.Lock()
		if inside {
			t.Error("onEvent called concurrently")
		}
		inside = true
		mu.Unlock()
		got = append(got, int(e.Member.Activations))
		if len(got) == 100 {
			close(done)
		}
		mu.Lock()
		inside = false
		mu.Unlock()
	})
	q.start()
	for i := range 100 {
		q.push(Event{Member: Member{Activations: uint64(i)}})
	}
	testwait.Recv(t, done, defaultTestTimeout, "the events")
	q.stop()
	q.push(Event{}) // after stop: dropped
	for i, v := range got {
		if v != i {
			t.Fatalf("event %d delivered at %d", v, i)
		}
	}
}

// BenchmarkFailureDetection measures how long a 3-member loopback cluster
// takes to report a member closed without a leave (as SIGKILL would leave
// it: no leave message, sockets gone), per profile. Each iteration builds
// a fresh cluster; the metrics are medians over the iterations:
// "ms-first" until the first survivor reports EventFailed, "ms-all" until
// both have. Run it with a fixed count, as an iteration takes seconds:
//
//	go test -run '^$' -bench FailureDetection -benchtime 5x ./silo/membership/
func BenchmarkFailureDetection(b *testing.B) {
	profiles := []struct {
		name string
		cfg  func() Config
	}{
		{"LAN", func() Config {
			cfg := DefaultLANConfig()
			cfg.BindAddr, cfg.BindPort = "127.0.0.1", 0
			return cfg
		}},
		{"Local", DefaultLocalConfig},
	}
	for _, p := range profiles {
		b.Run(p.name, func(b *testing.B) {
			var first, all []time.Duration
			for range b.N {
				f, a := measureDetection(b, p.cfg)
				first = append(first, f)
				all = append(all, a)
			}
			b.ReportMetric(float64(median(first).Milliseconds()), "ms-first")
			b.ReportMetric(float64(median(all).Milliseconds()), "ms-all")
			b.Logf("%s: first %v, all %v", p.name, first, all)
		})
	}
}

// measureDetection starts three members of profile, closes one and
// returns when the first and the second survivor reported it failed.
func measureDetection(b *testing.B, profile func() Config) (first, all time.Duration) {
	b.Helper()
	cfgFor := func(name string, seeds ...string) Config {
		cfg := profile()
		cfg.ClusterID, cfg.Name, cfg.GRPCAddr = "bench", name, "127.0.0.1:9000"
		cfg.Seeds = seeds
		cfg.Logger = testLogger()
		return cfg
	}
	ms, recs := startCluster(b, 3, cfgFor)
	defer func() {
		for _, m := range ms {
			_ = m.Close()
		}
	}()
	victim := ms[2].Local().ID
	start := time.Now()
	if err := ms[2].Close(); err != nil {
		b.Fatal(err)
	}
	got := make(chan time.Duration, 2)
	for _, rec := range recs[:2] {
		go func() {
			timer := time.NewTimer(defaultTestTimeout)
			defer timer.Stop()
			for {
				select {
				case e := <-rec.c:
					if e.Kind == EventFailed && e.Member.ID == victim {
						got <- time.Since(start)
						return
					}
				case <-timer.C:
					got <- -1
					return
				}
			}
		}()
	}
	first, all = <-got, <-got
	if first < 0 || all < 0 {
		b.Fatalf("failure of %s not reported within %v", victim, defaultTestTimeout)
	}
	return first, all
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func TestLogWriter(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.DebugLevel)
	l := log.New(logWriter{log: zap.New(core)}, "", 0)
	l.Printf("[WARN] memberlist: Refuting a suspect message (from: %s)", "b")
	l.Printf("no prefix at all")
	entries := logs.AllUntimed()
	if len(entries) != 2 {
		t.Fatalf("%d entries", len(entries))
	}
	if e := entries[0]; e.Level != zap.DebugLevel || e.Message != "memberlist: Refuting a suspect message (from: b)" ||
		e.ContextMap()["memberlist_level"] != "WARN" {
		t.Errorf("entry %+v", e)
	}
	if e := entries[1]; e.Message != "memberlist: no prefix at all" || e.ContextMap()["memberlist_level"] != "" {
		t.Errorf("entry %+v", e)
	}
	// Disabled debug costs no parsing and loses nothing else.
	quiet, qlogs := observer.New(zap.InfoLevel)
	log.New(logWriter{log: zap.New(quiet)}, "", 0).Print("[ERR] memberlist: x")
	if qlogs.Len() != 0 {
		t.Error("logged below the level")
	}
}

// TestKeyRotationMidwayKeepsOneCluster: halfway through changing the
// gossip key, a silo that sends under the old key and one that sends
// under the new, each accepting the other's, are one cluster.
func TestKeyRotationMidwayKeepsOneCluster(t *testing.T) {
	t.Parallel()
	oldKey, newKey := []byte("0123456789abcdef"), []byte("fedcba9876543210")
	aCfg := localConfig("a")
	aCfg.SecretKey, aCfg.AcceptedKeys = oldKey, [][]byte{newKey}
	a, recA := startMember(t, aCfg)
	bCfg := localConfig("b", a.Local().GossipAddr)
	bCfg.SecretKey, bCfg.AcceptedKeys = newKey, [][]byte{oldKey}
	b, recB := startMember(t, bCfg)
	recA.waitJoined(t, b.Local().ID)
	recB.waitJoined(t, a.Local().ID)
	for name, bad := range map[string]func(*Config){
		"accepted keys without a key": func(c *Config) { c.SecretKey, c.AcceptedKeys = nil, [][]byte{oldKey} },
		"an accepted key of 15 bytes": func(c *Config) { c.SecretKey, c.AcceptedKeys = oldKey, [][]byte{make([]byte, 15)} },
	} {
		c := localConfig("x")
		bad(&c)
		if _, err := New(c, nil); err == nil || !strings.Contains(err.Error(), "AcceptedKeys") {
			t.Errorf("%s: %v, want an error naming AcceptedKeys", name, err)
		}
	}
}
