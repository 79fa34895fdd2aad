// Package directorytest provides an in-memory network between directories
// for tests, in this package and in any other: every message waits in one
// queue until the test delivers it, so a test decides the order of
// requests and replies, fails them, and crashes silos, without goroutines,
// sockets or sleeps.
package directorytest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/granaryio/granary/directory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Handler serves the requests delivered to one silo; *directory.Directory
// is one.
type Handler interface {
	Handle(from string, req *directory.Request, reply func(*directory.Response, error))
}

// Network queues the requests and replies between silos. Send never calls
// done itself: every outcome, a reply or a failure, is a queued message
// that the test delivers. A request to a silo that is down or unknown
// fails when delivered; a silo that crashes fails the requests it was
// serving; replies to a crashed silo are dropped.
//
// Safe for concurrent use. It calls handlers and done on the goroutine
// that delivers, without its lock held.
type Network struct {
	mu    sync.Mutex
	nodes map[string]Handler // mu
	down  map[string]bool    // mu
	queue []*Message         // mu
	open  map[*call]bool     // mu; calls whose sender has not been answered
	seq   uint64             // mu; calls made
}

// Message is one queued request or reply.
type Message struct {
	From, To string
	Op       directory.Op
	Req      *directory.Request  // a request; nil for a reply
	Resp     *directory.Response // a reply's answer
	Err      error               // a reply's failure
	call     *call
}

// call is one request, from its Send to the delivery of its answer.
type call struct {
	seq       uint64
	from, to  string
	op        directory.Op
	done      func(*directory.Response, error)
	delivered bool // the request reached its handler
	replied   bool // the handler answered, or the network failed the call
}

// IsReply reports whether m answers a request.
func (m *Message) IsReply() bool { return m.Req == nil }

func (m *Message) String() string {
	var b strings.Builder
	if !m.IsReply() {
		fmt.Fprintf(&b, "%s->%s %v", m.From, m.To, m.Op)
		for _, it := range m.Req.Items {
			if m.Op == directory.OpLookup {
				fmt.Fprintf(&b, " %v", it.ID)
			} else {
				fmt.Fprintf(&b, " %v", it)
			}
		}
		if m.Req.Hops > 0 {
			fmt.Fprintf(&b, " hops=%d", m.Req.Hops)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "%s->%s reply %v: ", m.From, m.To, m.Op)
	switch {
	case m.Err != nil:
		b.WriteString(status.Code(m.Err).String())
	case m.Op == directory.OpHandoff:
		fmt.Fprintf(&b, "%d rejected", len(m.Resp.Rejected))
	case m.Resp.Found:
		b.WriteString(m.Resp.Entry.String())
	default:
		b.WriteString("none")
	}
	return b.String()
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{nodes: make(map[string]Handler), down: make(map[string]bool), open: make(map[*call]bool)}
}

// Attach makes h the handler of silo's requests and brings silo up.
func (n *Network) Attach(silo string, h Handler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodes[silo] = h
	delete(n.down, silo)
}

// Sender returns the Sender of silo from.
func (n *Network) Sender(from string) directory.Sender { return sender{n, from} }

type sender struct {
	n    *Network
	from string
}

func (s sender) Send(to string, req *directory.Request, done func(*directory.Response, error)) {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seq++
	c := &call{seq: n.seq, from: s.from, to: to, op: req.Op, done: done}
	n.open[c] = true
	// A copy, as a real transport makes one: neither side may rely on
	// sharing the other's slices.
	r := &directory.Request{Op: req.Op, Items: slices.Clone(req.Items), Hops: req.Hops}
	n.queue = append(n.queue, &Message{From: s.from, To: to, Op: req.Op, Req: r, call: c})
}

// Crash takes silo down: requests it was serving fail with Unavailable,
// requests queued to it fail when delivered, replies to it are dropped,
// and it serves nothing more. Messages it sent before stay queued, as if
// on the wire.
func (n *Network) Crash(silo string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down[silo] = true
	var serving []*call
	for c := range n.open {
		if c.to == silo && c.delivered && !c.replied {
			serving = append(serving, c)
		}
	}
	// In a fixed order, so that runs repeat.
	slices.SortFunc(serving, func(a, b *call) int { return cmp.Compare(a.seq, b.seq) })
	for _, c := range serving {
		n.failLocked(c, "crashed")
	}
}

// Down reports whether silo is down.
func (n *Network) Down(silo string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.down[silo]
}

// failLocked queues a failure as c's answer. mu held.
func (n *Network) failLocked(c *call, why string) {
	c.replied = true
	err := status.Errorf(codes.Unavailable, "directorytest: %v to %s: %s", c.op, c.to, why)
	n.queue = append(n.queue, &Message{From: c.to, To: c.from, Op: c.op, Err: err, call: c})
}

// Len returns how many messages are queued.
func (n *Network) Len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.queue)
}

