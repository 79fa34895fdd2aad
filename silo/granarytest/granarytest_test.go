package granarytest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	hellopb "github.com/granaryio/granary/proto/examples/hello"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/granarytest"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context { return testwait.Context(t, granarytest.Timeout) }

// names is the greeters' persistent state: whom each greeted.
var names = grain.NewStateSpec[*hellopb.GreetingsReply]("names", "")

// record is what the test greeters did, across silos.
type record struct {
	mu          sync.Mutex
	ticks       map[string]int // timer ticks per greeter
	reminders   map[string]int // reminder ticks per greeter
	woke        map[string]int // sleeps ended per greeter
	deactivated map[string][]grain.DeactivationReason
}

func newRecord() *record {
	return &record{ticks: map[string]int{}, reminders: map[string]int{}, woke: map[string]int{}, deactivated: map[string][]grain.DeactivationReason{}}
}

func (r *record) get(m map[string]int, key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m[key]
}

func (r *record) deactivations(key string) []grain.DeactivationReason {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.deactivated[key])
}

// greeter is a Greeter whose names are persistent, and which a request
// can ask for a timer ("timer:<period>"), a reminder ("reminder:<period>")
// or a sleep ("sleep:<duration>").
type greeter struct {
	hellopb.UnimplementedGreeterGrain
	rec *record
}

func register(rec *record) granarytest.Option {
	return granarytest.Register(func(r *silo.Silo) error {
		return hellopb.RegisterGreeterGrain(r, func(grain.ID) hellopb.GreeterGrain { return &greeter{rec: rec} }, grain.WithState(names))
	})
}

func (g *greeter) OnDeactivate(ctx grain.Context, reason grain.DeactivationReason) error {
	g.rec.mu.Lock()
	defer g.rec.mu.Unlock()
	g.rec.deactivated[ctx.ID().Key] = append(g.rec.deactivated[ctx.ID().Key], reason)
	return nil
}

func (g *greeter) SayHello(ctx grain.Context, req *hellopb.HelloRequest) (*hellopb.HelloReply, error) {
	verb, arg, _ := strings.Cut(req.GetName(), ":")
	if d, err := time.ParseDuration(arg); err == nil {
		key := ctx.ID().Key
		switch verb {
		case "timer":
			_, err := ctx.RegisterTimer("t", func(ctx grain.Context) error {
				g.rec.mu.Lock()
				g.rec.ticks[key]++
				g.rec.mu.Unlock()
				return nil
			}, d, d)
			return &hellopb.HelloReply{}, err
		case "reminder":
			_, err := ctx.RegisterReminder("r", d, d)
			return &hellopb.HelloReply{}, err
		case "relay":
			// Each tick greets another greeter, on whichever silo it lives.
			_, err := ctx.RegisterTimer("relay", func(ctx grain.Context) error {
				_, err := hellopb.NewGreeterRef(ctx.Caller(), key+"-relayed").SayHello(ctx, &hellopb.HelloRequest{Name: key})
				return err
			}, d, d)
			return &hellopb.HelloReply{}, err
		case "sleep":
			if err := ctx.Sleep(d); err != nil {
				return nil, err
			}
			g.rec.mu.Lock()
			g.rec.woke[key]++
			g.rec.mu.Unlock()
			return &hellopb.HelloReply{Message: "awake"}, nil
		}
	}
	st := names.Of(ctx)
	st.Value().Names = append(st.Value().Names, req.GetName())
	if err := st.Write(ctx); err != nil {
		return nil, err
	}
	return &hellopb.HelloReply{Message: "Hello, " + req.GetName() + "!", Count: int64(len(st.Value().Names))}, nil
}

func (g *greeter) Greetings(ctx grain.Context, _ *hellopb.GreetingsRequest) (*hellopb.GreetingsReply, error) {
	return &hellopb.GreetingsReply{Names: slices.Clone(names.Of(ctx).Value().GetNames())}, nil
}

func (g *greeter) ReceiveReminder(ctx grain.Context, name string, _ grain.TickStatus) error {
	g.rec.mu.Lock()
	defer g.rec.mu.Unlock()
	g.rec.reminders[ctx.ID().Key]++
	return nil
}

func greeterID(key string) grain.ID { return grain.NewID(hellopb.GreeterGrainType, key) }

func sayHello(t *testing.T, c grain.Caller, key, name string) *hellopb.HelloReply {
	t.Helper()
	r, err := hellopb.NewGreeterRef(c, key).SayHello(testCtx(t), &hellopb.HelloRequest{Name: name})
	if err != nil {
		t.Fatalf("greeter %s: SayHello(%s): %v", key, name, err)
	}
	return r
}

