package transport

import (
	"fmt"
	"time"

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
	}
	return nil
}

// maxFrame is the largest frame a writer sends under cfg.
func (c *Config) maxFrame() int {
	return max(c.MaxBatchBytes, c.MaxMessageSize+16)
}
