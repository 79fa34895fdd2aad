package client

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/hashmix"
	"github.com/granaryio/granary/internal/refusal"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A Client calls grains from outside the cluster, through the silos'
// gateways. It is a grain.Caller, so the references the generator makes
// work with it as they do inside a grain:
//
//	c, err := client.Dial(ctx, client.WithGateways("silo-1:30000"))
//	...
//	defer c.Close()
//	bal, err := bankpb.NewAccountRef(c, "alice").Deposit(ctx, &bankpb.DepositRequest{Amount: 5})
//
// The client learns the live gateways from the ones it is given and
// keeps the list fresh. It spreads calls over the gateways by grain, so
// the calls to one grain take one path while the gateways are unchanged,
// and batches the calls to each gateway on one stream. A call that could
// not be sent to a gateway (it is down, unreachable or going away) is
// sent to another one. A call that was sent and then lost with its
// gateway fails with Unavailable and is never sent again: the grain may
// or may not have run it.
//
// A silo that sheds load refuses new calls with ResourceExhausted, which
// asks the caller to wait (a google.rpc.RetryInfo). A call its gateway's
// own silo refused never ran: the client avoids that gateway for the
// delay asked, and offers the call to another gateway that is not marked
// so, within the call's deadline; when none is left, the call fails with
// the refusal. While every gateway is marked so, a new call is not sent
// at all: it fails at once with ResourceExhausted, whose RetryInfo is the
// time left until the first of them may be tried again, so a cluster that
// asked its clients to wait is not kept busy refusing them. A refusal
// from a silo behind the gateway, where the grain lives, reaches the
// caller as it is.
//
// A Client is safe for use by many goroutines. Close it when done.
type Client struct {
	o     options
	log   *zap.Logger
	id    string
	net   *transport.GRPCNetwork
	tport *transport.Transport

	clusterID string

	// gws is the live gateway list, replaced whole on each refresh.
	gws atomic.Pointer[[]*gatewayRef]

	closed atomic.Bool // Close was called

	// timers holds stopped timers, on the client's clock, for
	// synchronous calls' deadlines.
	timers sync.Pool

	mu sync.Mutex
	// departed holds the gateways that said they are going away, until
	// the lists the gateways give stop naming them: a list may be older
	// than the news.
	departed map[string]time.Time
	// observers are the client's observers, by key; nextObserver numbers
	// them.
	observers    map[string]*observer
	nextObserver uint64

	// home is the gateway through which grains reach the observers, once
	// there are any; homing is the gateway being asked to be home, and
	// homingLost says its stream ended meanwhile. homingMu serialises
	// moving home; homeMu guards the three.
	homingMu   sync.Mutex
	homeMu     sync.Mutex
	home       *gatewayRef
	homing     *gatewayRef
	homingLost bool

	refreshNow chan struct{} // capacity 1: ask for the list at once
	// ctx ends at Close, ending the refresher and what it waits on.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// gatewayRef is one gateway as the client sees it.
type gatewayRef struct {
	silo string
	addr string
	hash uint64 // of silo, for rendezvous hashing
	// downUntil, in Unix nanoseconds, is when a gateway that failed to
	// take a call may be tried again first; shedUntil, when one whose
	// silo refused a call because it sheds load asked to be tried again.
	downUntil atomic.Int64
	shedUntil atomic.Int64
}

// marked reports whether g is to be avoided at now, Unix nanoseconds.
func (g *gatewayRef) marked(now int64) bool {
	return g.downUntil.Load() > now || g.shedUntil.Load() > now
}

// Dial connects to a cluster through its gateways: it asks the given
// gateways (WithGateways, WithGatewayDNS) for the cluster's live gateway
// list, in random order until one answers or ctx ends, and returns a
// client that calls through them. Connections to the gateways are made
// when the first call needs them.
func Dial(ctx context.Context, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	tcfg := transport.DefaultConfig()
	tcfg.MaxMessageSize = o.maxMessage
	if tcfg.SendQueueBytes < o.maxMessage {
		tcfg.SendQueueBytes = o.maxMessage
	}
	tcfg.Logger = o.log.Named("transport")
	tcfg.Clock = o.clock
	dial := []grpc.DialOption{grpc.WithKeepaliveParams(o.keepalive)}
	creds, err := o.dialCredentials()
	if err != nil {
		return nil, err
	}
	dial = append(dial, creds...)
	dial = append(dial, o.dialOptions...)
	c := &Client{
		o:          o,
		log:        o.log,
		id:         newClientID(),
		net:        transport.NewGRPCServiceNetwork(transport.GatewayService, tcfg, dial...),
		refreshNow: make(chan struct{}, 1),
		departed:   map[string]time.Time{},
		observers:  map[string]*observer{},
	}
	c.timers.New = func() any {
		t := o.clock.NewTimer(time.Hour)
		t.Stop()
		return t
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	list, err := c.fetchFromSeeds(ctx)
	if err != nil {
		c.cancel()
		c.net.Close()
		return nil, err
	}
	c.clusterID = list.ClusterId
	// A gateway that authenticates binds client IDs to principals: the
	// ID takes the prefix of this client's principal.
	c.id = list.ClientIdPrefix + c.id
	tcfg.ClusterID, tcfg.Self = c.clusterID, c.id
	if c.tport, err = transport.New(tcfg, c.net, c); err != nil {
		c.cancel()
		c.net.Close()
		return nil, fmt.Errorf("client: %w", err)
	}
	c.apply(list)
	c.wg.Add(1)
	go c.refreshLoop()
	c.log.Info("client connected", zap.String("client", c.id), zap.String("cluster", c.clusterID), zap.Int("gateways", len(list.Gateways)))
	return c, nil
}

func newClientID() string {
	var b [8]byte
	if _, err := crand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("client: reading random bytes: %v", err))
	}
	return "client-" + hex.EncodeToString(b[:])
}

