package membership

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/granaryio/granary/security"
	"github.com/hashicorp/memberlist"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
)

// Config configures a Memberlist. Start from DefaultLANConfig (production)
// or DefaultLocalConfig (tests on loopback), set ClusterID, Name and
// GRPCAddr, and change what you need; New rejects a Config with a field out
// of range and names it.
//
// Failure detection. memberlist probes one member per ProbeInterval,
// round-robin over a shuffled list, so with n members a dead one is probed
// by each of the n-1 others once every n-1 intervals. A probe that gets no
// ack within ProbeTimeout asks others to probe indirectly and waits for
// the rest of the interval; then the member is suspect. It is declared
// dead after the suspicion timeout
//
//	SuspicionMult * max(1, log10(n)) * ProbeInterval
//
// once SuspicionMult-2 other members confirm the suspicion (when n-2 is at
// least that many; otherwise no confirmation is expected). Without those
// confirmations the timeout starts at SuspicionMaxTimeoutMult times that
// and shrinks as they arrive. A member that sees its own probes fail
// (awareness) stretches its probe interval and timeout up to 8 times, so a
// degraded member detects late rather than accusing wrongly. Detection
// takes about
//
//	(n-1)/2 + 1 probe intervals + the suspicion timeout
//
// plus one gossip round to spread the verdict. Times measured with
// BenchmarkFailureDetection are in docs/benchmarks.md#failure-detection.
type Config struct {
	// ClusterID names the cluster. Required; printable, at most 255 bytes.
	// It becomes memberlist's Label, which prefixes every packet and
	// stream, so silos of another cluster sharing the network (or a
	// reused address) are rejected before they are decoded; a hash of it
	// also travels in the metadata, as a second check.
	ClusterID string

	// Name is the silo's human name. Required; printable, at most 128
	// bytes. The member ID adds a generation to it, so names may repeat
	// across restarts.
	Name string

	// BindAddr is the IP the gossip listeners (UDP and TCP) bind to.
	// Default "0.0.0.0".
	BindAddr string
	// BindPort is the gossip port, 0 to 65535. 0 picks a free port, for
	// tests. Default 7946, memberlist's.
	BindPort int

	// AdvertiseAddr is the IP other silos reach this one's gossip at,
	// for NAT or containers. Default "": the address memberlist picks from
	// BindAddr (the first private IP when bound to 0.0.0.0).
	AdvertiseAddr string
	// AdvertisePort is the port advertised with AdvertiseAddr. Default 0:
	// the bound port.
	AdvertisePort int

	// GRPCAddr is where the silo's gRPC server listens for other silos,
	// host:port, gossiped in the metadata. Required.
	GRPCAddr string
	// GatewayAddr is where the silo's gateway listens for external
	// clients, host:port, gossiped in the metadata so that clients learn
	// every gateway from any one. Empty: no gateway.
	GatewayAddr string
	// AdminAddr is where the silo's admin HTTP server listens, host:port,
	// gossiped so that any silo's admin server can reach the others'.
	// Empty: none.
	AdminAddr string

	// Roles and Types (the grain types this silo hosts) are gossiped in
	// the metadata for placement. Each entry non-empty and unique. With
	// Name and GRPCAddr they must encode within memberlist's 512-byte
	// metadata limit (about 450 bytes of type and role names).
	Roles []string
	Types []string

	// Seeds are host:port gossip addresses of silos to join through.
	// Entries that resolve to this silo are skipped. Hostnames are
	// resolved with LookupHost on every attempt.
	Seeds []string

	// SeedDNS is a DNS name (for example a Kubernetes headless service)
	// whose addresses, with SeedPort, are seeds too. It is resolved on
	// every join attempt, so silos starting together find each other.
	SeedDNS string
	// SeedPort is the gossip port of the SeedDNS addresses. Default 0:
	// BindPort.
	SeedPort int

	// LookupHost resolves seed hostnames and SeedDNS. Tests inject a fake.
	// Default: net.DefaultResolver.LookupHost.
	LookupHost func(ctx context.Context, host string) ([]string, error)

	// JoinRetryInterval is how long Start waits between join attempts
	// while no seed answers; Start retries until one does or its context
	// ends. A silo whose seeds are none (or only itself) founds a cluster.
	JoinRetryInterval time.Duration

	// SecretKey, if set, encrypts and authenticates gossip with AES-GCM:
	// 16, 24 or 32 bytes for AES-128, -192 or -256. Every silo of the
	// cluster needs the same key; one without it cannot join.
	SecretKey []byte
	// AcceptedKeys are further keys that gossip is accepted (decrypted)
	// under but never sent with: what lets a cluster change its key by
	// rolling restarts without splitting. Add the new key here on every
	// silo, then make it SecretKey with the old one here, then drop the
	// old one. Each 16, 24 or 32 bytes; needs SecretKey.
	AcceptedKeys [][]byte

	// ProbeInterval is how often a silo probes another. Lower detects
	// failures sooner for more traffic. Must exceed ProbeTimeout.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct probe waits for its ack before
	// asking others to probe indirectly: the 99th percentile of the
	// network's round trip, with margin for a busy silo.
	ProbeTimeout time.Duration
	// SuspicionMult scales the time a suspect has to refute before it is
	// declared dead (formula above). At least 1; 2 expects no
	// confirmations from other members, 3 or more expects SuspicionMult-2.
	SuspicionMult int
	// SuspicionMaxTimeoutMult bounds the suspicion timeout when the
	// expected confirmations do not come: this many times the base
	// timeout. At least 1.
	SuspicionMaxTimeoutMult int

	// GossipInterval is how often a silo gossips queued messages (alive,
	// suspect, dead, metadata updates) to GossipNodes random others.
	// Lower spreads news sooner for more packets.
	GossipInterval time.Duration
	// GossipNodes is how many silos each gossip round reaches. At least 1.
	GossipNodes int
	// RetransmitMult: each message is gossiped RetransmitMult*log10(n+1)
	// times (rounded up), so it reaches every silo despite lost packets.
	// At least 1.
	RetransmitMult int

	// PushPullInterval is how often a silo syncs its whole member list
	// with a random other over TCP, which repairs what gossip lost and
	// merges partitions after they heal. 0 disables it (not advised).
	//
	// It also sets how long a silo keeps gossiping to a member it
	// declared dead (the longer of this and 10 probe intervals), which is
	// how a member wrongly declared dead hears of it and refutes. Sides
	// of a partition that outlasts that window are merged by reconnecting
	// (ReconnectInterval). memberlist stretches the interval itself in
	// clusters of more than 32 silos.
	PushPullInterval time.Duration
	// ReconnectInterval is how often a silo tries to reach again the
	// members it took for failed, for ReconnectTimeout after each
	// failure. It is what merges the two sides of a healed partition:
	// memberlist gossips to a dead member only for a short while, and
	// syncs member lists only with live ones, so once both sides have
	// declared each other dead nothing else brings them together, and
	// they stay split until a silo restarts and joins both. An attempt is
	// a join (a member-list sync over TCP) with the member's gossip
	// address; while one member keeps failing them, its attempts back
	// off, doubling up to 8 times the interval. A silo that was killed
	// fails fast (its port is closed) or answers with a new member ID,
	// which ends the attempts. 0 disables reconnecting (not advised).
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long after a member failed this silo goes
	// on trying to reach it again. A partition that lasts longer does not
	// heal by itself. Must be positive when ReconnectInterval is.
	ReconnectTimeout time.Duration
	// TCPTimeout bounds a stream connection: a join, a push/pull, a TCP
	// fallback probe. A join attempt per seed can take this long, and so
	// can announcing a graceful leave.
	TCPTimeout time.Duration

	// LeavePropagateDelay is how long Leave keeps gossiping after the
	// leave message first went out, so the retransmissions reach every
	// silo and they see EventLeft rather than a failure. Bounded by
	// Leave's context.
	LeavePropagateDelay time.Duration

	// Logger receives this package's logs and memberlist's own, at debug
	// level (memberlist logs expected failures as errors: a dead peer's
	// refused probe, a foreign cluster's packet). Default: a no-op logger.
	Logger *zap.Logger

	// Rejections counts and warns of gossip this silo refuses: packets
	// and streams its SecretKey cannot decrypt, those labelled with
	// another cluster's ID, and those that do not decode; and joins that
	// fail because a seed answers under another key. Default: none
	// (memberlist's lines still reach Logger at debug level).
	Rejections *security.Rejections

	// Transport replaces memberlist's UDP/TCP transport on
	// BindAddr:BindPort, for tests or wrapping. Default nil. Beware
	// memberlist.MockNetwork (v0.7.0): a send to a peer that has shut
	// down blocks forever (unbuffered channels) and its maps are not safe
	// for concurrent use, so a cluster on it cannot shut down without
	// leaking goroutines; use Hub for in-memory tests instead.
	Transport memberlist.Transport

	// Clock drives this package's own timing: the pause between join
	// attempts (JoinRetryInterval), Leave's bound and its
	// LeavePropagateDelay, and reconnecting (ReconnectInterval,
	// ReconnectTimeout and the backoff). memberlist's probes, gossip,
	// syncs and timeouts run on the real clock whatever it is. Tests pass
	// a fake clock and advance it. Default: the real clock.
	Clock clockwork.Clock
}

