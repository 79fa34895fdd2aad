package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
)

// Listeners, the listener label of a rejection.
const (
	ListenerGateway = "gateway" // the gateway clients dial
	ListenerSilo    = "silo"    // the silo-to-silo gRPC server
	ListenerDial    = "silo-dial"
	ListenerGossip  = "gossip" // memberlist's TCP and UDP listeners
	ListenerAdmin   = "admin"  // the admin HTTP server
)

// Reasons, the reason label of a rejection: a closed set, so the metric's
// cardinality stays bounded whatever a peer sends.
const (
	// ReasonTLSHandshake: a TLS handshake failed for another reason than
	// those below (a timeout, an unsupported version, a remote alert).
	ReasonTLSHandshake = "tls_handshake"
	// ReasonHandshakeTimeout: a connection that did not finish its
	// handshake in time.
	ReasonHandshakeTimeout = "handshake_timeout"
	// ReasonUnknownCA: the peer's certificate is not signed by a CA this
	// side trusts.
	ReasonUnknownCA = "unknown_ca"
	// ReasonBadCertificate: the peer's certificate is from a trusted CA
	// but unusable: expired, for another name or another use.
	ReasonBadCertificate = "bad_certificate"
	// ReasonNoClientCert: mutual TLS, and the client sent no certificate.
	ReasonNoClientCert = "no_client_certificate"
	// ReasonPlaintext: bytes that are not TLS reached a TLS listener.
	ReasonPlaintext = "plaintext"
	// ReasonGossipDecrypt: gossip that the cluster's key cannot decrypt.
	ReasonGossipDecrypt = "gossip_decrypt"
	// ReasonGossipCluster: gossip labelled with another cluster's ID.
	ReasonGossipCluster = "gossip_cluster"
	// ReasonMalformedFrame: a stream frame or message that does not
	// decode.
	ReasonMalformedFrame = "malformed_frame"
	// ReasonUnauthenticated: a call without valid credentials.
	ReasonUnauthenticated = "unauthenticated"
	// ReasonPermissionDenied: an authenticated call that a filter
	// refused.
	ReasonPermissionDenied = "permission_denied"
	// ReasonConnectionLimit: a connection over the listener's cap.
	ReasonConnectionLimit = "connection_limit"
)

// DefaultWarnInterval is how often at most a warning is logged for one
// listener and reason.
const DefaultWarnInterval = 10 * time.Second

// MetricName is the name of the counter Rejections exports.
const MetricName = "granary_rejected_total"

// Rejections counts refusals and logs them, rate-limited. Its methods may
// be called from any goroutine; a nil *Rejections counts and logs nothing.
type Rejections struct {
	log      *zap.Logger
	clock    clockwork.Clock
	interval time.Duration

	mu     sync.Mutex
	counts map[rejectKey]*rejectCount
}

type rejectKey struct{ listener, reason string }

type rejectCount struct {
	total      uint64
	lastWarn   time.Time
	suppressed uint64 // refusals since the last warning that went unlogged
}

// NewRejections returns Rejections that warn on log (nil: no logs) at
// most once per listener and reason in DefaultWarnInterval.
func NewRejections(log *zap.Logger) *Rejections {
	return NewRejectionsWithClock(log, clockwork.NewRealClock(), DefaultWarnInterval)
}

// NewRejectionsWithClock is NewRejections with the clock that paces the
// warnings and their interval, for tests.
func NewRejectionsWithClock(log *zap.Logger, clock clockwork.Clock, interval time.Duration) *Rejections {
	if log == nil {
		log = zap.NewNop()
	}
	return &Rejections{log: log, clock: clock, interval: interval, counts: map[rejectKey]*rejectCount{}}
}

// Reject counts one refusal by listener for reason, of remote (an
// address, or "" when unknown), and logs it unless one like it was logged
// within the warn interval. err, when not nil, says what went wrong.
func (r *Rejections) Reject(listener, reason, remote string, err error) {
	if r == nil {
		return
	}
	now := r.clock.Now()
	k := rejectKey{listener, reason}
	r.mu.Lock()
	c := r.counts[k]
	if c == nil {
		c = &rejectCount{}
		r.counts[k] = c
	}
	c.total++
	warn := c.lastWarn.IsZero() || now.Sub(c.lastWarn) >= r.interval
	var suppressed uint64
	if warn {
		suppressed, c.suppressed, c.lastWarn = c.suppressed, 0, now
	} else {
		c.suppressed++
	}
	r.mu.Unlock()
	if !warn {
		return
	}
	fields := []zap.Field{zap.String("listener", listener), zap.String("reason", reason), zap.String("remote", remote)}
	if err != nil {
		fields = append(fields, zap.String("error", err.Error()))
	}
	if suppressed > 0 {
		fields = append(fields, zap.Uint64("unlogged_since_last", suppressed))
	}
	r.log.Warn("refused "+reasonText(reason), fields...)
}