// ID returns the client's ID, unique to this Dial: gateways name the
// client by it in their logs.
func (c *Client) ID() string { return c.id }

// Gateways returns the addresses of the gateways the client knows, in
// no particular order.
func (c *Client) Gateways() []string {
	gws := c.gateways()
	out := make([]string, len(gws))
	for i, g := range gws {
		out[i] = g.addr
	}
	return out
}

func (c *Client) gateways() []*gatewayRef {
	if p := c.gws.Load(); p != nil {
		return *p
	}
	return nil
}

// seeds returns the addresses to learn the cluster from: the static ones
// and what the DNS name resolves to now.
func (c *Client) seeds() []string {
	out := slices.Clone(c.o.seeds)
	if c.o.dnsSeed != "" {
		host, port, _ := net.SplitHostPort(c.o.dnsSeed)
		addrs, err := c.o.lookupHost(host)
		if err != nil {
			c.log.Warn("resolving the gateway DNS name failed", zap.String("name", host), zap.Error(err))
		}
		for _, a := range addrs {
			out = append(out, net.JoinHostPort(a, port))
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// fetchFromSeeds asks the seeds for the gateway list until one answers.
func (c *Client) fetchFromSeeds(ctx context.Context) (*granaryv1.GatewaysResponse, error) {
	var errs []error
	refusal := codes.OK // the first refusal of the client's credentials
	seeds := c.seeds()
	if len(seeds) == 0 {
		return nil, status.Errorf(codes.Unavailable, "client: the gateway DNS name %s resolves to no address", c.o.dnsSeed)
	}
	for _, addr := range seeds {
		list, err := c.fetch(ctx, addr)
		if !listsAddr(list, addr) {
			c.net.Forget(addr) // a seed, not a gateway the client will use
		}
		if err == nil {
			return list, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		if code := status.Code(err); refusal == codes.OK && (code == codes.Unauthenticated || code == codes.PermissionDenied) {
			refusal = code
		}
		if ctx.Err() != nil {
			break
		}
	}
	if refusal != codes.OK {
		// A gateway answered, and refused the client's credentials:
		// trying again will not help, and Unavailable would say it might.
		return nil, status.Errorf(refusal, "client: a gateway refused the client: %v", errors.Join(errs...))
	}
	return nil, status.Errorf(codes.Unavailable, "client: no gateway answered: %v", errors.Join(errs...))
}

// listsAddr reports whether list names a gateway at addr.
func listsAddr(list *granaryv1.GatewaysResponse, addr string) bool {
	for _, g := range list.GetGateways() {
		if g.GetAddress() == addr {
			return true
		}
	}
	return false
}

// fetchTimeout bounds one request for the gateway list.
const fetchTimeout = 5 * time.Second

// fetch asks the gateway at addr for the gateway list.
func (c *Client) fetch(ctx context.Context, addr string) (*granaryv1.GatewaysResponse, error) {
	cc, err := c.net.ClientConn(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := clockwork.WithTimeout(ctx, c.o.clock, fetchTimeout)
	defer cancel()
	out := new(granaryv1.GatewaysResponse)
	if err := cc.Invoke(ctx, "/"+transport.GatewayService+"/Gateways", new(granaryv1.GatewaysRequest), out); err != nil {
		return nil, err
	}
	switch {
	case out.ClusterId == "":
		return nil, status.Error(codes.Internal, "the gateway named no cluster")
	case c.clusterID != "" && out.ClusterId != c.clusterID:
		return nil, status.Errorf(codes.FailedPrecondition, "the gateway is in cluster %q, not %q", out.ClusterId, c.clusterID)
	case len(out.Gateways) == 0:
		return nil, status.Error(codes.Unavailable, "the gateway lists no live gateway")
	}
	return out, nil
}

// apply makes list the live gateway list: the transport learns the new
// gateways, and forgets the ones gone, which keep their streams until
// they close them, so what they were sent is still answered.
func (c *Client) apply(list *granaryv1.GatewaysResponse) {
	c.mu.Lock()
	old := map[string]*gatewayRef{}
	for _, g := range c.gateways() {
		old[g.silo] = g
	}
	now := c.o.clock.Now()
	for silo, at := range c.departed {
		if now.Sub(at) > departedMemory {
			delete(c.departed, silo)
		}
	}
	next := make([]*gatewayRef, 0, len(list.Gateways))
	for _, pg := range list.Gateways {
		if pg.Silo == "" || pg.Address == "" || !c.departed[pg.Silo].IsZero() {
			continue
		}
		g := old[pg.Silo]
		if g == nil || g.addr != pg.Address {
			g = &gatewayRef{silo: pg.Silo, addr: pg.Address, hash: hashmix.FNV1a(pg.Silo)}
		}
		delete(old, pg.Silo)
		next = append(next, g)
	}
	c.gws.Store(&next)
	c.mu.Unlock()
	// Not under mu: a moved address ends the stream to the old one, and
	// the transport tells StreamsEnded on this goroutine.
	for _, g := range next {
		c.tport.SetPeer(g.silo, g.addr)
	}
	for id := range old {
		c.tport.RemovePeer(id, "no longer a live gateway", true)
	}
}

// departedMemory is how long a gateway that went away is kept off the
// list: a silo's member ID is new each time it starts, so this only
// bounds the memory.
const departedMemory = 10 * time.Minute

// departing takes a gateway that said it is going away off the list.
func (c *Client) departing(g *gatewayRef) {
	c.mu.Lock()
	c.departed[g.silo] = c.o.clock.Now()
	cur := c.gateways()
	next := make([]*gatewayRef, 0, len(cur))
	for _, o := range cur {
		if o != g {
			next = append(next, o)
		}
	}
	c.gws.Store(&next)
	c.mu.Unlock()
	c.askRefresh()
}

// refresh asks the gateways for the live list, the known ones first (in
// random order), then the seeds.
func (c *Client) refresh(ctx context.Context) {
	gws := slices.Clone(c.gateways())
	rand.Shuffle(len(gws), func(i, j int) { gws[i], gws[j] = gws[j], gws[i] })
	now := c.o.clock.Now().UnixNano()
	slices.SortStableFunc(gws, func(a, b *gatewayRef) int {
		return boolInt(a.marked(now)) - boolInt(b.marked(now))
	})
	for _, g := range gws {
		if list, err := c.fetch(ctx, g.addr); err == nil {
			c.apply(list)
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
	list, err := c.fetchFromSeeds(ctx)
	if err != nil {
		c.log.Warn("no gateway gave the gateway list", zap.Error(err))
		return
	}
	c.apply(list)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// refreshLoop keeps the gateway list fresh until Close.
func (c *Client) refreshLoop() {
	defer c.wg.Done()
	tk := c.o.clock.NewTicker(c.o.refresh)
	defer tk.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-tk.Chan():
		case <-c.refreshNow:
		}
		c.refresh(c.ctx)
	}
}

// askRefresh has the refresher ask for the list now.
func (c *Client) askRefresh() {
	select {
	case c.refreshNow <- struct{}{}:
	default:
	}
}

// pick returns the gateway for a call to grain id that is not in tried:
// the highest by rendezvous hash among those not marked down (or
// overloaded), else the highest among those marked, else nil.
func (c *Client) pick(id grain.ID, tried []*gatewayRef) *gatewayRef {
	return c.pickFrom(id, tried, true)
}

// pickUnmarked is pick among the gateways not marked down or overloaded
// only: nil when every one left is marked.
func (c *Client) pickUnmarked(id grain.ID, tried []*gatewayRef) *gatewayRef {
	return c.pickFrom(id, tried, false)
}

func (c *Client) pickFrom(id grain.ID, tried []*gatewayRef, marked bool) *gatewayRef {
	gws := c.gateways()
	if len(gws) == 1 && len(tried) == 0 && marked {
		return gws[0]
	}
	h := id.Hash()
	now := c.o.clock.Now().UnixNano()
	// Of the marked gateways, one that failed may have come back, while
	// one whose silo sheds asked to be left alone: the first go first.
	var best, bestDown, bestShed *gatewayRef
	var score, scoreDown, scoreShed uint64
	for _, g := range gws {
		if slices.Contains(tried, g) {
			continue
		}
		s := hashmix.Mix64(h ^ g.hash)
		switch {
		case g.downUntil.Load() > now:
			if bestDown == nil || s > scoreDown {
				bestDown, scoreDown = g, s
			}
		case g.shedUntil.Load() > now:
			if bestShed == nil || s > scoreShed {
				bestShed, scoreShed = g, s
			}
		case best == nil || s > score:
			best, score = g, s
		}
	}
	switch {
	case best != nil || !marked:
		return best
	case bestDown != nil:
		return bestDown
	}
	return bestShed
}

// markDown has calls avoid g for a while, and the list refreshed.
func (c *Client) markDown(g *gatewayRef) {
	g.downUntil.Store(c.o.clock.Now().Add(c.o.gatewayRetry).UnixNano())
	c.askRefresh()
}

// markOverloaded has calls avoid g, whose silo refused a call because it
// sheds load, for the delay the refusal asked (the client's gateway
// retry when it asked none). A mark that lasts longer already stays. The
// list needs no refresh: the gateway is alive.
func (c *Client) markOverloaded(g *gatewayRef, retry time.Duration) {
	if retry <= 0 {
		retry = c.o.gatewayRetry
	}
	// A gateway asks for a delay; it does not get to take itself out of
	// the client's list for long.
	retry = min(retry, maxOverloadBackoff)
	until := c.o.clock.Now().Add(retry).UnixNano()
	for {
		cur := g.shedUntil.Load()
		if cur >= until || g.shedUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// sheddingEverywhere is the refusal of a call the client does not send
// because g, the gateway pick chose for it, and every other it could go to
// (not in tried) asked it to wait: ResourceExhausted, with the RetryInfo
// of the soonest end of their waits and the ErrorInfo of a refusal by g's
// silo, which the client would have got from it. A caller that retries
// after the delay finds a gateway again; one that does not is told so at
// once, at no cost to the cluster. nil when any of them has no wait
// running: a gateway that is down but never shed is still worth a try.
func (c *Client) sheddingEverywhere(g *gatewayRef, tried []*gatewayRef, id grain.ID, method string) error {
	if g.shedUntil.Load() == 0 {
		return nil // the common case, a gateway that never shed: no clock read
	}
	now := c.o.clock.Now().UnixNano()
	soonest := int64(math.MaxInt64)
	for _, o := range c.gateways() {
		if slices.Contains(tried, o) {
			continue
		}
		until := o.shedUntil.Load()
		if until <= now {
			return nil
		}
		soonest = min(soonest, until)
	}
	left := time.Duration(soonest - now)
	if soonest == math.MaxInt64 || left <= 0 {
		return nil
	}
	return refusal.New(fmt.Sprintf("granary: not sent %s.%s: every gateway's silo is shedding load and asked to be retried later; the soonest in %v",
		id, method, left.Round(time.Millisecond)), left, refusal.Overloaded, g.silo)
}

// maxOverloadBackoff bounds how long a refusal can keep the client from
// a gateway.
const maxOverloadBackoff = time.Minute

// overloadRefusal reports whether err is a silo's refusal of a request
// because it sheds load: the silo, and the delay its RetryInfo asks.
// Such a request never ran.
func overloadRefusal(err error) (silo string, retry time.Duration, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.ResourceExhausted {
		return "", 0, false
	}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetReason() == refusal.Overloaded && d.GetDomain() == refusal.Domain {
				silo, ok = d.GetMetadata()[refusal.SiloKey], true
			}
		case *errdetails.RetryInfo:
			retry = d.GetRetryDelay().AsDuration()
		}
	}
	return silo, retry, ok && silo != ""
}

// Close ends the client: calls in flight fail with Unavailable, its
// observers end (grains calling them get NotFound), and the connections
// to the gateways close. It waits for the observer calls running.
// Idempotent.
func (c *Client) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.cancel()
	c.tport.Close() // no call reaches an observer after it
	c.wg.Wait()
	c.net.Close()
	return nil
}
