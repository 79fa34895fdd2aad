package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/testwait"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// defaultTestTimeout bounds every wait: a test that needs it has failed.
const defaultTestTimeout = 10 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo answers every request with its payload and records one-way
// envelopes. A test may hold the reader by setting block.
type echo struct {
	mu      sync.Mutex
	oneWays []string
	got     chan string
	block   chan struct{} // when set, Deliver waits on it
	// answer, when set, is the response to every request.
	answer func(req *granaryv1.Envelope) *granaryv1.Envelope
}

func newEcho() *echo { return &echo{got: make(chan string, 4096)} }

func (e *echo) Deliver(from string, env *granaryv1.Envelope, r Responder) {
	e.mu.Lock()
	block, answer := e.block, e.answer
	e.mu.Unlock()
	if block != nil {
		<-block
	}
	if answer != nil && r.Expects() {
		r.Reply(answer(env))
		return
	}
	if !r.Expects() {
		e.mu.Lock()
		e.oneWays = append(e.oneWays, string(env.Payload))
		e.mu.Unlock()
		e.got <- from + ":" + string(env.Payload)
		return
	}
	if string(env.Payload) == "fail" {
		r.Reply(&granaryv1.Envelope{Code: uint32(codes.FailedPrecondition), Message: "asked to fail"})
		return
	}
	r.Reply(&granaryv1.Envelope{Payload: env.Payload, ActivationSilo: from})
}

// pair is two transports, a and b, on one in-memory network.
type pair struct {
	net       *MemNetwork
	a, b      *Transport
	ha, hb    *echo
	clock     *clockwork.FakeClock
	logs      *observer.ObservedLogs
	closeOnce sync.Once
	t         *testing.T
}

// warmEndpoint makes a call from a to b, so that the stream is up, and
// returns a's endpoint for b.
func (p *pair) warmEndpoint() *endpoint {
	p.t.Helper()
	if r := wait(p.t, call(p.a, "b", "warm", time.Time{})); r.err != nil {
		p.t.Fatal(r.err)
	}
	ep, err := p.a.endpointFor("b")
	if err != nil {
		p.t.Fatal(err)
	}
	return ep
}

func newPair(t *testing.T, tweak func(*Config)) *pair {
	t.Helper()
	p := &pair{net: NewMemNetwork(), ha: newEcho(), hb: newEcho(), clock: clockwork.NewFakeClock(), t: t}
	core, logs := observer.New(zap.DebugLevel)
	p.logs = logs
	mk := func(self string, h Handler) *Transport {
		cfg := DefaultConfig()
		cfg.ClusterID, cfg.Self, cfg.Clock, cfg.Logger = "test", self, p.clock, zap.New(core)
		if tweak != nil {
			tweak(&cfg)
		}
		tr, err := New(cfg, p.net.From(self), h)
		if err != nil {
			t.Fatal(err)
		}
		p.net.Listen(self, tr)
		return tr
	}
	p.a, p.b = mk("a", p.ha), mk("b", p.hb)
	p.a.SetPeer("b", "b")
	p.b.SetPeer("a", "a")
	t.Cleanup(p.close)
	return p
}

func (p *pair) close() {
	p.closeOnce.Do(func() {
		p.a.Close()
		p.b.Close()
		p.net.Unlisten("a")
		p.net.Unlisten("b")
		p.net.Wait()
	})
}

// holdB makes b's handler wait until the returned release is called (at
// the latest when the test ends), holding b's reader.
func (p *pair) holdB() (release func()) {
	block := make(chan struct{})
	p.hb.mu.Lock()
	p.hb.block = block
	p.hb.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			p.hb.mu.Lock()
			if p.hb.block == block {
				p.hb.block = nil
			}
			p.hb.mu.Unlock()
			close(block)
		})
	}
	p.t.Cleanup(release)
	return release
}

// result is what a Call's done saw.
type result struct {
	env *granaryv1.Envelope
	err error
}

// call starts a call and returns the channel its outcome arrives on.
func call(tr *Transport, to, payload string, deadline time.Time) chan result {
	ch := make(chan result, 1)
	tr.Call(to, &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, Payload: []byte(payload)}, deadline, func(env *granaryv1.Envelope, err error) {
		if env != nil {
			env = proto.Clone(env).(*granaryv1.Envelope) // the transport reuses it
		}
		ch <- result{env, err}
	})
	return ch
}