// TestOneActivationPerGrain: grains called through every silo of three
// each have one activation, spread over the silos.
func TestOneActivationPerGrain(t *testing.T) {
	t.Parallel()
	c := granarytest.New(t, granarytest.Silos(3), register(newRecord()))
	if got := c.Running(); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("Running: %v", got)
	}
	used := map[int]bool{}
	for i := range 30 {
		key := fmt.Sprint("g", i)
		for s := range 3 {
			sayHello(t, c.Silo(s), key, "x")
		}
		at := c.Activations(greeterID(key))
		if len(at) != 1 {
			t.Fatalf("greeter %s has activations on %v, want one", key, at)
		}
		used[at[0]] = true
	}
	if got := c.ActivationCount(hellopb.GreeterGrainType); got != 30 {
		t.Fatalf("ActivationCount: %d, want 30", got)
	}
	if len(used) < 2 {
		t.Fatalf("30 grains all activated on silo %v", used)
	}
	if r := sayHello(t, c.Caller(), "g0", "y"); r.GetCount() != 4 {
		t.Fatalf("the fourth greeting: count %d", r.GetCount())
	}
}

// TestAdvanceCollectsIdleGrains: a grain idle past its collection age is
// collected by the time Advance returns, and not a tick before.
func TestAdvanceCollectsIdleGrains(t *testing.T) {
	t.Parallel()
	rec := newRecord()
	c := granarytest.New(t, granarytest.Silos(2), register(rec), granarytest.Configure(func(cfg *silo.Config) {
		cfg.CollectionAge, cfg.CollectionInterval = 10*time.Minute, time.Minute
	}))
	sayHello(t, c.Caller(), "idle", "x")
	c.Advance(9 * time.Minute)
	if at := c.Activations(greeterID("idle")); len(at) != 1 {
		t.Fatalf("after 9 idle minutes: activations on %v, want one", at)
	}
	c.Advance(2 * time.Minute)
	if at := c.Activations(greeterID("idle")); len(at) != 0 {
		t.Fatalf("after 11 idle minutes: activations on %v, want none", at)
	}
	if got := rec.deactivations("idle"); !slices.Equal(got, []grain.DeactivationReason{grain.DeactivateIdle}) {
		t.Fatalf("OnDeactivate reasons %v, want [idle]", got)
	}
	if r := sayHello(t, c.Caller(), "idle", "y"); r.GetCount() != 2 {
		t.Fatalf("after reactivation: count %d, want 2 (the state was kept)", r.GetCount())
	}
}

// TestAdvanceKeepsKeepAliveGrains: a keep-alive type is never collected,
// and Advance settles though the collector, with no other type to look
// at, makes no look at all.
func TestAdvanceKeepsKeepAliveGrains(t *testing.T) {
	t.Parallel()
	rec := newRecord()
	c := granarytest.New(t, granarytest.Register(func(r *silo.Silo) error {
		return hellopb.RegisterGreeterGrain(r, func(grain.ID) hellopb.GreeterGrain { return &greeter{rec: rec} }, grain.WithState(names), grain.WithKeepAlive())
	}), granarytest.Configure(func(cfg *silo.Config) {
		cfg.CollectionAge, cfg.CollectionInterval = time.Minute, time.Second
	}))
	sayHello(t, c.Caller(), "kept", "x")
	c.Advance(2 * time.Hour)
	if at := c.Activations(greeterID("kept")); len(at) != 1 {
		t.Fatalf("after 2 idle hours: activations on %v, want one", at)
	}
	if got := rec.deactivations("kept"); len(got) != 0 {
		t.Fatalf("OnDeactivate ran for a keep-alive grain: %v", got)
	}
}

// TestAdvanceTicksTimers: a periodic timer ticks once per period that
// Advance moves over, exactly, every time.
func TestAdvanceTicksTimers(t *testing.T) {
	t.Parallel()
	rec := newRecord()
	c := granarytest.New(t, granarytest.Silos(2), register(rec))
	for i := range 3 {
		sayHello(t, c.Caller(), fmt.Sprint("t", i), fmt.Sprintf("timer:%v", time.Duration(i+1)*time.Second))
	}
	c.Advance(6 * time.Second)
	for i, want := range []int{6, 3, 2} {
		if got := rec.get(rec.ticks, fmt.Sprint("t", i)); got != want {
			t.Errorf("timer of period %ds: %d ticks in 6 s, want %d", i+1, got, want)
		}
	}
	c.Advance(500 * time.Millisecond)
	if got := rec.get(rec.ticks, "t0"); got != 6 {
		t.Errorf("half a period later: %d ticks, want 6", got)
	}
	c.Advance(500 * time.Millisecond)
	if got := rec.get(rec.ticks, "t0"); got != 7 {
		t.Errorf("a period later: %d ticks, want 7", got)
	}
}

