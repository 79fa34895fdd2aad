package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// MemNetwork runs silo streams in memory, for tests. A test can cut the
// links between silos (Partition), refuse dials to one (Down) and see how
// many streams are up. Frames are copied, as a real network would.
type MemNetwork struct {
	mu        sync.Mutex
	listeners map[string]*Transport
	down      map[string]bool
	cut       map[[2]string]bool
	conns     map[*memConn]bool
	wg        sync.WaitGroup             // Serve goroutines
	served    map[string]*sync.WaitGroup // Serve goroutines by address
}

// NewMemNetwork returns an empty in-memory network.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{
		listeners: map[string]*Transport{},
		down:      map[string]bool{},
		cut:       map[[2]string]bool{},
		conns:     map[*memConn]bool{},
		served:    map[string]*sync.WaitGroup{},
	}
}

// Listen makes t reachable at addr.
func (n *MemNetwork) Listen(addr string, t *Transport) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.listeners[addr] = t
}

// Unlisten makes addr unreachable and closes the streams to it, as a
// silo that stops listening would.
func (n *MemNetwork) Unlisten(addr string) {
	n.mu.Lock()
	delete(n.listeners, addr)
	n.mu.Unlock()
	n.closeWhere(func(c *memConn) bool { return c.to == addr })
}

// Down refuses dials to addr and closes its streams (down true), or lets
// them through again.
func (n *MemNetwork) Down(addr string, down bool) {
	n.mu.Lock()
	n.down[addr] = down
	n.mu.Unlock()
	if down {
		n.closeWhere(func(c *memConn) bool { return c.to == addr || c.from == addr })
	}
}

// Partition cuts the links between every address in a and every address
// in b: their streams close and dials between them fail until Heal.
func (n *MemNetwork) Partition(a, b []string) {
	n.mu.Lock()
	for _, x := range a {
		for _, y := range b {
			n.cut[[2]string{x, y}] = true
			n.cut[[2]string{y, x}] = true
		}
	}
	n.mu.Unlock()
	n.closeWhere(func(c *memConn) bool { return n.cut[[2]string{c.from, c.to}] })
}

// Heal restores every cut link.
func (n *MemNetwork) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = map[[2]string]bool{}
}

// closeWhere closes the streams for which pred, called with mu held, is
// true.
func (n *MemNetwork) closeWhere(pred func(*memConn) bool) {
	n.mu.Lock()
	var cs []*memConn
	for c := range n.conns {
		if pred(c) {
			cs = append(cs, c)
		}
	}
	n.mu.Unlock()
	for _, c := range cs {
		c.abort()
	}
}

// Streams returns the number of open streams.
func (n *MemNetwork) Streams() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.conns) / 2
}

// From returns a Network that dials from addr, so that Partition and
// Down can tell its streams apart.
func (n *MemNetwork) From(addr string) Network { return memDialer{n: n, from: addr} }

// waitFor waits for the Serve calls of the streams to addr.
func (n *MemNetwork) waitFor(addr string) {
	n.mu.Lock()
	wg := n.served[addr]
	n.mu.Unlock()
	if wg != nil {
		wg.Wait()
	}
}

// Wait waits for the Serve calls of every stream, once they are all
// closed.
func (n *MemNetwork) Wait() { n.wg.Wait() }

type memDialer struct {
	n    *MemNetwork
	from string
}

// Dial opens an in-memory stream to the transport listening at addr.
func (d memDialer) Dial(ctx context.Context, addr string) (Conn, error) {
	n := d.n
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	t := n.listeners[addr]
	switch {
	case t == nil:
		n.mu.Unlock()
		return nil, fmt.Errorf("memnet: nothing listens at %s", addr)
	case n.down[addr] || n.down[d.from]:
		n.mu.Unlock()
		return nil, fmt.Errorf("memnet: %s is down", addr)
	case n.cut[[2]string{d.from, addr}]:
		n.mu.Unlock()
		return nil, fmt.Errorf("memnet: %s is cut off from %s", d.from, addr)
	}
	a2b, b2a := newMemPipe(), newMemPipe()
	st := &memStream{aborted: make(chan struct{})}
	client := &memConn{n: n, from: d.from, to: addr, in: b2a, out: a2b, s: st, closed: make(chan struct{})}
	server := &memConn{n: n, from: d.from, to: addr, in: a2b, out: b2a, s: st, closed: make(chan struct{})}
	n.conns[client], n.conns[server] = true, true
	wg := n.served[addr]
	if wg == nil {
		wg = new(sync.WaitGroup)
		n.served[addr] = wg
	}
	n.wg.Add(1)
	wg.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		defer wg.Done()
		t.Serve(server)
		server.Close()
	}()
	return client, nil
}

func (d memDialer) Forget(string) {}

var (
	errMemClosed  = errors.New("memnet: stream closed")
	errMemAborted = errors.New("memnet: stream cut")
)

// memPipe is one direction of an in-memory stream.
type memPipe struct {
	frames chan []byte
	eof    chan struct{} // closed when the sender is done: the reader drains, then sees EOF
	once   sync.Once
}

func newMemPipe() *memPipe { return &memPipe{frames: make(chan []byte, 64), eof: make(chan struct{})} }

func (p *memPipe) finish() { p.once.Do(func() { close(p.eof) }) }

// memStream is what both ends share: a cut drops whatever is in flight,
// as a broken connection would.
type memStream struct {
	aborted chan struct{}
	once    sync.Once
}

func (s *memStream) abort() { s.once.Do(func() { close(s.aborted) }) }

// memConn is one end of an in-memory stream. Close is graceful, as a
// TCP close is: the other end reads what was sent, then EOF. A partition
// or Down aborts the stream: both ends fail and frames in flight are
// lost.
type memConn struct {
	n        *MemNetwork
	from, to string
	in, out  *memPipe
	s        *memStream
	closed   chan struct{} // this end closed
	once     sync.Once
}

func (c *memConn) Send(frame []byte) error {
	b := append([]byte(nil), frame...)
	select {
	case <-c.out.eof:
		return errMemClosed
	case <-c.s.aborted:
		return errMemAborted
	default:
	}
	select {
	case c.out.frames <- b:
		return nil
	case <-c.out.eof:
		return errMemClosed
	case <-c.s.aborted:
		return errMemAborted
	case <-c.closed:
		return errMemClosed
	}
}

func (c *memConn) Recv() ([]byte, error) {
	select {
	case b := <-c.in.frames:
		return b, nil
	case <-c.in.eof:
		select {
		case b := <-c.in.frames:
			return b, nil
		default:
			return nil, io.EOF
		}
	case <-c.s.aborted:
		return nil, errMemAborted
	case <-c.closed:
		return nil, errMemClosed
	}
}

// CloseSend ends this end's sending: the other end reads what was sent,
// then EOF.
func (c *memConn) CloseSend() error {
	c.out.finish()
	return nil
}

func (c *memConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	c.out.finish()
	c.n.mu.Lock()
	delete(c.n.conns, c)
	c.n.mu.Unlock()
	return nil
}

// abort cuts the stream at both ends.
func (c *memConn) abort() {
	c.s.abort()
	c.Close()
}