// wait returns the outcome on ch, failing the test after
// defaultTestTimeout.
func wait(t *testing.T, ch chan result) result {
	t.Helper()
	return testwait.Recv(t, ch, defaultTestTimeout, "a call's outcome")
}

func wantCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), contains) {
		t.Fatalf("error = %v, want %v containing %q", err, code, contains)
	}
}

func TestCallRoundTrip(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	const n = 500
	chs := make([]chan result, n)
	for i := range n {
		chs[i] = call(p.a, "b", fmt.Sprint(i), time.Time{})
	}
	for i, ch := range chs {
		r := wait(t, ch)
		if r.err != nil || string(r.env.Payload) != fmt.Sprint(i) || r.env.ActivationSilo != "a" {
			t.Fatalf("call %d = %v, %v; want payload %d from the handler told the caller is a", i, r.env, r.err, i)
		}
	}
	r := wait(t, call(p.b, "a", "fail", time.Time{}))
	if r.err != nil || codes.Code(r.env.Code) != codes.FailedPrecondition {
		t.Fatalf("failing call = %v, %v; want a response with FailedPrecondition", r.env, r.err)
	}
}

func TestOneWayInOrder(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	const n = 300
	for i := range n {
		if err := p.a.Send("b", &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY, Payload: []byte(fmt.Sprint(i))}, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		select {
		case got := <-p.hb.got:
			if want := "a:" + fmt.Sprint(i); got != want {
				t.Fatalf("one-way %d arrived as %q, want %q", i, got, want)
			}
		case <-time.After(defaultTestTimeout):
			t.Fatalf("one-way %d never arrived", i)
		}
	}
}

func TestOversizeRefused(t *testing.T) {
	t.Parallel()
	p := newPair(t, func(c *Config) { c.MaxMessageSize = 4096 })
	r := wait(t, call(p.a, "b", strings.Repeat("x", 5000), time.Time{}))
	wantCode(t, r.err, codes.ResourceExhausted, "limit of 4096 bytes (MaxMessageSize)")
	err := p.a.Send("b", &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY, Payload: make([]byte, 5000)}, time.Time{})
	wantCode(t, err, codes.ResourceExhausted, "MaxMessageSize")
	// The stream is still good.
	if r := wait(t, call(p.a, "b", "ok", time.Time{})); r.err != nil {
		t.Fatalf("call after a refused one: %v", r.err)
	}
}

func TestUnknownPeer(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	r := wait(t, call(p.a, "nobody", "x", time.Time{}))
	wantCode(t, r.err, codes.Unavailable, "no route to silo nobody")
}

func TestRemovePeerFailsPendingAtOnce(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	release := p.holdB()
	ch := call(p.a, "b", "stuck", time.Time{})
	p.a.RemovePeer("b", "membership declared it dead", false)
	r := wait(t, ch)
	wantCode(t, r.err, codes.Unavailable, "membership declared it dead")
	release()
	r = wait(t, call(p.a, "b", "after", time.Time{}))
	wantCode(t, r.err, codes.Unavailable, "no route to silo b")
}

func TestBrokenStreamFailsPendingAndRedials(t *testing.T) {
	t.Parallel()
	p := newPair(t, func(c *Config) { c.RedialBackoff = 0 })
	if r := wait(t, call(p.a, "b", "warm", time.Time{})); r.err != nil {
		t.Fatal(r.err)
	}
	release := p.holdB()
	ch := call(p.a, "b", "in flight", time.Time{})
	p.net.Partition([]string{"a"}, []string{"b"})
	r := wait(t, ch)
	wantCode(t, r.err, codes.Unavailable, "silo b")
	release()
	r = wait(t, call(p.a, "b", "cut", time.Time{}))
	wantCode(t, r.err, codes.Unavailable, "cannot reach silo b")
	p.net.Heal()
	if r := wait(t, call(p.a, "b", "healed", time.Time{})); r.err != nil || string(r.env.Payload) != "healed" {
		t.Fatalf("call after heal = %v, %v", r.env, r.err)
	}
}