// DefaultLANConfig returns a configuration for silos on one LAN, tuned so
// that a silo killed without a leave is declared dead within about 2.5
// seconds and the cluster can re-place its grains within 5: probes every
// 500 ms with a 250 ms timeout; a suspicion timeout of 1.5 s
// (SuspicionMult 3: 3 * 500 ms up to 10 silos, then growing with log10 of
// the size), reached once one other silo confirms the suspicion in
// clusters of three or more, and at most 6 s (SuspicionMaxTimeoutMult 4)
// when none does; gossip every 100 ms; a full sync every 2 s. A silo
// whose own probes keep failing (Lifeguard awareness) stretches its probe
// interval and timeout up to 8 times, detecting later rather than
// accusing healthy silos.
//
// The survivors report a failure at nearly the same moment, as the verdict
// is gossiped at once. A real network adds its round trips, and a degraded
// silo its awareness stretch. Times measured on loopback
// (BenchmarkFailureDetection) are in docs/benchmarks.md#failure-detection.
func DefaultLANConfig() Config {
	return Config{
		BindAddr:                "0.0.0.0",
		BindPort:                7946,
		JoinRetryInterval:       time.Second,
		ProbeInterval:           500 * time.Millisecond,
		ProbeTimeout:            250 * time.Millisecond,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 4,
		GossipInterval:          100 * time.Millisecond,
		GossipNodes:             3,
		RetransmitMult:          4,
		PushPullInterval:        2 * time.Second,
		ReconnectInterval:       time.Second,
		ReconnectTimeout:        time.Hour,
		TCPTimeout:              5 * time.Second,
		LeavePropagateDelay:     300 * time.Millisecond,
	}
}

