// Package channels is the plain-Go baseline of the benchmark suite: each
// scenario written as the leanest idiomatic Go, goroutines and channels
// and nothing else, so that every framework's figures can be read
// against what the language itself costs.
//
// A grain here is a goroutine that owns an unbuffered request channel and
// serves one request at a time. To ask it, a caller sends a request that
// carries the caller's own reply channel (buffered to one, and reused
// from call to call) and waits on that channel; the grain answers with a
// freshly allocated *benchpb.PingReply, as a grain of a real framework
// returns a fresh reply. Grains are created on first use, keyed by int,
// in a map under a mutex, as a virtual actor is activated on its first
// call. So that Ping measures asks and not map look-ups, a caller looks
// its grain up once, on its first call, and keeps it in a per-caller slot.
//
// Settings, and why:
//   - Callers 0 to 4095 have a slot in a fixed table that only they
//     touch, so their calls take no lock; higher indexes fall back to a
//     map under the mutex. The harness runs far fewer callers.
//   - Tell's grains have request channels buffered to 1024 messages, so
//     senders rarely wait, and a full channel holds a sender back: the
//     baseline has backpressure rather than an unbounded queue. Those
//     grains are started at setup, since their number is known then.
//   - Fanout's grain i fans out to width grains of its own, keys
//     i*width to i*width+width-1 in a second map, looked up on its first
//     fan-out and kept; it sends all width requests, each carrying one
//     reply channel buffered to width, and then collects width replies.
//   - GrainToGrain's calling grain times each ask to the other with two
//     clock reads around it.
//   - Timers: one goroutine per grain, looping on a time.Timer reset to
//     the next due time (the previous due time plus the period; the first
//     due a period after the grain started), the plain Go way to run a
//     periodic task that wants to know how late it is.
//   - Stream: a subscriber is a goroutine counting the events that come on
//     its own channel, buffered to 1024 events (as Tell's grains); the
//     publisher sends each event, a fresh *benchpb.Event shared by all,
//     to every subscriber's channel in turn, waiting while one is full,
//     and returns when all have it. There is no stream in between: the
//     publisher's loop is the stream, and a full channel holds it back
//     as Tell's do.
//   - Remote, Gateway and the cross-node stream are unsupported: there is
//     no network in a channel baseline.
//
// There is no framework, hence nothing else to set: the Go runtime runs
// with its defaults. Every blocking send also watches a done channel of
// the system, and a caller's send and wait watch its context; a grain
// that took a request always answers, into a buffered channel, so no
// wait outlives it. Close closes done and waits for every goroutine, so
// nothing is left running even under a stray call.
package channels

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/bench/scenario"
	benchpb "github.com/granaryio/granary/proto/bench"
)

// errClosed is what a call gets once its system is closed.
var errClosed = errors.New("channels: system closed")

// System is the plain-Go baseline. Its zero value is ready to use.
type System struct{}

var _ scenario.System = System{}

// New returns the plain-Go baseline.
func New() System { return System{} }

// Name names the system in results.
func (System) Name() string { return "channels" }