func TestRedialBackoffRefusesAtOnce(t *testing.T) {
	t.Parallel()
	p := newPair(t, func(c *Config) { c.RedialBackoff = time.Minute })
	p.net.Down("b", true)
	r := wait(t, call(p.a, "b", "x", time.Time{}))
	wantCode(t, r.err, codes.Unavailable, "cannot reach silo b")
	p.net.Down("b", false)
	r = wait(t, call(p.a, "b", "x", time.Time{}))
	wantCode(t, r.err, codes.Unavailable, "cannot reach silo b") // within the backoff: no new dial
	p.clock.Advance(2 * time.Minute)
	if r := wait(t, call(p.a, "b", "x", time.Time{})); r.err != nil {
		t.Fatalf("call after the backoff: %v", r.err)
	}
}

// holdDialFailure holds the writer of the first stream tr dials whose
// dial fails, inside fail: callers can see the failure, and the stream
// is not yet detached from its peer. held closes once the writer is
// there; resume lets it go on (at the latest when the test ends). Call
// it before tr dials anything.
func holdDialFailure(t *testing.T, tr *Transport) (held <-chan struct{}, resume func()) {
	t.Helper()
	heldc, resumec := make(chan struct{}), make(chan struct{})
	var first, resumed sync.Once
	tr.failHook = func(ep *endpoint) {
		if !ep.dialed || !NotSent(ep.failure()) {
			return
		}
		hold := false
		first.Do(func() {
			hold = true
			close(heldc)
		})
		if hold {
			<-resumec
		}
	}
	resume = func() { resumed.Do(func() { close(resumec) }) }
	t.Cleanup(resume) // before newPair's close, which fails every stream
	return heldc, resume
}

// TestCallAfterReportedDialFailureDialsAgain: a call made after a caller
// was told that a dial failed, and after the link healed, dials a new
// stream, even while the failed stream's writer has yet to detach it
// from the peer; it is not failed with the old dial's error.
func TestCallAfterReportedDialFailureDialsAgain(t *testing.T) {
	t.Parallel()
	p := newPair(t, func(c *Config) { c.RedialBackoff = 0 })
	held, resume := holdDialFailure(t, p.a)
	p.net.Partition([]string{"a"}, []string{"b"})
	first := call(p.a, "b", "first", time.Time{})
	testwait.Recv(t, held, defaultTestTimeout, "the writer of the failed dial to fail its stream")
	r := wait(t, call(p.a, "b", "cut", time.Time{}))
	wantCode(t, r.err, codes.Unavailable, "cannot reach silo b")
	p.net.Heal()
	if r := wait(t, call(p.a, "b", "healed", time.Time{})); r.err != nil || string(r.env.Payload) != "healed" {
		t.Fatalf("call after heal = %v, %v; want its answer over a new stream", r.env, r.err)
	}
	resume()
	wantCode(t, wait(t, first).err, codes.Unavailable, "cannot reach silo b")
}

// TestRedialBackoffTimedFromTheFailedDial: RedialBackoff is in force as
// soon as a caller can learn that a dial failed, and it ends
// RedialBackoff after that dial, however late the failed stream's writer
// finishes tearing it down.
func TestRedialBackoffTimedFromTheFailedDial(t *testing.T) {
	t.Parallel()
	p := newPair(t, func(c *Config) { c.RedialBackoff = time.Minute })
	held, resume := holdDialFailure(t, p.a)
	p.net.Down("b", true)
	first := call(p.a, "b", "first", time.Time{})
	testwait.Recv(t, held, defaultTestTimeout, "the writer of the failed dial to fail its stream")
	p.net.Down("b", false)
	r := wait(t, call(p.a, "b", "within the backoff", time.Time{}))
	wantCode(t, r.err, codes.Unavailable, "cannot reach silo b")
	if !NotSent(r.err) {
		t.Fatalf("a call refused by the backoff = %v, want a NotSentError", r.err)
	}
	p.clock.Advance(2 * time.Minute)
	if r := wait(t, call(p.a, "b", "after the backoff", time.Time{})); r.err != nil {
		t.Fatalf("call after the backoff, with the failed stream not yet torn down: %v", r.err)
	}
	resume()
	wantCode(t, wait(t, first).err, codes.Unavailable, "cannot reach silo b")
}

