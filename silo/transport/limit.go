package transport

import (
	"errors"
	"net"
	"sync"

	"github.com/granaryio/granary/security"
)

// LimitListener returns a listener that holds at most n of lis's
// connections open at once. A connection accepted over the cap is closed
// at once and counted by r as a refusal of listener, so a flood of idle
// connections costs a file descriptor for an instant, not for good, and
// the silo says why. Unlike golang.org/x/net/netutil's LimitListener,
// which stops accepting at the cap, it keeps the backlog moving: a peer
// over the cap learns it at once instead of waiting in the kernel's
// queue, and the cap cannot be held by connections that never speak
// beyond the handshake timeout.
func LimitListener(lis net.Listener, n int, r *security.Rejections, listener string) net.Listener {
	return &limitListener{Listener: lis, free: n, r: r, name: listener}
}

type limitListener struct {
	net.Listener
	r    *security.Rejections
	name string

	mu   sync.Mutex
	free int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		ok := l.free > 0
		if ok {
			l.free--
		}
		l.mu.Unlock()
		if ok {
			return &limitConn{Conn: c, l: l}, nil
		}
		l.r.Reject(l.name, security.ReasonConnectionLimit, c.RemoteAddr().String(), errConnectionLimit)
		c.Close()
	}
}

var errConnectionLimit = errors.New("transport: the listener holds its maximum of connections (MaxConnections)")

type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.free++
		c.l.mu.Unlock()
	})
	return err
}