// node is one "node": the goroutines a setup started, and the means to
// stop them.
type node struct {
	// mu guards closed, every grain map and wg.Add, so no grain can start
	// once Close has begun waiting.
	mu     sync.Mutex
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

func newNode() *node { return &node{done: make(chan struct{})} }

// addLocked counts in one more goroutine of the node, which must call
// n.wg.Done when it ends; n.mu must be held. It reports false, counting
// nothing, once the node is closed.
func (n *node) addLocked() bool {
	if n.closed {
		return false
	}
	n.wg.Add(1)
	return true
}

// goLocked runs f on a goroutine of the node; n.mu must be held. It
// reports false, and runs nothing, once the node is closed.
func (n *node) goLocked(f func()) bool {
	if !n.addLocked() {
		return false
	}
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

// Close stops every goroutine of the node and waits for them.
func (n *node) Close() error {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		close(n.done)
	}
	n.mu.Unlock()
	n.wg.Wait()
	return nil
}

// request is an ask: a ping with the channel its reply goes to.
type request struct {
	n     int64
	reply chan *benchpb.PingReply
}

// grain is an actor: a goroutine serving the requests sent on in.
type grain struct {
	in chan request
}

// directory creates grains on first use, keyed by int.
type directory struct {
	n      *node
	grains map[int]*grain
	// serve is the body of grain key; it returns when the node is done.
	serve func(key int, g *grain)
}

func newDirectory(n *node, serve func(key int, g *grain)) *directory {
	return &directory{n: n, grains: make(map[int]*grain), serve: serve}
}

// get returns grain key, starting it if it is not running yet; nil once
// the node is closed.
func (d *directory) get(key int) *grain {
	d.n.mu.Lock()
	defer d.n.mu.Unlock()
	if g := d.grains[key]; g != nil {
		return g
	}
	if !d.n.addLocked() {
		return nil
	}
	g := &grain{in: make(chan request)}
	d.grains[key] = g
	// A go statement rather than goLocked: one closure per grain, not two.
	go d.run(key, g)
	return g
}

// run is grain key's goroutine.
func (d *directory) run(key int, g *grain) {
	defer d.n.wg.Done()
	d.serve(key, g)
}

// pong is the body of a grain that answers each ping with a fresh reply.
func pong(done <-chan struct{}) func(int, *grain) {
	return func(_ int, g *grain) {
		for {
			select {
			case r := <-g.in:
				r.reply <- &benchpb.PingReply{N: r.n}
			case <-done:
				return
			}
		}
	}
}

// ask sends r to g and waits for the reply. A grain that took the
// request always answers, and into a buffered channel, so only the
// sending side needs to watch done. After a wait cut short by ctx, the
// reply may still come: the caller must not reuse r.reply.
func ask(ctx context.Context, done <-chan struct{}, g *grain, r request) (*benchpb.PingReply, error) {
	select {
	case g.in <- r:
	case <-done:
		return nil, errClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var rep *benchpb.PingReply
	if ctxDone := ctx.Done(); ctxDone == nil {
		// A context that cannot end: a plain receive, the classic
		// channel ask (Granary's outside caller waits the same way).
		rep = <-r.reply
	} else {
		select {
		case rep = <-r.reply:
		case <-ctxDone:
			return nil, ctx.Err()
		}
	}
	if rep == nil {
		return nil, errClosed
	}
	return rep, nil
}

// slot is one caller's cached grain and its reply channel.
type slot struct {
	g     *grain
	reply chan *benchpb.PingReply
	n     int64
}

// fixedSlots is how many callers get a lock-free slot.
const fixedSlots = 4096

// caller asks the grain of dir whose key is the caller's index.
type caller struct {
	n   *node
	dir *directory
	// fixed[i] is touched only by caller i, and calls by the same caller
	// never overlap; higher indexes live in more, under n.mu.
	fixed []slot
	more  map[int]*slot
}

func newCaller(n *node, dir *directory) *caller {
	return &caller{n: n, dir: dir, fixed: make([]slot, fixedSlots), more: make(map[int]*slot)}
}

// slot returns caller i's slot, filled on its first call.
func (c *caller) slot(i int) (*slot, error) {
	var s *slot
	if i >= 0 && i < len(c.fixed) {
		s = &c.fixed[i]
	} else {
		c.n.mu.Lock()
		s = c.more[i]
		if s == nil {
			s = new(slot)
			c.more[i] = s
		}
		c.n.mu.Unlock()
	}
	if s.g == nil {
		if s.g = c.dir.get(i); s.g == nil {
			return nil, errClosed
		}
		s.reply = make(chan *benchpb.PingReply, 1)
	}
	return s, nil
}

// Call asks grain i and waits for its reply.
func (c *caller) Call(ctx context.Context, i int) error {
	s, err := c.slot(i)
	if err != nil {
		return err
	}
	s.n++
	if _, err := ask(ctx, c.n.done, s.g, request{n: s.n, reply: s.reply}); err != nil {
		// A late reply may yet land in the old channel.
		s.reply = make(chan *benchpb.PingReply, 1)
		return err
	}
	return nil
}

func (c *caller) Close() error { return c.n.Close() }

// Local starts a node whose grains answer pings; caller i asks grain i.
func (System) Local(context.Context) (scenario.Caller, error) {
	n := newNode()
	return newCaller(n, newDirectory(n, pong(n.done))), nil
}

// Remote is unsupported: the baseline has no network.
func (System) Remote(context.Context) (scenario.Caller, error) {
	return nil, scenario.ErrUnsupported
}

// Gateway is unsupported: the baseline has no network, hence no gateway.
func (System) Gateway(context.Context) (scenario.Caller, error) {
	return nil, scenario.ErrUnsupported
}

// tellCapacity is how many one-way messages a Tell grain's channel holds.
const tellCapacity = 1024

// teller sends one-way messages to grains that count them.
type teller struct {
	n       *node
	grains  []chan int64
	handled atomic.Int64
}

// Tell starts grains grains, each counting the messages it receives.
func (System) Tell(_ context.Context, grains int) (scenario.Teller, error) {
	t := &teller{n: newNode(), grains: make([]chan int64, grains)}
	t.n.mu.Lock()
	defer t.n.mu.Unlock()
	for k := range t.grains {
		in := make(chan int64, tellCapacity)
		t.grains[k] = in
		t.n.goLocked(func() {
			for {
				select {
				case <-in:
					t.handled.Add(1)
				case <-t.n.done:
					return
				}
			}
		})
	}
	return t, nil
}

// Send sends message n to grain n % grains, waiting while its channel is
// full.
func (t *teller) Send(ctx context.Context, _ int, n int64) error {
	select {
	case t.grains[n%int64(len(t.grains))] <- n:
		return nil
	case <-t.n.done:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *teller) Handled() int64 { return t.handled.Load() }

func (t *teller) Close() error { return t.n.Close() }

// Fanout starts a node whose grain i, asked, asks width grains of its own
// at once and answers when all have.
func (System) Fanout(_ context.Context, width int) (scenario.Caller, error) {
	n := newNode()
	leaves := newDirectory(n, pong(n.done))
	fanners := newDirectory(n, func(key int, g *grain) { fanOut(n.done, key, g, leaves, width) })
	return newCaller(n, fanners), nil
}

// fanOut is the body of fanning grain key. It looks its width grains up
// on its first request and keeps them.
func fanOut(done <-chan struct{}, key int, g *grain, leaves *directory, width int) {
	var targets []*grain
	replies := make(chan *benchpb.PingReply, width)
	for {
		var r request
		select {
		case r = <-g.in:
		case <-done:
			return
		}
		if targets == nil {
			targets = leafGrains(leaves, key, width)
		}
		ok := targets != nil
		sent := 0
	send:
		for _, t := range targets {
			select {
			case t.in <- request{n: r.n, reply: replies}:
				sent++
			case <-done:
				ok = false
				break send
			}
		}
		for range sent {
			if <-replies == nil {
				ok = false
			}
		}
		if !ok {
			r.reply <- nil
			continue
		}
		r.reply <- &benchpb.PingReply{N: int64(width)}
	}
}

// leafGrains returns the width grains fanner key fans out to, keys
// key*width onwards, starting them; nil once the node is closed.
func leafGrains(leaves *directory, key, width int) []*grain {
	base := key * width
	targets := make([]*grain, width)
	for j := range targets {
		if targets[j] = leaves.get(base + j); targets[j] == nil {
			return nil
		}
	}
	return targets
}

// loopRequest asks the calling grain of GrainToGrain to make n asks.
type loopRequest struct {
	ctx   context.Context
	n     int
	rec   *scenario.Recorder
	reply chan error
}

// looper drives grain a, which asks grain b on request.
type looper struct {
	n     *node
	loops chan loopRequest
}

// GrainToGrain starts a node with grain a, which on request asks grain b
// over and over, one ask at a time, timing each.
func (System) GrainToGrain(context.Context) (scenario.Looper, error) {
	l := &looper{n: newNode(), loops: make(chan loopRequest)}
	b := &grain{in: make(chan request)}
	serveB := pong(l.n.done)
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	l.n.goLocked(func() { serveB(0, b) })
	l.n.goLocked(func() {
		replies := make(chan *benchpb.PingReply, 1)
		for {
			select {
			case lr := <-l.loops:
				lr.reply <- relay(lr, l.n.done, b, replies)
			case <-l.n.done:
				return
			}
		}
	})
	return l, nil
}

// relay makes lr.n asks to b, one at a time, timing each into lr.rec.
// b always answers an ask it took, so the wait needs no select.
func relay(lr loopRequest, done <-chan struct{}, b *grain, replies chan *benchpb.PingReply) error {
	ctxDone := lr.ctx.Done()
	for k := range lr.n {
		t0 := time.Now()
		select {
		case b.in <- request{n: int64(k), reply: replies}:
		case <-done:
			return errClosed
		case <-ctxDone:
			return lr.ctx.Err()
		}
		<-replies
		lr.rec.Record(time.Since(t0))
	}
	return nil
}

// Loop has grain a make n asks to grain b. The calling grain always
// answers a loop it took, cutting it short if ctx ends, so rec is no
// longer touched once Loop returns.
func (l *looper) Loop(ctx context.Context, n int, rec *scenario.Recorder) error {
	lr := loopRequest{ctx: ctx, n: n, rec: rec, reply: make(chan error, 1)}
	select {
	case l.loops <- lr:
	case <-l.n.done:
		return errClosed
	}
	return <-lr.reply
}

func (l *looper) Close() error { return l.n.Close() }

// activator asks grain i, creating it: every call is a grain's first.
type activator struct {
	n   *node
	dir *directory
}

// Activations starts a node whose grains are created by their first
// call and then idle, parked, until Close.
func (System) Activations(context.Context) (scenario.Caller, error) {
	n := newNode()
	return &activator{n: n, dir: newDirectory(n, pong(n.done))}, nil
}

// Call creates grain i and asks it. Each call is to a different grain,
// so each brings its own reply channel.
func (a *activator) Call(ctx context.Context, i int) error {
	g := a.dir.get(i)
	if g == nil {
		return errClosed
	}
	_, err := ask(ctx, a.n.done, g, request{n: int64(i), reply: make(chan *benchpb.PingReply, 1)})
	return err
}

func (a *activator) Close() error { return a.n.Close() }

// streamCapacity is how many events a subscriber's channel holds.
const streamCapacity = 1024

// publisher sends each event to every subscriber's channel.
type publisher struct {
	n    *node
	subs []chan *benchpb.Event
}

// Stream starts the tally's subscribers, each a goroutine counting the
// events on its channel. A cross-node stream is unsupported.
func (System) Stream(_ context.Context, tally *scenario.Tally, remote bool) (scenario.Publisher, error) {
	if remote {
		return nil, scenario.ErrUnsupported
	}
	p := &publisher{n: newNode(), subs: make([]chan *benchpb.Event, tally.Subscribers())}
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	for i := range p.subs {
		in := make(chan *benchpb.Event, streamCapacity)
		p.subs[i] = in
		events := tally.Counter(tally.Name(i))
		p.n.goLocked(func() {
			for {
				select {
				case <-in:
					events.Count()
				case <-p.n.done:
					return
				}
			}
		})
	}
	return p, nil
}

// Publish sends event n to every subscriber, in turn, waiting while a
// subscriber's channel is full.
func (p *publisher) Publish(ctx context.Context, n int64) error {
	ev := &benchpb.Event{N: n}
	for _, in := range p.subs {
		select {
		case in <- ev:
		case <-p.n.done:
			return errClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (p *publisher) Close() error { return p.n.Close() }

// Timers starts n grains, each a goroutine looping on its own time.Timer.
// Every timer is armed before Timers returns.
func (System) Timers(_ context.Context, n int, period time.Duration, late *scenario.SyncRecorder) (io.Closer, error) {
	nd := newNode()
	nd.mu.Lock()
	defer nd.mu.Unlock()
	for range n {
		due := time.Now().Add(period)
		t := time.NewTimer(period)
		nd.addLocked()
		go tick(nd, t, due, period, late)
	}
	return nd, nil
}

// tick is a timer grain's body: at each due time it records how late it
// runs, then sets the timer for the next.
func tick(nd *node, t *time.Timer, due time.Time, period time.Duration, late *scenario.SyncRecorder) {
	defer nd.wg.Done()
	defer t.Stop()
	done := nd.done
	for {
		select {
		case <-t.C:
			late.Record(time.Since(due))
			due = due.Add(period)
			t.Reset(time.Until(due))
		case <-done:
			return
		}
	}
}