// Count returns how many refusals listener made for reason.
func (r *Rejections) Count(listener, reason string) uint64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.counts[rejectKey{listener, reason}]; c != nil {
		return c.total
	}
	return 0
}

var rejectedDesc = prometheus.NewDesc(MetricName,
	"Connections, handshakes, messages and calls a listener refused, by listener and reason.",
	[]string{"listener", "reason"}, nil)

// Describe implements prometheus.Collector.
func (r *Rejections) Describe(ch chan<- *prometheus.Desc) { ch <- rejectedDesc }

// Collect implements prometheus.Collector: one counter per listener and
// reason that refused something.
func (r *Rejections) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	keys := make([]rejectKey, 0, len(r.counts))
	totals := make(map[rejectKey]uint64, len(r.counts))
	for k, c := range r.counts {
		keys = append(keys, k)
		totals[k] = c.total
	}
	r.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].listener != keys[j].listener {
			return keys[i].listener < keys[j].listener
		}
		return keys[i].reason < keys[j].reason
	})
	for _, k := range keys {
		ch <- prometheus.MustNewConstMetric(rejectedDesc, prometheus.CounterValue, float64(totals[k]), k.listener, k.reason)
	}
}

func reasonText(reason string) string {
	switch reason {
	case ReasonTLSHandshake:
		return "a failed TLS handshake"
	case ReasonHandshakeTimeout:
		return "a connection that did not finish its handshake in time"
	case ReasonUnknownCA:
		return "a certificate from a CA this silo does not trust"
	case ReasonBadCertificate:
		return "an unusable certificate"
	case ReasonNoClientCert:
		return "a client without a certificate (mutual TLS)"
	case ReasonPlaintext:
		return "plaintext on a TLS port"
	case ReasonGossipDecrypt:
		return "gossip that the cluster's key cannot decrypt (another secret key?)"
	case ReasonGossipCluster:
		return "gossip from another cluster"
	case ReasonMalformedFrame:
		return "a malformed frame"
	case ReasonUnauthenticated:
		return "an unauthenticated call"
	case ReasonPermissionDenied:
		return "a call its principal may not make"
	case ReasonConnectionLimit:
		return "a connection over the listener's cap"
	}
	return reason
}

// HandshakeReason classifies the error of a failed TLS handshake as one of
// the Reason constants.
func HandshakeReason(err error) string {
	var rh tls.RecordHeaderError
	var ua x509.UnknownAuthorityError
	var inv x509.CertificateInvalidError
	var host x509.HostnameError
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return ReasonHandshakeTimeout
	case errors.As(err, &rh):
		return ReasonPlaintext
	case errors.As(err, &ua):
		return ReasonUnknownCA
	case errors.As(err, &inv), errors.As(err, &host):
		return ReasonBadCertificate
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "client didn't provide a certificate"),
		strings.Contains(msg, "certificate required"):
		return ReasonNoClientCert
	case strings.Contains(msg, "unknown certificate authority"),
		strings.Contains(msg, "signed by unknown authority"):
		return ReasonUnknownCA
	case strings.Contains(msg, "bad certificate"):
		return ReasonBadCertificate
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return ReasonPlaintext
	}
	return ReasonTLSHandshake
}

// WatchHandshakes wraps creds so that every failed handshake, on either
// side, is counted and logged as a refusal by listener (server side) or
// dialListener (client side). Either name may be "" to leave that side
// uncounted.
func WatchHandshakes(creds credentials.TransportCredentials, r *Rejections, listener, dialListener string) credentials.TransportCredentials {
	return &watchedCreds{TransportCredentials: creds, r: r, listener: listener, dial: dialListener}
}

type watchedCreds struct {
	credentials.TransportCredentials
	r              *Rejections
	listener, dial string
}

func (c *watchedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil && c.listener != "" && !closedErr(err) {
		c.r.Reject(c.listener, HandshakeReason(err), conn.RemoteAddr().String(), err)
	}
	return out, info, err
}

func (c *watchedCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, conn)
	if err != nil && c.dial != "" && ctx.Err() == nil && !closedErr(err) {
		c.r.Reject(c.dial, HandshakeReason(err), conn.RemoteAddr().String(), err)
	}
	return out, info, err
}

func (c *watchedCreds) Clone() credentials.TransportCredentials {
	return &watchedCreds{TransportCredentials: c.TransportCredentials.Clone(), r: c.r, listener: c.listener, dial: c.dial}
}

// closedErr reports a handshake ended because this side closed the
// connection (a stopping server): not a refusal.
func closedErr(err error) bool { return errors.Is(err, net.ErrClosed) }
