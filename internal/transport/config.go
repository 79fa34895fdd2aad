package transport

import (
	"fmt"
	"time"

	"github.com/granaryio/granary/security"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
)

// Config configures a Transport. Start from DefaultConfig.
type Config struct {
	// ClusterID is checked on every incoming stream: a silo of another
	// cluster is refused. Required.
	ClusterID string
	// Self is this silo's member ID, sent in the hello that opens each
	// stream so the other side knows who calls. Required.
	Self string

	// MaxMessageSize is the largest envelope, in bytes, that may be sent;
	// a larger one fails with ResourceExhausted, naming the limit. The
	// receiving gRPC server accepts frames up to MaxMessageSize plus
	// MaxBatchBytes. Default 4 MiB, gRPC's own default.
	MaxMessageSize int
	// MaxBatchBytes bounds how many bytes of envelopes the writer
	// coalesces into one frame (a single larger envelope travels alone).
	// Larger frames amortise more per-message cost; smaller ones cut the
	// latency of the first envelope behind a big burst. Default 256 KiB.
	MaxBatchBytes int
	// SendQueueBytes bounds the bytes queued for one stream and not yet
	// written. A sender that finds the queue full waits until the writer
	// has made room or the envelope's deadline passes: backpressure on
	// the callers instead of unbounded memory. Default 32 MiB.
	SendQueueBytes int

	// DialTimeout bounds opening a stream to a peer. Default 5 s.
	DialTimeout time.Duration
	// RedialBackoff is how long a peer that could not be reached is
	// refused at once, without a new dial, so that a dead peer costs its
	// callers nothing until membership declares it dead. Default 200 ms.
	RedialBackoff time.Duration
	// ResponseGrace is how long past its deadline a call waits for its
	// response before the transport gives up on it and forgets it. The
	// caller's own timeout normally ends the call first; this bounds the
	// memory of calls whose response was lost. Default 5 s.
	ResponseGrace time.Duration
	// SweepInterval is how often calls past their deadline and grace are
	// forgotten. Default 1 s.
	SweepInterval time.Duration

	// HandshakeTimeout bounds how long a new connection to a listener may
	// take to finish its TLS and HTTP/2 handshakes; one that has not by
	// then is closed. Default 10 s.
	HandshakeTimeout time.Duration
	// MaxConnections caps the connections a listener holds at once. A
	// connection over the cap is closed as soon as it is accepted, and
	// counted as a refusal. Default 4096.
	MaxConnections int
	// MaxConnectionIdle closes a connection that has had no stream open
	// for this long: silos and clients hold a stream open while they use
	// a connection, so only abandoned ones are closed. Default 5 min.
	MaxConnectionIdle time.Duration
	// MaxConcurrentStreams caps the streams one connection may open at
	// once: a silo opens one per peer, a client one per gateway, plain
	// gRPC clients one per call in flight. Default 1024.
	MaxConcurrentStreams uint32
	// KeepaliveMinTime is how often at most a peer may ping a connection;
	// one that pings faster is closed (gRPC's keepalive enforcement).
	// Default 10 s, which client.Dial's 20 s pings respect.
	KeepaliveMinTime time.Duration

	// Listener names the listener in the refusals counted by Rejections:
	// security.ListenerSilo or security.ListenerGateway. Default: the
	// silo listener.
	Listener string
	// Rejections counts and logs what the transport refuses: malformed
	// frames, streams without a hello, connections over the cap.
	// Default: none.
	Rejections *security.Rejections

	// Logger receives the transport's logs. Default: a no-op logger.
	Logger *zap.Logger
	// Clock drives deadlines and the sweep. Default: the real clock.
	Clock clockwork.Clock
}

// DefaultConfig returns the defaults described on each field, with the
// required fields empty.
func DefaultConfig() Config {
	return Config{
		MaxMessageSize: 4 << 20,
		MaxBatchBytes:  256 << 10,
		SendQueueBytes: 32 << 20,
		DialTimeout:    5 * time.Second,
		RedialBackoff:  200 * time.Millisecond,
		ResponseGrace:  5 * time.Second,
		SweepInterval:  time.Second,

		HandshakeTimeout:     10 * time.Second,
		MaxConnections:       4096,
		MaxConnectionIdle:    5 * time.Minute,
		MaxConcurrentStreams: 1024,
		KeepaliveMinTime:     10 * time.Second,
	}
}

// ConfigError names the field of a Config that is out of range.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "transport: config: " + e.Field + ": " + e.Reason }

// Validate reports the first field out of range, as New would.
func (c Config) Validate() error { return c.validate() }

func (c *Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.ClusterID == "":
		return bad("ClusterID", "must not be empty")
	case c.Self == "":
		return bad("Self", "must not be empty")
	case c.MaxMessageSize < 1024:
		return bad("MaxMessageSize", "%d must be at least 1024", c.MaxMessageSize)
	case c.MaxBatchBytes < 1024:
		return bad("MaxBatchBytes", "%d must be at least 1024", c.MaxBatchBytes)
	case c.SendQueueBytes < c.MaxMessageSize:
		return bad("SendQueueBytes", "%d must be at least MaxMessageSize (%d), or a largest message could never be queued", c.SendQueueBytes, c.MaxMessageSize)
	case c.DialTimeout <= 0:
		return bad("DialTimeout", "%v must be positive", c.DialTimeout)
	case c.RedialBackoff < 0:
		return bad("RedialBackoff", "%v must not be negative", c.RedialBackoff)
	case c.ResponseGrace < 0:
		return bad("ResponseGrace", "%v must not be negative", c.ResponseGrace)
	case c.SweepInterval <= 0:
		return bad("SweepInterval", "%v must be positive", c.SweepInterval)
	case c.HandshakeTimeout < 0:
		return bad("HandshakeTimeout", "%v must not be negative", c.HandshakeTimeout)
	case c.MaxConnections < 0:
		return bad("MaxConnections", "%d must not be negative", c.MaxConnections)
	case c.MaxConnectionIdle < 0:
		return bad("MaxConnectionIdle", "%v must not be negative", c.MaxConnectionIdle)
	case c.KeepaliveMinTime < 0:
		return bad("KeepaliveMinTime", "%v must not be negative", c.KeepaliveMinTime)
	}
	return nil
}

// listener is the label of the transport's refusals.
func (c *Config) listener() string {
	if c.Listener == "" {
		return security.ListenerSilo
	}
	return c.Listener
}

// maxFrame is the largest frame a writer sends under cfg.
func (c *Config) maxFrame() int {
	return max(c.MaxBatchBytes, c.MaxMessageSize+16)
}