// DefaultWANConfig returns a configuration for silos whose round trips
// take tens to hundreds of milliseconds: DefaultLANConfig with probes,
// gossip and syncs spaced further apart and more confirmations asked
// for. A silo killed without a leave is declared dead in about 15 to
// 20 s (not measured here, where every silo shares one machine).
func DefaultWANConfig() Config {
	c := DefaultLANConfig()
	c.JoinRetryInterval = 2 * time.Second
	c.ProbeInterval = 3 * time.Second
	c.ProbeTimeout = 1500 * time.Millisecond
	c.SuspicionMult = 5
	c.SuspicionMaxTimeoutMult = 6
	c.GossipInterval = 300 * time.Millisecond
	c.GossipNodes = 4
	c.RetransmitMult = 4
	c.PushPullInterval = time.Minute
	c.ReconnectInterval = 5 * time.Second
	c.TCPTimeout = 20 * time.Second
	c.LeavePropagateDelay = time.Second
	return c
}

// DefaultLocalConfig returns a configuration for tests on loopback:
// BindAddr 127.0.0.1, BindPort 0 (a free port), and detection faster
// still (probes every 200 ms with a 100 ms timeout, SuspicionMult 2, so no
// confirmation is awaited: a 400 ms suspicion timeout). Measured as for
// DefaultLANConfig, in docs/benchmarks.md#failure-detection.
func DefaultLocalConfig() Config {
	return Config{
		BindAddr:                "127.0.0.1",
		BindPort:                0,
		JoinRetryInterval:       100 * time.Millisecond,
		ProbeInterval:           200 * time.Millisecond,
		ProbeTimeout:            100 * time.Millisecond,
		SuspicionMult:           2,
		SuspicionMaxTimeoutMult: 4,
		GossipInterval:          50 * time.Millisecond,
		GossipNodes:             3,
		RetransmitMult:          2,
		PushPullInterval:        5 * time.Second,
		ReconnectInterval:       200 * time.Millisecond,
		ReconnectTimeout:        time.Minute,
		TCPTimeout:              time.Second,
		LeavePropagateDelay:     100 * time.Millisecond,
	}
}

