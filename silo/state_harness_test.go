package silo

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// registerState is the Register probe's persistent state.
var registerState = grain.NewStateSpec[*probe.RegisterState]("register", "")

// tick is a reminder tick a Register grain received.
type tick struct {
	key, name, silo string
	st              grain.TickStatus
	at              time.Time
}

// registerWorld is what Register grains report to their test: ticks, and
// activations made.
type registerWorld struct {
	ticks chan tick

	mu          sync.Mutex
	activations map[string]int // by key
	// hold, when set for a key, makes Set wait for it after changing the
	// value and before writing it.
	hold map[string]chan struct{}
	// arrived is told the key of each Set that reached its hold.
	arrived chan string
	// tickHold, when set before the silo starts, keeps every reminder
	// tick in grain code, ignoring its context, until it is closed.
	tickHold chan struct{}
}

func newRegisterWorld() *registerWorld {
	return &registerWorld{
		ticks:       make(chan tick, 4096),
		activations: map[string]int{},
		hold:        map[string]chan struct{}{},
		arrived:     make(chan string, 64),
	}
}

// register registers the Register probe on s, which is called silo.
func (w *registerWorld) register(t testing.TB, s *Silo, silo string, opts ...grain.RegisterOption) {
	t.Helper()
	opts = append([]grain.RegisterOption{grain.WithState(registerState)}, opts...)
	err := probe.RegisterRegisterGrain(s, func(id grain.ID) probe.RegisterGrain {
		return &registerGrain{w: w, silo: silo, key: id.Key}
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
}

// registerGrain is the Register probe: its value is persistent state.
type registerGrain struct {
	probe.UnimplementedRegisterGrain
	w    *registerWorld
	silo string
	key  string
	st   *grain.State[*probe.RegisterState]
}

func (g *registerGrain) OnActivate(ctx grain.Context) error {
	g.st = registerState.Of(ctx)
	g.w.mu.Lock()
	g.w.activations[g.key]++
	g.w.mu.Unlock()
	return nil
}

func (g *registerGrain) reply(ctx grain.Context) *probe.RegisterReply {
	return &probe.RegisterReply{Value: g.st.Value().Value, Etag: g.st.ETag(), Activation: ctx.ActivationID(), Silo: g.silo}
}

func (g *registerGrain) Get(ctx grain.Context, _ *probe.RegisterOp) (*probe.RegisterReply, error) {
	return g.reply(ctx), nil
}

// Set stores the value. A failed write leaves the activation's value as
// it was and deactivates it, so the next call reads the store again: the
// write may have landed, or another activation may have written.
func (g *registerGrain) Set(ctx grain.Context, req *probe.RegisterOp) (*probe.RegisterReply, error) {
	v := g.st.Value()
	old, oldPad := v.Value, v.Pad
	v.Value, v.Pad = req.Value, make([]byte, req.Pad)
	g.w.mu.Lock()
	hold := g.w.hold[g.key]
	g.w.mu.Unlock()
	if hold != nil {
		g.w.arrived <- g.key
		ctx.Blocking(func() { <-hold })
	}
	if err := g.st.Write(ctx); err != nil {
		v.Value, v.Pad = old, oldPad
		ctx.DeactivateOnIdle()
		return nil, err
	}
	return g.reply(ctx), nil
}

func (g *registerGrain) Remind(ctx grain.Context, req *probe.RegisterOp) (*probe.RegisterReply, error) {
	if req.Remove {
		if err := ctx.UnregisterReminder(req.Name); err != nil {
			return nil, err
		}
	} else if req.Name != "" {
		if _, err := ctx.RegisterReminder(req.Name, time.Duration(req.DueMs)*time.Millisecond, time.Duration(req.PeriodMs)*time.Millisecond); err != nil {
			return nil, err
		}
	}
	rs, err := ctx.Reminders()
	if err != nil {
		return nil, err
	}
	r := g.reply(ctx)
	for _, x := range rs {
		r.Reminders = append(r.Reminders, fmt.Sprintf("%s/%v", x.Name, x.Period))
	}
	return r, nil
}

func (g *registerGrain) ReceiveReminder(ctx grain.Context, name string, st grain.TickStatus) error {
	select {
	case g.w.ticks <- tick{key: g.key, name: name, silo: g.silo, st: st, at: time.Now()}:
	default:
		return status.Error(codes.ResourceExhausted, "test tick channel full")
	}
	if g.w.tickHold != nil {
		<-g.w.tickHold
	}
	return nil
}

// waitTicks waits for n ticks of key's reminder name, dropping others,
// and returns them.
func (w *registerWorld) waitTicks(t testing.TB, key, name string, n int) []tick {
	t.Helper()
	var got []tick
	testwait.Until(t, w.ticks, defaultTestTimeout, fmt.Sprintf("%d ticks of %s/%s", n, key, name), func(tk tick) bool {
		if tk.key == key && tk.name == name {
			got = append(got, tk)
		}
		return len(got) == n
	})
	return got
}

// drainTicks empties the tick channel.
func (w *registerWorld) drainTicks() {
	for {
		select {
		case <-w.ticks:
		default:
			return
		}
	}
}

func (w *registerWorld) activationsOf(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.activations[key]
}

// newStateSilo starts a silo alone hosting the Register probe, with cfg
// changed by tweak; it stops when the test ends.
func newStateSilo(t *testing.T, w *registerWorld, tweak func(*Config), opts ...grain.RegisterOption) *Silo {
	t.Helper()
	s, err := startStateSilo(t, w, tweak, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopSilo(t, s) })
	return s
}

func startStateSilo(t testing.TB, w *registerWorld, tweak func(*Config), opts ...grain.RegisterOption) (*Silo, error) {
	t.Helper()
	cfg := DefaultConfig()
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	w.register(t, s, cfg.Name, opts...)
	if err := s.Start(context.Background()); err != nil {
		return nil, err
	}
	return s, nil
}

func stopSilo(t testing.TB, s *Silo) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("Stop %s: %v", s.cfg.Name, err)
	}
}

// reg returns a reference to Register key through c.
func reg(c grain.Caller, key string) probe.RegisterRef { return probe.NewRegisterRef(c, key) }

// wantCode fails unless err carries code c.
func wantCode(t testing.TB, err error, c codes.Code, what string) {
	t.Helper()
	if status.Code(err) != c {
		t.Fatalf("%s: err = %v, want code %v", what, err, c)
	}
}
