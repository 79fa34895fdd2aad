package security

import (
	"bytes"
	"errors"
	"net"
	"sync"
)

// ListenerOptions configure Listen.
type ListenerOptions struct {
	// Name is the listener label of the refusals.
	Name string
	// Rejections counts them; nil counts nothing.
	Rejections *Rejections
	// MaxConnections caps the connections held open at once; 0 is no cap.
	MaxConnections int
	// Expect, when set, judges the first bytes a connection sends (at
	// most ExpectBytes of them, fewer when the peer sends fewer first):
	// false counts the connection as a malformed frame, once. The bytes
	// still reach the server, which refuses them in its own way: this
	// only makes the refusal seen.
	Expect func(first []byte) bool
}

// ExpectBytes is how many first bytes Expect sees at most.
const ExpectBytes = 8

// Listen wraps lis so that it holds at most o.MaxConnections connections
// and counts what is refused. A connection accepted over the cap is
// closed at once and counted (ReasonConnectionLimit), so a flood of idle
// connections costs a file descriptor for an instant, not for good.
// Unlike golang.org/x/net/netutil's LimitListener, which stops accepting
// at the cap, it keeps the backlog moving: a peer over the cap learns it
// at once instead of waiting in the kernel's queue behind the flood.
func Listen(lis net.Listener, o ListenerOptions) net.Listener {
	return &listener{Listener: lis, o: o, free: o.MaxConnections}
}

type listener struct {
	net.Listener
	o ListenerOptions

	mu   sync.Mutex
	free int
}

var errConnectionLimit = errors.New("the listener holds its maximum of connections")

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.o.MaxConnections > 0 {
			l.mu.Lock()
			ok := l.free > 0
			if ok {
				l.free--
			}
			l.mu.Unlock()
			if !ok {
				l.o.Rejections.Reject(l.o.Name, ReasonConnectionLimit, c.RemoteAddr().String(), errConnectionLimit)
				c.Close()
				continue
			}
		}
		return &conn{Conn: c, l: l, judged: l.o.Expect == nil}, nil
	}
}

type conn struct {
	net.Conn
	l    *listener
	once sync.Once

	// The reader's: the first bytes read, until judged.
	judged bool
	first  []byte
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.judged && n > 0 {
		c.first = append(c.first, p[:min(n, ExpectBytes-len(c.first))]...)
		if ok := c.l.o.Expect(c.first); !ok || len(c.first) == ExpectBytes {
			c.judged, c.first = true, nil
			if !ok {
				c.l.o.Rejections.Reject(c.l.o.Name, ReasonMalformedFrame, c.RemoteAddr().String(),
					errors.New("the first bytes are neither TLS nor the protocol this port speaks"))
			}
		}
	}
	return n, err
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.l.o.MaxConnections > 0 {
		c.once.Do(func() {
			c.l.mu.Lock()
			c.l.free++
			c.l.mu.Unlock()
		})
	}
	return err
}

// tlsRecord is the start of a TLS handshake record: content type 22 and
// major version 3.
var tlsRecord = []byte{0x16, 0x03}

// http2Preface is what an HTTP/2 client sends first.
var http2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// LooksLikeGRPC reports whether first can begin a TLS handshake or an
// HTTP/2 connection: what a gRPC port, plaintext or TLS, can receive.
func LooksLikeGRPC(first []byte) bool {
	return isPrefix(first, tlsRecord) || isPrefix(first, http2Preface)
}

// LooksLikeHTTP reports whether first can begin a TLS handshake or an
// HTTP/1 request line (an upper-case method and a space) or an HTTP/2
// preface.
func LooksLikeHTTP(first []byte) bool {
	if isPrefix(first, tlsRecord) || isPrefix(first, http2Preface) {
		return true
	}
	for i, b := range first {
		switch {
		case b >= 'A' && b <= 'Z':
		case b == ' ' && i > 0:
			return true
		default:
			return false
		}
	}
	return true
}

// isPrefix reports whether a and b agree on their common length.
func isPrefix(a, b []byte) bool {
	n := min(len(a), len(b))
	return bytes.Equal(a[:n], b[:n])
}