// ConfigError names the field of a Config that is out of range.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "membership: config: " + e.Field + ": " + e.Reason }

func (c *Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if err := checkText(c.ClusterID, memberlist.LabelMaxSize); err != "" {
		return bad("ClusterID", "%s", err)
	}
	if err := checkText(c.Name, 128); err != "" {
		return bad("Name", "%s", err)
	}
	if net.ParseIP(c.BindAddr) == nil {
		return bad("BindAddr", "%q is not an IP address", c.BindAddr)
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		return bad("BindPort", "%d is not in [0, 65535]", c.BindPort)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return bad("AdvertiseAddr", "%q is not an IP address", c.AdvertiseAddr)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return bad("AdvertisePort", "%d is not in [0, 65535]", c.AdvertisePort)
	}
	if c.GRPCAddr == "" {
		return bad("GRPCAddr", "must not be empty")
	}
	if err := checkHostPort(c.GRPCAddr); err != "" {
		return bad("GRPCAddr", "%s", err)
	}
	if c.AdminAddr != "" {
		if err := checkHostPort(c.AdminAddr); err != "" {
			return bad("AdminAddr", "%s", err)
		}
	}
	if c.GatewayAddr != "" {
		if err := checkHostPort(c.GatewayAddr); err != "" {
			return bad("GatewayAddr", "%s", err)
		}
	}
	if err := checkNames("Roles", c.Roles); err != nil {
		return err
	}
	if err := checkNames("Types", c.Types); err != nil {
		return err
	}
	for i, s := range c.Seeds {
		if err := checkHostPort(s); err != "" {
			return bad(fmt.Sprintf("Seeds[%d]", i), "%s", err)
		}
	}
	if c.SeedDNS != "" && (strings.ContainsAny(c.SeedDNS, ":/ ") || !utf8.ValidString(c.SeedDNS)) {
		return bad("SeedDNS", "%q is not a DNS name", c.SeedDNS)
	}
	if c.SeedPort < 0 || c.SeedPort > 65535 {
		return bad("SeedPort", "%d is not in [0, 65535]", c.SeedPort)
	}
	if c.SeedDNS != "" && c.SeedPort == 0 && c.BindPort == 0 {
		return bad("SeedPort", "must be set with SeedDNS when BindPort is 0")
	}
	switch n := len(c.SecretKey); n {
	case 0, 16, 24, 32:
	default:
		return bad("SecretKey", "%d bytes: must be 16, 24 or 32 (AES-128, -192, -256)", n)
	}
	if len(c.AcceptedKeys) > 0 && len(c.SecretKey) == 0 {
		return bad("AcceptedKeys", "need SecretKey: a silo that sends gossip in the clear accepts only clear gossip")
	}
	for i, k := range c.AcceptedKeys {
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return bad(fmt.Sprintf("AcceptedKeys[%d]", i), "%d bytes: must be 16, 24 or 32 (AES-128, -192, -256)", n)
		}
	}
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"JoinRetryInterval", c.JoinRetryInterval},
		{"ProbeInterval", c.ProbeInterval},
		{"ProbeTimeout", c.ProbeTimeout},
		{"GossipInterval", c.GossipInterval},
		{"TCPTimeout", c.TCPTimeout},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return bad(p.name, "%v must be positive", p.d)
		}
	}
	switch {
	case c.ProbeTimeout >= c.ProbeInterval:
		return bad("ProbeTimeout", "%v must be less than ProbeInterval %v", c.ProbeTimeout, c.ProbeInterval)
	case c.PushPullInterval < 0:
		return bad("PushPullInterval", "%v must not be negative", c.PushPullInterval)
	case c.ReconnectInterval < 0:
		return bad("ReconnectInterval", "%v must not be negative", c.ReconnectInterval)
	case c.ReconnectInterval > 0 && c.ReconnectTimeout <= 0:
		return bad("ReconnectTimeout", "%v must be positive when ReconnectInterval is set", c.ReconnectTimeout)
	case c.LeavePropagateDelay < 0:
		return bad("LeavePropagateDelay", "%v must not be negative", c.LeavePropagateDelay)
	case c.SuspicionMult < 1:
		return bad("SuspicionMult", "%d must be at least 1", c.SuspicionMult)
	case c.SuspicionMaxTimeoutMult < 1:
		return bad("SuspicionMaxTimeoutMult", "%d must be at least 1", c.SuspicionMaxTimeoutMult)
	case c.GossipNodes < 1:
		return bad("GossipNodes", "%d must be at least 1", c.GossipNodes)
	case c.RetransmitMult < 1:
		return bad("RetransmitMult", "%d must be at least 1", c.RetransmitMult)
	}
	return nil
}