// Messages returns the queued messages, oldest first. They are the
// network's own: look, do not touch.
func (n *Network) Messages() []*Message {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.queue)
}

// Open returns how many requests of silos that are up have not been
// answered: at quiescence, none, since every done is called once.
func (n *Network) Open() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for c := range n.open {
		if !n.down[c.from] {
			k++
		}
	}
	return k
}

// Deliver delivers the i-th queued message (0 is the oldest) and reports
// whether there was one.
func (n *Network) Deliver(i int) bool {
	n.mu.Lock()
	if i < 0 || i >= len(n.queue) {
		n.mu.Unlock()
		return false
	}
	m := n.queue[i]
	n.queue = slices.Delete(n.queue, i, i+1)
	c := m.call
	if m.IsReply() {
		delete(n.open, c)
		if n.down[c.from] {
			n.mu.Unlock()
			return true // the asker crashed: the answer is lost
		}
		n.mu.Unlock()
		c.done(m.Resp, m.Err)
		return true
	}
	h := n.nodes[m.To]
	if h == nil || n.down[m.To] {
		n.failLocked(c, "is unreachable")
		n.mu.Unlock()
		return true
	}
	c.delivered = true
	n.mu.Unlock()
	h.Handle(m.From, m.Req, func(resp *directory.Response, err error) { n.reply(c, resp, err) })
	return true
}

// reply queues a handler's answer to c.
func (n *Network) reply(c *call, resp *directory.Response, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down[c.to] {
		return // crashed while serving: the network failed the call already
	}
	if c.replied {
		panic(fmt.Sprintf("directorytest: %s answered the %v request from %s twice", c.to, c.op, c.from))
	}
	c.replied = true
	if resp != nil {
		cp := *resp
		cp.Rejected, cp.Winners, cp.Unplaced = slices.Clone(resp.Rejected), slices.Clone(resp.Winners), slices.Clone(resp.Unplaced)
		resp = &cp
	} else if err == nil {
		panic(fmt.Sprintf("directorytest: %s answered the %v request from %s with neither a response nor an error", c.to, c.op, c.from))
	}
	n.queue = append(n.queue, &Message{From: c.to, To: c.from, Op: c.op, Resp: resp, Err: err, call: c})
}

// Fail takes the i-th queued message off the network: a request is not
// delivered, and a reply is lost; either way its asker is answered
// Unavailable, by a message queued last. It reports whether there was
// one.
func (n *Network) Fail(i int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i < 0 || i >= len(n.queue) {
		return false
	}
	m := n.queue[i]
	n.queue = slices.Delete(n.queue, i, i+1)
	why := "lost the request"
	if m.IsReply() {
		why = "lost the reply"
	}
	n.failLocked(m.call, why)
	return true
}

// Index returns the position of the oldest queued message for which match
// is true, or -1.
func (n *Network) Index(match func(*Message) bool) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.IndexFunc(n.queue, match)
}

// DeliverAll delivers the oldest message until none is left, and returns
// how many it delivered. It panics past limit deliveries, which only a
// livelock reaches.
func (n *Network) DeliverAll(limit int) int {
	k := 0
	for n.Deliver(0) {
		if k++; k > limit {
			panic(fmt.Sprintf("directorytest: still delivering after %d messages", limit))
		}
	}
	return k
}