// TestAdvanceWaitsForCallsBetweenSilos: the calls that timer ticks make
// to grains on other silos have run by the time Advance returns.
func TestAdvanceWaitsForCallsBetweenSilos(t *testing.T) {
	t.Parallel()
	c := granarytest.New(t, granarytest.Silos(3), register(newRecord()))
	for i := range 6 {
		sayHello(t, c.Caller(), fmt.Sprint("r", i), "relay:1s")
	}
	apart := 0
	for i := range 6 {
		if !slices.Equal(c.Activations(greeterID(fmt.Sprint("r", i))), c.Activations(greeterID(fmt.Sprint("r", i, "-relayed")))) {
			apart++
		}
	}
	if apart == 0 {
		t.Fatal("every relay and its target share a silo: the test crosses no silo")
	}
	for step := 1; step <= 3; step++ {
		c.Advance(time.Second)
		for i := range 6 {
			// Read from the storage, not by a call, which would wait its
			// turn behind whatever is still on its way.
			st, _, err := granarytest.ReadState(c, greeterID(fmt.Sprint("r", i, "-relayed")), names)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.GetNames()) != step {
				t.Fatalf("after %d s: r%d-relayed was greeted %d times, want %d", step, i, len(st.GetNames()), step)
			}
		}
	}
}

// TestStartFails: Start returns the error New would fail the test with.
func TestStartFails(t *testing.T) {
	t.Parallel()
	c, err := granarytest.Start(granarytest.Silos(2), granarytest.Register(func(*silo.Silo) error { return errors.New("no such type") }))
	if err == nil || !strings.Contains(err.Error(), "no such type") || c != nil {
		t.Fatalf("Start: %v, %v; want the registration's error", c, err)
	}
}

// TestAdvanceFiresReminders: a reminder fires once per period, and keeps
// firing after the silo that held its grain is killed.
func TestAdvanceFiresReminders(t *testing.T) {
	t.Parallel()
	rec := newRecord()
	c := granarytest.New(t, granarytest.Silos(2), register(rec))
	sayHello(t, c.Caller(), "r", "reminder:1m")
	c.Advance(3 * time.Minute)
	if got := rec.get(rec.reminders, "r"); got != 3 {
		t.Fatalf("after 3 minutes: %d reminder ticks, want 3", got)
	}
	c.Kill(c.Activations(greeterID("r"))[0])
	before := rec.get(rec.reminders, "r")
	c.Advance(2 * time.Minute)
	if got := rec.get(rec.reminders, "r") - before; got < 1 {
		t.Fatalf("2 minutes after the kill: %d more reminder ticks, want at least 1", got)
	}
}

// TestAdvanceWakesSleepers: a grain sleeping on the clock wakes when
// Advance moves past its sleep, not before.
func TestAdvanceWakesSleepers(t *testing.T) {
	t.Parallel()
	rec := newRecord()
	c := granarytest.New(t, register(rec))
	f := hellopb.NewGreeterRef(c.Caller(), "s").SayHelloAsync(testCtx(t), &hellopb.HelloRequest{Name: "sleep:1h"}, grain.WithTimeout(2*time.Hour))
	c.Advance(59 * time.Minute)
	// Not f.Await with a cancelled context: it may return the context's
	// error even when the reply is in. Advance has run the turn to its
	// end if the sleep ended, so the record tells.
	if got := rec.get(rec.woke, "s"); got != 0 {
		t.Fatalf("the sleeper woke %d times before its hour passed", got)
	}
	c.Advance(time.Minute)
	if got := rec.get(rec.woke, "s"); got != 1 {
		t.Fatalf("the sleeper woke %d times when its hour passed, want 1", got)
	}
	r, err := f.Await(testCtx(t))
	if err != nil || r.GetMessage() != "awake" {
		t.Fatalf("after the hour: %v, %v", r, err)
	}
}

// TestKillKeepsState: a grain whose silo is killed activates on another
// with the state it wrote; StartSilo adds a silo after.
func TestKillKeepsState(t *testing.T) {
	t.Parallel()
	rec := newRecord()
	c := granarytest.New(t, granarytest.Silos(3), register(rec))
	sayHello(t, c.Caller(), "k", "a")
	sayHello(t, c.Caller(), "k", "b")
	at := c.Activations(greeterID("k"))
	c.Kill(at[0])
	if got := c.Running(); len(got) != 2 || slices.Contains(got, at[0]) {
		t.Fatalf("after Kill(%d): running %v", at[0], got)
	}
	if r := sayHello(t, c.Caller(), "k", "c"); r.GetCount() != 3 {
		t.Fatalf("after the kill: count %d, want 3", r.GetCount())
	}
	if now := c.Activations(greeterID("k")); len(now) != 1 || now[0] == at[0] {
		t.Fatalf("after the kill: activations on %v", now)
	}
	i := c.StartSilo()
	if i != 3 || len(c.Running()) != 3 {
		t.Fatalf("StartSilo: %d, running %v", i, c.Running())
	}
}