// checkText returns why s is not a non-empty printable string of at most
// max bytes, or "".
func checkText(s string, max int) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > max:
		return fmt.Sprintf("%d bytes, more than %d", len(s), max)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Sprintf("%q has an unprintable character", s)
		}
	}
	return ""
}

// checkHostPort returns why s is not host:port with a non-empty host and
// a port in [1, 65535], or "".
func checkHostPort(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("%q is not host:port: %v", s, err)
	}
	if host == "" {
		return fmt.Sprintf("%q has no host", s)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Sprintf("%q: port %q is not in [1, 65535]", s, port)
	}
	return ""
}

// checkNames checks that each entry of a Roles or Types list is a
// non-empty printable string that appears once.
func checkNames(field string, names []string) error {
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := checkText(n, memberlist.MetaMaxSize); err != "" {
			return &ConfigError{Field: f, Reason: err}
		}
		if seen[n] {
			return &ConfigError{Field: f, Reason: fmt.Sprintf("%q appears twice", n)}
		}
		seen[n] = true
	}
	return nil
}

// memberlistConfig translates c for memberlist.Create. Delegates are set
// by the caller.
func (c *Config) memberlistConfig(id string) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = id
	mc.Label = c.ClusterID
	mc.Transport = c.Transport
	mc.BindAddr = c.BindAddr
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = c.BindPort
	}
	mc.SecretKey = c.SecretKey
	if len(c.AcceptedKeys) > 0 {
		// The primary key encrypts; every key decrypts. validate
		// checked the sizes, the only way NewKeyring fails.
		mc.Keyring, _ = memberlist.NewKeyring(c.AcceptedKeys, c.SecretKey)
	}
	mc.ProbeInterval = c.ProbeInterval
	mc.ProbeTimeout = c.ProbeTimeout
	mc.SuspicionMult = c.SuspicionMult
	mc.SuspicionMaxTimeoutMult = c.SuspicionMaxTimeoutMult
	mc.GossipInterval = c.GossipInterval
	mc.GossipNodes = c.GossipNodes
	mc.RetransmitMult = c.RetransmitMult
	mc.PushPullInterval = c.PushPullInterval
	mc.TCPTimeout = c.TCPTimeout
	// A failed silo's name is never reused (IDs carry a generation), so
	// gossiping to the dead only helps one that was wrongly declared dead
	// refute it; keep that window to a push/pull interval or so.
	mc.GossipToTheDeadTime = max(c.PushPullInterval, 10*c.ProbeInterval)
	return mc
}