func TestBackpressureBoundedByDeadline(t *testing.T) {
	t.Parallel()
	p := newPair(t, func(c *Config) { c.SendQueueBytes, c.MaxMessageSize, c.MaxBatchBytes = 8192, 4096, 4096 })
	release := p.holdB()
	// Hold b's reader: the in-memory stream buffers 64 frames, then the
	// writer blocks and the queue fills, and a call waits for room until
	// its deadline.
	payload := strings.Repeat("y", 3000)
	deadline := p.clock.Now().Add(time.Second)
	type started struct {
		i  int
		ch chan result
	}
	startc := make(chan started, 256)
	go func() {
		defer close(startc)
		for i := range 200 {
			ch := call(p.a, "b", payload, deadline)
			startc <- started{i, ch}
			select {
			case r := <-ch:
				ch <- r // put it back for the test to read
				if r.err != nil {
					return
				}
			default:
			}
		}
	}()
	// Two sweeper tickers and the waiting call's timer.
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := p.clock.BlockUntilContext(ctx, 3); err != nil {
		t.Fatal("no call waited for room in the send queue:", err)
	}
	p.clock.Advance(2 * time.Second)
	var chs []chan result
	for s := range startc {
		chs = append(chs, s.ch)
	}
	last := wait(t, chs[len(chs)-1])
	wantCode(t, last.err, codes.ResourceExhausted, "SendQueueBytes")
	release()
	for i, ch := range chs[:len(chs)-1] {
		if r := wait(t, ch); r.err != nil {
			t.Fatalf("queued call %d: %v", i, r.err)
		}
	}
}