// TestStopDeactivatesGracefully: a silo stopped gracefully runs its
// grains' OnDeactivate, and they activate elsewhere on their next call.
func TestStopDeactivatesGracefully(t *testing.T) {
	t.Parallel()
	rec := newRecord()
	c := granarytest.New(t, granarytest.Silos(2), register(rec))
	sayHello(t, c.Caller(), "s", "a")
	at := c.Activations(greeterID("s"))[0]
	c.Stop(at)
	if got := rec.deactivations("s"); !slices.Equal(got, []grain.DeactivationReason{grain.DeactivateShutdown}) {
		t.Fatalf("OnDeactivate reasons %v, want [shutdown]", got)
	}
	if r := sayHello(t, c.Caller(), "s", "b"); r.GetCount() != 2 {
		t.Fatalf("after the stop: count %d, want 2", r.GetCount())
	}
}

// TestPartition: during a partition a grain called from both sides
// activates on each; once healed it is back to one.
func TestPartition(t *testing.T) {
	t.Parallel()
	c := granarytest.New(t, granarytest.Silos(3), register(newRecord()))
	c.Partition(2)
	for _, s := range []int{0, 2} {
		sayHello(t, c.Silo(s), "p", "x")
	}
	if at := c.Activations(greeterID("p")); len(at) != 2 {
		t.Fatalf("during the partition: activations on %v, want one per side", at)
	}
	c.Heal()
	testwait.For(t, granarytest.Timeout, "one activation after the heal", func() bool {
		c.Advance(100 * time.Millisecond)
		return len(c.Activations(greeterID("p"))) == 1
	})
}

// TestClient: a Go client reaches the grains through the gateways.
func TestClient(t *testing.T) {
	t.Parallel()
	c := granarytest.New(t, granarytest.Silos(2), granarytest.Gateway(), register(newRecord()))
	cl := c.Client(t)
	r, err := hellopb.NewGreeterRef(cl, "c").SayHello(testCtx(t), &hellopb.HelloRequest{Name: "client"})
	if err != nil || r.GetMessage() != "Hello, client!" {
		t.Fatalf("SayHello through the client: %v, %v", r, err)
	}
}

// TestRealClock: on the real clock, grain code sleeps in real time.
func TestRealClock(t *testing.T) {
	t.Parallel()
	c := granarytest.New(t, granarytest.WithRealClock(), register(newRecord()))
	if r := sayHello(t, c.Caller(), "rc", "sleep:1ms"); r.GetMessage() != "awake" {
		t.Fatalf("reply %v", r)
	}
}

// TestRealDeadlineOnClusterClock: a call's real-time context deadline is
// a timeout on the cluster's clock, so it works after Advance moved the
// clock past it, and fails the call when Advance passes it; a shorter
// WithTimeout wins.
func TestRealDeadlineOnClusterClock(t *testing.T) {
	t.Parallel()
	c := granarytest.New(t, register(newRecord()))
	c.Advance(time.Minute)
	ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
	defer cancel()
	ref := hellopb.NewGreeterRef(c.Caller(), "d")
	if _, err := ref.SayHello(ctx, &hellopb.HelloRequest{Name: "Ada"}); err != nil {
		t.Fatalf("a call with 5 s left in real time, the clock a minute on: %v", err)
	}

	f := ref.SayHelloAsync(ctx, &hellopb.HelloRequest{Name: "sleep:1h"})
	c.Advance(10 * time.Second)
	if _, err := f.Await(testCtx(t)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call sleeping past its 5 s, once the clock passed them: %v, want DeadlineExceeded", err)
	}

	long, cancelLong := context.WithTimeout(testCtx(t), time.Hour)
	defer cancelLong()
	f = hellopb.NewGreeterRef(c.Caller(), "e").SayHelloAsync(long, &hellopb.HelloRequest{Name: "sleep:1h"}, grain.WithTimeout(2*time.Second))
	c.Advance(3 * time.Second)
	if _, err := f.Await(testCtx(t)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call with an hour left and a 2 s timeout, 3 s on: %v, want DeadlineExceeded", err)
	}
}