func TestLostResponseSwept(t *testing.T) {
	t.Parallel()
	p := newPair(t, func(c *Config) { c.ResponseGrace = time.Second })
	release := p.holdB()
	defer release()
	ch := call(p.a, "b", "never answered", p.clock.Now().Add(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := p.clock.BlockUntilContext(ctx, 2); err != nil { // a's and b's sweep tickers
		t.Fatal(err)
	}
	p.clock.Advance(3 * time.Second) // past the deadline and ResponseGrace
	wantCode(t, wait(t, ch).err, codes.DeadlineExceeded, "no response from silo b")
}

// rawConn dials b directly, for tests that speak the wire themselves.
func rawConn(t *testing.T, p *pair, hello *granaryv1.Envelope) Conn {
	t.Helper()
	c, err := p.net.From("x").Dial(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if hello != nil {
		bp, _, err := encodeEnvelope(hello)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Send(*bp); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// recvWithin receives a frame on c, failing the test after
// defaultTestTimeout; then it closes c, which ends the receive.
func recvWithin(t *testing.T, c Conn) ([]byte, error) {
	t.Helper()
	type res struct {
		b   []byte
		err error
	}
	ch := make(chan res, 1)
	go func() { b, err := c.Recv(); ch <- res{b, err} }()
	received := false
	defer func() {
		if !received {
			c.Close()
		}
	}()
	r := testwait.Recv(t, ch, defaultTestTimeout, "a frame")
	received = true
	return r.b, r.err
}

func helloOf(cluster string) *granaryv1.Envelope {
	return &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_HELLO, Hello: &granaryv1.Hello{ClusterId: cluster, Silo: "x"}}
}

func TestMalformedEnvelopeAnswered(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	c := rawConn(t, p, helloOf("test"))
	// An envelope whose kind and call ID read, but whose payload field
	// claims more bytes than there are.
	var env []byte
	env = protowire.AppendTag(env, 1, protowire.VarintType)
	env = protowire.AppendVarint(env, uint64(granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST))
	env = protowire.AppendTag(env, 2, protowire.VarintType)
	env = protowire.AppendVarint(env, 77)
	env = protowire.AppendTag(env, 14, protowire.BytesType) // message: a string field
	env = protowire.AppendBytes(env, []byte{0xff, 0xfe})    // not UTF-8
	var frame []byte
	frame = protowire.AppendTag(frame, 1, protowire.BytesType)
	frame = protowire.AppendBytes(frame, env)
	if err := c.Send(frame); err != nil {
		t.Fatal(err)
	}
	b, err := recvWithin(t, c)
	if err != nil {
		t.Fatal(err)
	}
	var got []*granaryv1.Envelope
	if err := splitFrame(b, func(eb []byte) {
		e := new(granaryv1.Envelope)
		if err := unmarshalEnvelope(eb, e); err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].CallId != 77 || codes.Code(got[0].Code) != codes.InvalidArgument || !strings.Contains(got[0].Message, "malformed envelope") {
		t.Fatalf("answer to a malformed envelope = %v, want InvalidArgument for call 77", got)
	}
	// A frame that is garbage is dropped and logged; the stream lives on.
	if err := c.Send([]byte{0x0a, 0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	good, _, _ := encodeEnvelope(&granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, CallId: 78, Payload: []byte("still here")})
	if err := c.Send(*good); err != nil {
		t.Fatal(err)
	}
	b, err = recvWithin(t, c)
	if err != nil || !strings.Contains(string(b), "still here") {
		t.Fatalf("after a garbage frame the stream answered %q, %v", b, err)
	}
	if p.logs.FilterMessage("malformed frame").FilterFieldKey("error").Len() != 2 ||
		p.logs.FilterMessageSnippet("malformed").Filter(func(e observer.LoggedEntry) bool {
			return strings.Contains(e.ContextMap()["error"].(string), "dropped the rest of a 4-byte frame")
		}).Len() != 1 {
		t.Fatalf("logs = %v, want one malformed frame and one malformed envelope", p.logs.All())
	}
}

func TestStreamOfAnotherClusterRefused(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	c := rawConn(t, p, helloOf("other"))
	if _, err := recvWithin(t, c); err == nil {
		t.Fatal("a stream from another cluster stayed open")
	}
	if p.logs.FilterMessage("refused a stream from another cluster").Len() != 1 {
		t.Fatalf("logs = %v", p.logs.All())
	}
	c2 := rawConn(t, p, &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, CallId: 1})
	if _, err := recvWithin(t, c2); err == nil {
		t.Fatal("a stream without a hello stayed open")
	}
}

func TestCloseFailsPendingAndWaits(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	release := p.holdB()
	ch := call(p.a, "b", "x", time.Time{})
	p.a.Close()
	r := wait(t, ch)
	wantCode(t, r.err, codes.Unavailable, "closed")
	if !strings.Contains(r.err.Error(), ErrClosed.Error()) {
		t.Fatalf("error %v does not name ErrClosed", r.err)
	}
	release()
	r = wait(t, call(p.a, "b", "x", time.Time{}))
	wantCode(t, r.err, codes.Unavailable, "closed")
	p.a.Close() // idempotent
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field string
		tweak func(*Config)
	}{
		{"ClusterID", func(c *Config) { c.ClusterID = "" }},
		{"Self", func(c *Config) { c.Self = "" }},
		{"MaxMessageSize", func(c *Config) { c.MaxMessageSize = 10 }},
		{"MaxBatchBytes", func(c *Config) { c.MaxBatchBytes = 0 }},
		{"SendQueueBytes", func(c *Config) { c.SendQueueBytes = 1 << 10 }},
		{"DialTimeout", func(c *Config) { c.DialTimeout = 0 }},
		{"RedialBackoff", func(c *Config) { c.RedialBackoff = -1 }},
		{"ResponseGrace", func(c *Config) { c.ResponseGrace = -1 }},
		{"SweepInterval", func(c *Config) { c.SweepInterval = 0 }},
	} {
		cfg := DefaultConfig()
		cfg.ClusterID, cfg.Self = "c", "s"
		tc.tweak(&cfg)
		_, err := New(cfg, NewMemNetwork().From("s"), newEcho())
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.HasPrefix(err.Error(), "transport: config: "+tc.field) {
			t.Errorf("%s: New = %v, want a ConfigError naming it", tc.field, err)
		}
	}
}

func TestGracefulRemovalAnswersPending(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	release := p.holdB()
	ch := call(p.a, "b", "in flight", time.Time{})
	p.a.RemovePeer("b", "left", true)
	r := wait(t, call(p.a, "b", "new", time.Time{}))
	if !NotSent(r.err) {
		t.Fatalf("a call to a peer that left = %v, want a NotSentError", r.err)
	}
	release()
	if r := wait(t, ch); r.err != nil || string(r.env.Payload) != "in flight" {
		t.Fatalf("the call in flight when its peer left = %v, %v; want its answer", r.env, r.err)
	}
}

// TestCallAfterGoAwayAnswerIsNotSent: a call that took the endpoint
// before its reader answered the peer's GO_AWAY, and reaches the
// endpoint after the answer went out, fails at once with a NotSentError,
// so the silo routes it elsewhere. Once the answer is queued the stream
// takes no request or one-way send: the writer half-closes it after the
// answer and returns, and the peer has stopped counting requests.
//
// The interleaving: Transport.Call runs endpointFor (the peer is not
// leaving yet, so the endpoint is returned), then the reader delivers
// the peer's GO_AWAY: the peer is marked leaving, the answer queued, the
// stream marked finished, and the writer sends the answer, half-closes
// and returns. Only then does the caller's ep.call run.
func TestCallAfterGoAwayAnswerIsNotSent(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	// The caller's Call has the endpoint...
	ep := p.warmEndpoint()
	// ...when b goes away and a answers.
	if err := p.b.GoAway(testwait.Context(t, defaultTestTimeout)); err != nil {
		t.Fatal(err)
	}
	ep.mu.Lock()
	mc := ep.conn.(*memConn)
	ep.mu.Unlock()
	testwait.Recv(t, mc.out.eof, defaultTestTimeout, "a's writer to half-close the stream after answering the go-away")
	ch := make(chan result, 1)
	ep.call(&granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, Payload: []byte("late")}, time.Time{},
		func(env *granaryv1.Envelope, err error) { ch <- result{env, err} })
	if r := testwait.Recv(t, ch, defaultTestTimeout, "the outcome of a call queued after the go-away answer"); r.err != nil && !NotSent(r.err) {
		t.Fatalf("a call that never left got %v, want a NotSentError so the silo routes it elsewhere", r.err)
	}
}

func TestGoAway(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	if r := wait(t, call(p.a, "b", "warm", time.Time{})); r.err != nil {
		t.Fatal(r.err)
	}
	release := p.holdB()
	inFlight := call(p.a, "b", "in flight", time.Time{})
	done := make(chan error, 1)
	go func() { done <- p.b.GoAway(context.Background()) }()
	release() // b's reader reads the request, then a's answer to the go-away
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("GoAway did not return once the dialling silo answered")
	}
	if r := wait(t, inFlight); r.err != nil || string(r.env.Payload) != "in flight" {
		t.Fatalf("the call in flight at the go-away = %v, %v; want its answer", r.env, r.err)
	}
	r := wait(t, call(p.a, "b", "after", time.Time{}))
	if !NotSent(r.err) || !strings.Contains(r.err.Error(), "shutting down") {
		t.Fatalf("a call after the go-away = %v, want a NotSentError saying b is shutting down", r.err)
	}
}

func TestShutdownWritesWhatIsQueued(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	const n = 2000
	for i := range n {
		if err := p.a.Send("b", &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY, Payload: []byte(fmt.Sprint(i))}, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := p.a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		select {
		case <-p.hb.got:
		case <-time.After(defaultTestTimeout):
			t.Fatalf("%d of %d one-way envelopes queued before Shutdown arrived", i, n)
		}
	}
}

func TestRemovePeerFailsStreamToldToGoAway(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	ep := p.warmEndpoint()
	release := p.holdB()
	inFlight := call(p.a, "b", "in flight", time.Time{})
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	goAway := make(chan error, 1)
	go func() { goAway <- p.b.GoAway(ctx) }()
	ep.mu.Lock()
	mc := ep.conn.(*memConn)
	ep.mu.Unlock()
	select {
	case <-mc.out.eof: // a answered the go-away: the stream is detached from b
	case <-time.After(defaultTestTimeout):
		t.Fatal("a did not answer b's go-away")
	}
	// b is then declared failed: the call it will never answer fails at
	// once, not after its deadline.
	p.a.RemovePeer("b", "membership declared it dead", false)
	r := wait(t, inFlight)
	wantCode(t, r.err, codes.Unavailable, "membership declared it dead")
	release()
	if err := <-goAway; err != nil {
		t.Fatal(err)
	}
}

// forgetLog is a Network that reports what it is told to forget.
type forgetLog struct {
	Network
	forgot chan string
}

func (f forgetLog) Forget(addr string) {
	f.forgot <- addr
	f.Network.Forget(addr)
}

func TestForgetOnlyUnusedAddresses(t *testing.T) {
	t.Parallel()
	n := NewMemNetwork()
	mk := func(self string, net Network) *Transport {
		cfg := DefaultConfig()
		cfg.ClusterID, cfg.Self = "test", self
		tr, err := New(cfg, net, newEcho())
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	b := mk("b", n.From("b"))
	n.Listen("b", b)
	fl := forgetLog{Network: n.From("a"), forgot: make(chan string, 16)}
	a := mk("a", fl)
	defer func() {
		a.Close()
		b.Close()
		n.Unlisten("b")
		n.Wait()
	}()
	for _, step := range []struct {
		what string
		do   func()
		want string // the address forgotten, if any
	}{
		{"b listens at b", func() { a.SetPeer("b", "b") }, ""},
		{"a stream to b", func() { wait(t, call(a, "b", "x", time.Time{})) }, ""},
		{"b's new incarnation b2 at b", func() { a.SetPeer("b2", "b") }, ""},
		{"a stream to b2", func() { wait(t, call(a, "b2", "x", time.Time{})) }, ""},
		{"b fails: b2 still uses the address", func() { a.RemovePeer("b", "failed", false) }, ""},
		{"b2 leaves: its stream stays", func() { a.RemovePeer("b2", "left", true) }, ""},
		{"b2's stream ends", func() { n.Unlisten("b") }, "b"},
		{"c at b", func() { n.Listen("b", b); a.SetPeer("c", "b") }, ""},
		{"c moves to c2", func() { a.SetPeer("c", "c2") }, "b"},
		{"c fails, with no stream", func() { a.RemovePeer("c", "failed", false) }, "c2"},
	} {
		step.do()
		if step.want != "" {
			select {
			case got := <-fl.forgot:
				if got != step.want {
					t.Fatalf("%s: forgot %q, want %q", step.what, got, step.want)
				}
			case <-time.After(defaultTestTimeout):
				t.Fatalf("%s: forgot nothing, want %q", step.what, step.want)
			}
		}
		select {
		case got := <-fl.forgot:
			t.Fatalf("%s: forgot %q, want nothing more", step.what, got)
		default:
		}
	}
}

// TestSpareFramesKeptForABurstAndTrimmedAfter: the writer keeps up to
// burstSpares sent frames for reuse while a burst lasts and idleSpares
// once it is sent, and a frame begun behind queued ones is made at full
// size rather than grown to it.
func TestSpareFramesKeptForABurstAndTrimmedAfter(t *testing.T) {
	t.Parallel()
	p := newPair(t, func(c *Config) { c.MaxBatchBytes = 8192 })
	ep := &endpoint{t: p.a} // no writer: the test plays it
	ep.mu.Lock()
	if b := ep.newBufLocked(); cap(b) >= 8192 {
		t.Errorf("a frame begun with none queued has room for %d bytes, want less than MaxBatchBytes", cap(b))
	}
	ep.frames = append(ep.frames, make([]byte, 8000))
	if b := ep.newBufLocked(); cap(b) != 8192 {
		t.Errorf("a frame begun behind a queued one has room for %d bytes, want MaxBatchBytes (8192)", cap(b))
	}
	ep.frames = nil
	ep.mu.Unlock()

	sent := make([][]byte, 2*burstSpares)
	for i := range sent {
		sent[i] = make([]byte, 8000, 8192)
	}
	ep.recycle(sent)
	if n := len(ep.spare); n != burstSpares {
		t.Fatalf("%d spare frames kept from a burst of %d, want %d", n, len(sent), burstSpares)
	}
	if out, _ := ep.take(nil, nil); len(out) != 0 {
		t.Fatalf("take found %d frames queued, want none", len(out))
	}
	if n := len(ep.spare); n != idleSpares {
		t.Fatalf("%d spare frames kept after the burst, want %d", n, idleSpares)
	}
	ep.mu.Lock()
	if b := ep.newBufLocked(); cap(b) != 8192 || len(b) != 0 {
		t.Errorf("a spare frame came back with length %d and room %d, want an empty sent frame", len(b), cap(b))
	}
	ep.mu.Unlock()
}
