package host

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/granaryio/granary/silo"
)

// Config is the configuration of a silo host, in the shape of its YAML
// file: each field's yaml tag is its key, and the dotted path of keys
// (cluster.gossip.listen) names it in the environment
// (GRANARY_CLUSTER_GOSSIP_LISTEN), on the command line
// (--cluster.gossip.listen) and in errors. Start from DefaultConfig or
// Load; Validate names every field that is wrong and where its value came
// from.
type Config struct {
	// Name names the silo in logs, in its member ID and in the admin API.
	// Default: the hostname ("silo" if it has none).
	Name string `yaml:"name"`

	Log              LogConfig              `yaml:"log"`
	Shutdown         ShutdownConfig         `yaml:"shutdown"`
	Admin            AdminConfig            `yaml:"admin"`
	Cluster          ClusterConfig          `yaml:"cluster"`
	Gateway          GatewayConfig          `yaml:"gateway"`
	Storage          StorageConfig          `yaml:"storage"`
	Reminders        RemindersConfig        `yaml:"reminders"`
	Streams          StreamsConfig          `yaml:"streams"`
	QueueLimits      QueueLimitsConfig      `yaml:"queue_limits"`
	LoadShedding     LoadSheddingConfig     `yaml:"load_shedding"`
	MemoryCollection MemoryCollectionConfig `yaml:"memory_collection"`
	Tracing          TracingConfig          `yaml:"tracing"`

	// file is the configuration file Load read, "" for none. sources maps
	// the path of each field Load set to where its value came from, such
	// as "env GRANARY_NAME"; a field it lacks has its default or was set
	// in code. Both are read only once Load returns.
	file    string
	sources map[string]string
}

// LogConfig chooses how the host logs, to standard error.
type LogConfig struct {
	// Format is "json" (one object a line, for collectors) or "console"
	// (for people). Default "json".
	Format string `yaml:"format"`
	// Level is the least severe level logged: "debug", "info", "warn" or
	// "error". Default "info".
	Level string `yaml:"level"`
}

// ShutdownConfig bounds the graceful stop.
type ShutdownConfig struct {
	// Timeout is the budget of the graceful stop that SIGTERM, SIGINT or a
	// drain request begins: handing grains over, deactivating them and
	// leaving the cluster. Past it the silo is closed at once and Run
	// returns an error. Keep it below the orchestrator's kill deadline
	// (Kubernetes' terminationGracePeriodSeconds). Default 30 s.
	Timeout time.Duration `yaml:"timeout"`
	// CloseTimeout bounds how long closing the silo, once Timeout has run
	// out, waits for grain turns still running; a turn that outlives it
	// is logged with its stack and abandoned. A stop can therefore take
	// Timeout plus CloseTimeout (and a couple of seconds to flush traces
	// and stop the admin server): keep the orchestrator's kill deadline
	// above the sum. Default 10 s (silo.Config.CloseTimeout).
	CloseTimeout time.Duration `yaml:"close_timeout"`
}

// AdminConfig places the admin HTTP server: health and readiness probes,
// metrics, the admin API and the dashboard.
type AdminConfig struct {
	// Listen is the host:port the server listens on; port 0 picks a free
	// one. "" runs no admin server. Default ":8080".
	Listen string `yaml:"listen"`
	// Advertise is the host:port other silos and granaryctl reach the
	// server at, gossiped to the cluster. Default: the bound address;
	// when it listens on every interface, with the gossip advertise IP
	// (else the gossip listen IP, else this host's IP) for its host.
	Advertise string `yaml:"advertise"`
	// TLS serves the admin server over HTTPS. Mode "tls" with a ca_file
	// lets operators authenticate with a client certificate from that CA
	// while probes and scrapers, which have none, still reach /healthz,
	// /readyz and /metrics; "mtls" requires a certificate of everyone,
	// probes included.
	TLS TLSConfig `yaml:"tls"`
	// TokenFile lists the admin tokens, "TOKEN PRINCIPAL" a line, re-read
	// when it changes. Deactivating and draining need an admin token or
	// an admin client certificate (admin.tls.ca_file); with neither, they
	// are off. With tokens, the dashboard and the cluster API need one
	// too. Default "": none.
	TokenFile string `yaml:"token_file"`
}

// TLSConfig secures a listener with TLS from PEM files, which are re-read
// when they change: a rotation needs no restart.
type TLSConfig struct {
	// Mode is "off" (plaintext), "tls" (the server's certificate; a
	// client certificate from ca_file is verified when one is given) or
	// "mtls" (a client certificate from ca_file is required). Between
	// silos only "off" and "mtls" are accepted. Default "off".
	Mode string `yaml:"mode"`
	// CertFile and KeyFile are this side's certificate chain and private
	// key, PEM. Required unless Mode is off.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// CAFile is the bundle of CA certificates that peers' certificates
	// must chain to, PEM. Required with mtls.
	CAFile string `yaml:"ca_file"`
}

// ClusterConfig makes the silo a member of a cluster.
type ClusterConfig struct {
	// ID names the cluster: silos of other clusters are refused. "" (the
	// default) runs a silo alone, with no gossip and no silo-to-silo
	// traffic.
	ID string `yaml:"id"`
	// Gossip places the membership protocol's listeners (TCP and UDP).
	Gossip GossipConfig `yaml:"gossip"`
	// GRPC places the server that other silos' streams reach.
	GRPC GRPCConfig `yaml:"grpc"`
	// Seeds are gossip addresses (host:port) of silos to join through. A
	// silo whose seeds are none, or only itself, founds the cluster; list
	// every silo on each and they may start in any order.
	Seeds []string `yaml:"seeds"`
	// SeedDNS is a DNS name whose addresses, at the gossip port, are seeds
	// too: a Kubernetes headless service, say. It is resolved on every
	// join attempt.
	SeedDNS string `yaml:"seed_dns"`
	// SecretKey, base64 of 16, 24 or 32 bytes, encrypts and authenticates
	// gossip (AES-128, -192 or -256). Every silo of the cluster needs the
	// same key. Default "": gossip in the clear.
	SecretKey string `yaml:"secret_key"`
	// AcceptedSecretKeys are more keys, base64 each, that gossip is
	// accepted under but never sent with, to change the key by rolling
	// restarts without splitting the cluster: add the new key here on
	// every silo, then make it secret_key with the old one here, then
	// drop the old one. Default: none.
	AcceptedSecretKeys []string `yaml:"accepted_secret_keys"`
	// Profile tunes failure detection: "lan" (a dead silo is noticed in
	// about 2.5 s), "local" (about 1 s, for loopback tests) or "wan"
	// (slower probes and longer timeouts, for links between data
	// centres). Default "lan".
	Profile string `yaml:"profile"`
	// TLS secures the streams between silos (cluster.grpc) with mutual
	// TLS: "off" or "mtls". A silo whose certificate does not chain to
	// ca_file, or is not for both server and client use, can neither send
	// nor receive an envelope. Gossip is secured by secret_key.
	TLS TLSConfig `yaml:"tls"`
}

// GossipConfig places the gossip listeners.
type GossipConfig struct {
	// Listen is the IP:port the listeners bind to; an empty host binds
	// every interface, port 0 picks a free one. Default ":7946".
	Listen string `yaml:"listen"`
	// Advertise is the IP:port other silos gossip with, behind NAT or in
	// a container (port 0: the bound port); the silo's gRPC address takes
	// its host too. Default, when bound to every interface: an IP the
	// hostname resolves to, else the first private IP.
	Advertise string `yaml:"advertise"`
}

// GRPCConfig places the silo-to-silo gRPC server.
type GRPCConfig struct {
	// Listen is the host:port it listens on. Default ":7947".
	Listen string `yaml:"listen"`
}

// GatewayConfig places the gateway that external clients dial.
type GatewayConfig struct {
	// Listen is the host:port the gateway listens on; "" serves no
	// clients. Default ":30000".
	Listen string `yaml:"listen"`
	// Advertise is the host:port clients are told to dial. Default: the
	// bound address, as the silo derives it.
	Advertise string `yaml:"advertise"`
	// TLS secures the gateway: "tls" for server authentication, "mtls" to
	// require client certificates from ca_file (each one's subject then
	// names its caller).
	TLS TLSConfig `yaml:"tls"`
	// Auth authenticates the gateway's callers.
	Auth GatewayAuthConfig `yaml:"auth"`
	// MaxConnections is the most client connections the gateway holds
	// at once; one over it is closed at once and counted in
	// granary_rejected_total. Each Go client holds one per gateway.
	// Default 4096.
	MaxConnections int `yaml:"max_connections"`
}

// GatewayAuthConfig authenticates the gateway's callers. With a token
// file, or with client certificates (gateway.tls.ca_file), a call without
// valid credentials fails with Unauthenticated; the caller's principal
// reaches grains in their Context.
type GatewayAuthConfig struct {
	// TokenFile lists the bearer tokens clients may send, "TOKEN
	// PRINCIPAL" a line, re-read when it changes: a token removed from it
	// is refused within seconds. Default "": no tokens.
	TokenFile string `yaml:"token_file"`
}

// StorageConfig chooses the default storage provider: where grain state
// and reminders are kept.
type StorageConfig struct {
	// Provider is "memory" (lost when the process ends), "embedded" (a
	// file in DataDir; a silo alone only) or "postgres" (shared by the
	// silos of a cluster). Default "": embedded for a silo alone; a
	// cluster must choose.
	Provider string `yaml:"provider"`
	// DataDir is the embedded store's directory, made if missing.
	// Default "./data".
	DataDir string `yaml:"data_dir"`
	// Postgres configures the postgres provider.
	Postgres PostgresConfig `yaml:"postgres"`
}

// PostgresConfig names the PostgreSQL database of the postgres provider.
type PostgresConfig struct {
	// DSN names the database, as a URL
	// (postgres://user:password@host:5432/db?sslmode=disable) or
	// key=value words. Required with the postgres provider. Logs show it
	// without its password.
	DSN string `yaml:"dsn"`
	// ServiceID separates the rows of clusters that share a database.
	// Default: the cluster ID.
	ServiceID string `yaml:"service_id"`
}

// RemindersConfig runs the reminder service.
type RemindersConfig struct {
	// Enabled runs the reminder service, which keeps reminders in the
	// default storage provider. Nil (the default): run it when that
	// provider is persistent (embedded or postgres).
	Enabled *bool `yaml:"enabled"`
	// MinPeriod is the shortest period a reminder may have. 0 (the
	// default) means the silo's default, 1 minute.
	MinPeriod time.Duration `yaml:"min_period"`
}

// StreamsConfig turns on streams (package grain/streams): a memory
// provider, a durable one, or both, under the names grains and clients
// use. See silo.StreamsConfig and silo.StreamProviderConfig.
type StreamsConfig struct {
	// MemoryProvider names a memory provider: cluster-wide, its events in
	// memory only, so it may lose them.
	// Default "": none.
	MemoryProvider string `yaml:"memory_provider"`
	// DurableProvider names a durable provider, whose log is the default
	// storage provider: at least once, rewindable, and what clients
	// follow through the gateway. Default "": none.
	DurableProvider string `yaml:"durable_provider"`
	// Partitions is how many log partitions the durable provider spreads
	// its streams over; fix it for the life of the log. 0: 16.
	Partitions int `yaml:"partitions"`
	// MaxAge and MaxBytes are the durable provider's retention: events
	// older than MaxAge, and the oldest beyond MaxBytes of payload a
	// partition, are dropped. 0: kept for ever.
	MaxAge   time.Duration `yaml:"max_age"`
	MaxBytes uint64        `yaml:"max_bytes"`
}

// QueueLimitsConfig bounds the requests queued at one activation (one
// stateless worker set), from when a request reaches it until its turn
// starts, and how long a request from outside the silo may wait for its
// turn; 0 means no limit. A grain type's own options
// (grain.WithQueueLimits, grain.WithQueueWaitLimit) override them. See
// silo.QueueLimits.
type QueueLimitsConfig struct {
	// Soft: past it the silo logs a warning naming the activation, at
	// most once a minute per type. Default 10000.
	Soft int `yaml:"soft"`
	// Hard: a request that would queue past it is refused with
	// ResourceExhausted and never runs. At least Soft when both are set.
	// Default 50000.
	Hard int `yaml:"hard"`
	// Wait: a request from a client or another silo that waited longer
	// for its turn is refused with ResourceExhausted when the turn comes,
	// and never runs. Default 0: no limit.
	Wait time.Duration `yaml:"wait"`
}

// LoadSheddingConfig makes the gateway and the silo-to-silo receiver
// refuse new requests, with ResourceExhausted and a delay to retry after,
// while the process's CPU use or its Go heap, averaged over Window, is
// over its limit; it stops once both are under Hysteresis times their
// limits. With LatencyLimit, the silo also limits how many new requests
// from outside it runs at once, to keep their latency under that limit.
// See silo.LoadSheddingConfig.
type LoadSheddingConfig struct {
	// Enabled turns load shedding on. Default false.
	Enabled bool `yaml:"enabled"`
	// CPULimit is the process's CPU use, a fraction (0 to 1) of the cores
	// Go may use, above which the silo sheds; 0 does not shed for CPU.
	// Default 0.95.
	CPULimit float64 `yaml:"cpu_limit"`
	// HeapLimit is the Go heap, in bytes, above which the silo sheds; 0
	// does not shed for memory. Default 0.
	HeapLimit uint64 `yaml:"heap_limit"`
	// LatencyLimit is the mean time new requests from clients and other
	// silos may take, from their arrival to the end of their turns. The
	// silo keeps the mean under it by limiting how many such requests run
	// at once, no fewer than MinConcurrency, and refusing the rest; it
	// measures the latency a fifth of a Window at a time. 0: no limit.
	// Default 0.
	LatencyLimit time.Duration `yaml:"latency_limit"`
	// MinConcurrency is the fewest new requests LatencyLimit lets the
	// silo run at once. Default 16.
	MinConcurrency int `yaml:"min_concurrency"`
	// Window is the span the averages cover. Default 5 s.
	Window time.Duration `yaml:"window"`
	// Hysteresis, in (0, 1]: once shedding, the silo stops when every
	// measure is under Hysteresis times its limit. Default 0.9.
	Hysteresis float64 `yaml:"hysteresis"`
	// RetryAfter is the delay a refusal asks the caller to wait. Default
	// 1 s.
	RetryAfter time.Duration `yaml:"retry_after"`
}

// MemoryCollectionConfig collects idle activations, least recently used
// first, while the Go heap is over HeapTarget. See
// silo.MemoryCollectionConfig.
type MemoryCollectionConfig struct {
	// HeapTarget is the Go heap, in bytes, above which the silo collects.
	// Default 0: off.
	HeapTarget uint64 `yaml:"heap_target"`
	// Interval is how often the heap is checked. Default 1 s.
	Interval time.Duration `yaml:"interval"`
	// MaxPerRound bounds the activations one check collects. Default
	// 1000.
	MaxPerRound int `yaml:"max_per_round"`
}

// TracingConfig exports OpenTelemetry traces of grain calls.
type TracingConfig struct {
	// Exporter is "none" (no tracing), "otlp" (OTLP over gRPC to
	// Endpoint) or "stdout" (spans printed as JSON, for debugging).
	// Default "none".
	Exporter string `yaml:"exporter"`
	// Endpoint is the OTLP collector's gRPC host:port, or an http:// or
	// https:// URL of it. Default "localhost:4317".
	Endpoint string `yaml:"endpoint"`
	// Insecure sends OTLP without TLS. Default false.
	Insecure bool `yaml:"insecure"`
	// SampleRatio is the fraction of new traces recorded, 0 to 1; a call
	// that is part of a sampled trace is always recorded. Default 1.
	SampleRatio float64 `yaml:"sample_ratio"`
}

// The values of the enumerated fields.
const (
	providerMemory   = "memory"
	providerEmbedded = "embedded"
	providerPostgres = "postgres"

	tlsOff    = "off"
	tlsOn     = "tls"
	tlsMutual = "mtls"

	exporterNone   = "none"
	exporterOTLP   = "otlp"
	exporterStdout = "stdout"
)

// DefaultConfig returns the configuration described on each field.
func DefaultConfig() Config {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "silo"
	}
	// The overload settings are the silo's own defaults, so that a host
	// that sets none runs as a silo built in code does.
	sd := silo.DefaultConfig()
	return Config{
		Name:     name,
		Log:      LogConfig{Format: "json", Level: "info"},
		Shutdown: ShutdownConfig{Timeout: 30 * time.Second, CloseTimeout: sd.CloseTimeout},
		Admin:    AdminConfig{Listen: ":8080", TLS: TLSConfig{Mode: tlsOff}},
		Cluster: ClusterConfig{
			Gossip:  GossipConfig{Listen: ":7946"},
			GRPC:    GRPCConfig{Listen: ":7947"},
			Profile: "lan",
			TLS:     TLSConfig{Mode: tlsOff},
		},
		Gateway:     GatewayConfig{Listen: ":30000", TLS: TLSConfig{Mode: tlsOff}, MaxConnections: 4096},
		Storage:     StorageConfig{DataDir: "./data"},
		QueueLimits: QueueLimitsConfig{Soft: sd.QueueLimits.Soft, Hard: sd.QueueLimits.Hard, Wait: sd.QueueLimits.Wait},
		LoadShedding: LoadSheddingConfig{
			Enabled:        sd.LoadShedding.Enabled,
			CPULimit:       sd.LoadShedding.CPULimit,
			HeapLimit:      sd.LoadShedding.HeapLimit,
			LatencyLimit:   sd.LoadShedding.LatencyLimit,
			MinConcurrency: sd.LoadShedding.MinConcurrency,
			Window:         sd.LoadShedding.Window,
			Hysteresis:     sd.LoadShedding.Hysteresis,
			RetryAfter:     sd.LoadShedding.RetryAfter,
		},
		MemoryCollection: MemoryCollectionConfig{
			HeapTarget:  sd.MemoryCollection.HeapTarget,
			Interval:    sd.MemoryCollection.Interval,
			MaxPerRound: sd.MemoryCollection.MaxPerRound,
		},
		Tracing: TracingConfig{Exporter: exporterNone, Endpoint: "localhost:4317", SampleRatio: 1},
	}
}

// FieldError is a field whose value is wrong. Its text names the field,
// where the value came from and what is wrong, for example
//
//	config: cluster.gossip.listen (env GRANARY_CLUSTER_GOSSIP_LISTEN): "abc" is not host:port
type FieldError struct {
	// Field is the field's dotted path, or the unknown key or flag.
	Field string
	// Source is where the value came from: "default", "set in code",
	// "file silo.yaml line 7", "env GRANARY_NAME" or "flag --name".
	Source string
	// Reason says what is wrong.
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("config: %s (%s): %s", e.Field, e.Source, e.Reason)
}

// Validate checks every field and returns one FieldError for each that is
// wrong (joined with errors.Join), or nil.
func (c Config) Validate() error {
	v := validator{c: &c}
	v.checkText("name", c.Name, 128, true)
	v.oneOf("log.format", c.Log.Format, "json", "console")
	v.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	if c.Shutdown.Timeout <= 0 {
		v.bad("shutdown.timeout", "%v must be positive", c.Shutdown.Timeout)
	}
	if c.Shutdown.CloseTimeout <= 0 {
		v.bad("shutdown.close_timeout", "%v must be positive", c.Shutdown.CloseTimeout)
	}
	if c.Admin.Listen != "" {
		v.listenAddr("admin.listen", c.Admin.Listen)
	}
	v.dialAddr("admin.advertise", c.Admin.Advertise)
	v.checkTLS("admin.tls", c.Admin.TLS, tlsOff, tlsOn, tlsMutual)
	v.validateCluster()
	if c.Gateway.Listen != "" {
		v.listenAddr("gateway.listen", c.Gateway.Listen)
	}
	v.dialAddr("gateway.advertise", c.Gateway.Advertise)
	v.checkTLS("gateway.tls", c.Gateway.TLS, tlsOff, tlsOn, tlsMutual)
	if c.Gateway.MaxConnections < 1 {
		v.bad("gateway.max_connections", "%d must be at least 1", c.Gateway.MaxConnections)
	}
	if c.Gateway.Auth.TokenFile != "" && c.Gateway.TLS.Mode == tlsOff {
		v.bad("gateway.auth.token_file", "needs gateway.tls.mode tls or mtls: bearer tokens would cross the network in the clear")
	}
	if c.Admin.TokenFile != "" {
		switch {
		case c.Admin.TLS.Mode == tlsOff:
			v.bad("admin.token_file", "needs admin.tls.mode tls or mtls: admin tokens would cross the network in the clear")
		case c.Cluster.ID != "" && c.Admin.TLS.CAFile == "":
			v.bad("admin.token_file", "needs admin.tls.ca_file in a cluster: a silo forwards an admin's token to the other silos' admin servers, whose certificates it verifies against that CA")
		}
	}
	v.validateStorage()
	if c.Reminders.MinPeriod < 0 {
		v.bad("reminders.min_period", "%v must not be negative", c.Reminders.MinPeriod)
	}
	v.validateStreams()
	v.validateOverload()
	v.validateTracing()
	return v.err()
}

func (v *validator) validateCluster() {
	cl := &v.c.Cluster
	v.checkText("cluster.id", cl.ID, 255, false)
	if host, ok := v.listenAddr("cluster.gossip.listen", cl.Gossip.Listen); ok && host != "" && net.ParseIP(host) == nil {
		v.bad("cluster.gossip.listen", "the host of %q is not an IP address (leave it empty to listen on every interface)", cl.Gossip.Listen)
	}
	if a := cl.Gossip.Advertise; a != "" {
		host, port, err := net.SplitHostPort(a)
		switch {
		case err != nil:
			v.bad("cluster.gossip.advertise", "%q is not IP:port", a)
		case net.ParseIP(host) == nil:
			v.bad("cluster.gossip.advertise", "the host of %q is not an IP address", a)
		case parsePort(port) < 0:
			v.bad("cluster.gossip.advertise", "the port of %q is not in [0, 65535]", a)
		}
	}
	v.listenAddr("cluster.grpc.listen", cl.GRPC.Listen)
	for i, s := range cl.Seeds {
		if reason := dialReason(s); reason != "" {
			v.bad("cluster.seeds", "seed %d: %s", i+1, reason)
		}
	}
	if d := cl.SeedDNS; d != "" && (strings.ContainsAny(d, ":/ ") || !utf8.ValidString(d)) {
		v.bad("cluster.seed_dns", "%q is not a DNS name (its port is the gossip port)", d)
	}
	if cl.SecretKey != "" {
		v.gossipKey("cluster.secret_key", "", cl.SecretKey)
	}
	for i, k := range cl.AcceptedSecretKeys {
		v.gossipKey("cluster.accepted_secret_keys", fmt.Sprintf("key %d ", i+1), k)
	}
	if len(cl.AcceptedSecretKeys) > 0 && cl.SecretKey == "" {
		v.bad("cluster.accepted_secret_keys", "needs cluster.secret_key: a silo that gossips in the clear accepts only clear gossip")
	}
	v.oneOf("cluster.profile", cl.Profile, "lan", "local", "wan")
	if cl.ID == "" {
		alone := func(path string) {
			v.bad(path, "is set but cluster.id is empty, which runs a silo alone; set cluster.id to join a cluster")
		}
		if len(cl.Seeds) > 0 {
			alone("cluster.seeds")
		}
		if cl.SeedDNS != "" {
			alone("cluster.seed_dns")
		}
		if cl.Gossip.Advertise != "" {
			alone("cluster.gossip.advertise")
		}
		if cl.SecretKey != "" {
			alone("cluster.secret_key")
		}
		if cl.TLS.Mode != tlsOff || cl.TLS != (TLSConfig{Mode: cl.TLS.Mode}) {
			alone("cluster.tls.mode")
		}
	}
	if cl.TLS.Mode == tlsOn {
		v.bad("cluster.tls.mode", "tls is not a mode between silos: every silo both serves and dials, so use mtls (or off on a network no one else shares)")
	} else {
		v.checkTLS("cluster.tls", cl.TLS, tlsOff, tlsMutual)
	}
}

// gossipKey checks a base64 gossip key. The key is a secret: the error
// describes it without quoting it.
func (v *validator) gossipKey(path, which, key string) {
	raw, err := base64.StdEncoding.DecodeString(key)
	switch {
	case err != nil:
		v.bad(path, "%sis not standard base64 (%d characters)", which, len(key))
	case len(raw) != 16 && len(raw) != 24 && len(raw) != 32:
		v.bad(path, "%sdecodes to %d bytes; want 16, 24 or 32 (AES-128, -192 or -256)", which, len(raw))
	}
}

// checkTLS checks a TLS section: a known mode, and the files that mode
// needs, with none named when it is off (so that a typo in the mode does
// not leave a port in plaintext while its files suggest otherwise).
func (v *validator) checkTLS(path string, t TLSConfig, modes ...string) {
	if !slices.Contains(modes, t.Mode) {
		v.oneOf(path+".mode", t.Mode, modes...)
		return
	}
	if t.Mode == tlsOff {
		for _, f := range []struct{ key, value string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"ca_file", t.CAFile}} {
			if f.value != "" {
				v.bad(path+"."+f.key, "is set but %s.mode is off (%s): set the mode to use it", path, v.source(path+".mode"))
			}
		}
		return
	}
	if t.CertFile == "" {
		v.bad(path+".cert_file", "required with %s.mode %s", path, t.Mode)
	}
	if t.KeyFile == "" {
		v.bad(path+".key_file", "required with %s.mode %s", path, t.Mode)
	}
	if t.Mode == tlsMutual && t.CAFile == "" {
		v.bad(path+".ca_file", "required with %s.mode mtls: the CA that peers' certificates must chain to", path)
	}
}

func (v *validator) validateStorage() {
	st, clustered := &v.c.Storage, v.c.Cluster.ID != ""
	switch st.Provider {
	case "":
		if clustered {
			v.bad("storage.provider", "must be set in a cluster (cluster.id is set): postgres, shared by the cluster's silos, or memory")
		}
	case providerEmbedded:
		if clustered {
			v.bad("storage.provider", "embedded is for a silo alone (cluster.id is set): an activation may move to any silo, so a cluster's silos share postgres")
		}
	case providerMemory, providerPostgres:
	default:
		v.bad("storage.provider", "%q is not one of memory, embedded, postgres", st.Provider)
	}
	if v.c.provider() == providerEmbedded && st.DataDir == "" {
		v.bad("storage.data_dir", "must not be empty with the embedded provider")
	}
	if st.Provider == providerPostgres && st.Postgres.DSN == "" {
		v.bad("storage.postgres.dsn", "required with storage.provider postgres (%s)", v.source("storage.provider"))
	}
	if id := st.Postgres.ServiceID; strings.ContainsRune(id, 0) || !utf8.ValidString(id) {
		v.bad("storage.postgres.service_id", "%q is not UTF-8 text without NUL bytes", id)
	}
}

// validateOverload checks the queue limits, load shedding and memory
// collection by the rules silo.New applies, so that a bad value is a
// configuration error naming the setting rather than a failure to make
// the silo. The ranges are checked even while a feature is off: a value
// out of range is as wrong then, and would surface only when an operator
// turns the feature on.
func (v *validator) validateOverload() {
	q := &v.c.QueueLimits
	if q.Soft < 0 {
		v.bad("queue_limits.soft", "%d must not be negative (0: no limit)", q.Soft)
	}
	if q.Hard < 0 {
		v.bad("queue_limits.hard", "%d must not be negative (0: no limit)", q.Hard)
	}
	if q.Soft > 0 && q.Hard > 0 && q.Soft > q.Hard {
		v.bad("queue_limits.soft", "%d must not exceed queue_limits.hard %d (%s)", q.Soft, q.Hard, v.source("queue_limits.hard"))
	}
	if q.Wait < 0 {
		v.bad("queue_limits.wait", "%v must not be negative (0: no limit)", q.Wait)
	}

	ls := &v.c.LoadShedding
	// NaN fails every comparison, so each range is written to let it out.
	if !(ls.CPULimit >= 0 && ls.CPULimit <= 1) {
		v.bad("load_shedding.cpu_limit", "%v is not in [0, 1] (a fraction of the cores Go may use)", ls.CPULimit)
	} else if ls.Enabled && ls.CPULimit == 0 && ls.HeapLimit == 0 && ls.LatencyLimit == 0 {
		v.bad("load_shedding.cpu_limit", "is 0 and so are load_shedding.heap_limit and load_shedding.latency_limit: load shedding is enabled (%s) with no limit to shed at", v.source("load_shedding.enabled"))
	}
	if ls.LatencyLimit < 0 {
		v.bad("load_shedding.latency_limit", "%v must not be negative (0: no limit)", ls.LatencyLimit)
	}
	if ls.MinConcurrency < 1 {
		v.bad("load_shedding.min_concurrency", "%d must be at least 1", ls.MinConcurrency)
	}
	if ls.Window <= 0 {
		v.bad("load_shedding.window", "%v must be positive", ls.Window)
	}
	if !(ls.Hysteresis > 0 && ls.Hysteresis <= 1) {
		v.bad("load_shedding.hysteresis", "%v is not in (0, 1]", ls.Hysteresis)
	}
	if ls.RetryAfter <= 0 {
		v.bad("load_shedding.retry_after", "%v must be positive", ls.RetryAfter)
	}

	mc := &v.c.MemoryCollection
	if mc.Interval <= 0 {
		v.bad("memory_collection.interval", "%v must be positive", mc.Interval)
	}
	if mc.MaxPerRound < 1 {
		v.bad("memory_collection.max_per_round", "%d must be at least 1", mc.MaxPerRound)
	}
}

func (v *validator) validateTracing() {
	tr := &v.c.Tracing
	switch tr.Exporter {
	case "", exporterNone, exporterStdout:
	case exporterOTLP:
		ep := tr.Endpoint
		if u, err := url.Parse(ep); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
			ep = u.Host
		}
		if dialReason(ep) != "" {
			v.bad("tracing.endpoint", "%q is not the OTLP collector's gRPC host:port or an http:// or https:// URL of it", tr.Endpoint)
		}
	default:
		v.bad("tracing.exporter", "%q is not one of none, otlp, stdout", tr.Exporter)
	}
	if r := tr.SampleRatio; math.IsNaN(r) || r < 0 || r > 1 {
		v.bad("tracing.sample_ratio", "%v is not in [0, 1]", r)
	}
}

// provider is the storage provider the silo uses: Storage.Provider, or
// the embedded store for a silo alone that names none.
func (c *Config) provider() string {
	if c.Storage.Provider == "" && c.Cluster.ID == "" {
		return providerEmbedded
	}
	return c.Storage.Provider
}

// remindersEnabled says whether the reminder service runs.
func (c *Config) remindersEnabled() bool {
	if c.Reminders.Enabled != nil {
		return *c.Reminders.Enabled
	}
	p := c.provider()
	return p == providerEmbedded || p == providerPostgres
}

// validator collects the FieldErrors of one Validate call.
type validator struct {
	c    *Config
	errs []error
	def  *Config // DefaultConfig, made when a source is first needed
}

func (v *validator) bad(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Field: path, Source: v.source(path), Reason: fmt.Sprintf(format, args...)})
}

func (v *validator) err() error { return errors.Join(v.errs...) }

// source says where the field at path got its value.
func (v *validator) source(path string) string {
	if v.def == nil {
		d := DefaultConfig()
		v.def = &d
	}
	return v.c.source(path, v.def)
}

func (v *validator) oneOf(path, value string, allowed ...string) {
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	v.bad(path, "%q is not one of %s", value, strings.Join(allowed, ", "))
}

// checkText checks a name: at most max bytes of printable UTF-8, and
// not empty if required.
func (v *validator) checkText(path, s string, max int, required bool) {
	switch {
	case s == "" && required:
		v.bad(path, "must not be empty")
	case len(s) > max:
		v.bad(path, "is %d bytes long; at most %d", len(s), max)
	case !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		v.bad(path, "%q is not printable UTF-8 text", s)
	}
}

// listenAddr checks a host:port to listen on (an empty host is every
// interface; port 0 picks one) and returns its host.
func (v *validator) listenAddr(path, addr string) (host string, ok bool) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		v.bad(path, "%q is not host:port", addr)
		return "", false
	}
	if parsePort(p) < 0 {
		v.bad(path, "the port of %q is not in [0, 65535]", addr)
		return "", false
	}
	return host, true
}

// dialAddr checks an optional host:port to dial.
func (v *validator) dialAddr(path, addr string) {
	if addr == "" {
		return
	}
	if reason := dialReason(addr); reason != "" {
		v.bad(path, "%s", reason)
	}
}

// dialReason says why addr is not a host:port to dial, or returns "".
func dialReason(addr string) string {
	host, p, err := net.SplitHostPort(addr)
	switch {
	case err != nil:
		return fmt.Sprintf("%q is not host:port", addr)
	case host == "":
		return fmt.Sprintf("%q has no host", addr)
	case parsePort(p) <= 0:
		return fmt.Sprintf("the port of %q is not in [1, 65535]", addr)
	}
	return ""
}

// parsePort returns the port p names, or -1 if it names none.
func parsePort(p string) int {
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return -1
	}
	return n
}

// validateStreams checks the stream providers' names and the durable
// provider's settings.
func (v *validator) validateStreams() {
	sc := &v.c.Streams
	for _, f := range []struct{ path, name string }{
		{"streams.memory_provider", sc.MemoryProvider},
		{"streams.durable_provider", sc.DurableProvider},
	} {
		if strings.Contains(f.name, "/") {
			v.bad(f.path, "%q: a provider's name must not contain '/', which separates a stream's name", f.name)
		}
	}
	if sc.MemoryProvider != "" && sc.MemoryProvider == sc.DurableProvider {
		v.bad("streams.durable_provider", "%q names the memory provider too: give each its own name", sc.DurableProvider)
	}
	durable := sc.DurableProvider != ""
	switch {
	case sc.Partitions < 0 || sc.Partitions > 1<<16:
		v.bad("streams.partitions", "%d: want 1 to 65536, or 0 for 16", sc.Partitions)
	case sc.Partitions != 0 && !durable:
		v.bad("streams.partitions", "is the durable provider's: set streams.durable_provider")
	}
	switch {
	case sc.MaxAge < 0:
		v.bad("streams.max_age", "%v must not be negative", sc.MaxAge)
	case sc.MaxAge != 0 && !durable:
		v.bad("streams.max_age", "is the durable provider's: set streams.durable_provider")
	}
	switch {
	case sc.MaxBytes > math.MaxInt64:
		v.bad("streams.max_bytes", "%d is too large", sc.MaxBytes)
	case sc.MaxBytes != 0 && !durable:
		v.bad("streams.max_bytes", "is the durable provider's: set streams.durable_provider")
	}
}

// streams is the silo's stream configuration, nil for none.
func (c *Config) streams() *silo.StreamsConfig {
	sc := c.Streams
	if sc.MemoryProvider == "" && sc.DurableProvider == "" {
		return nil
	}
	out := &silo.StreamsConfig{Providers: map[string]silo.StreamProviderConfig{}}
	if sc.MemoryProvider != "" {
		out.Providers[sc.MemoryProvider] = silo.StreamProviderConfig{}
	}
	if sc.DurableProvider != "" {
		out.Providers[sc.DurableProvider] = silo.StreamProviderConfig{Kind: "durable", Partitions: sc.Partitions, MaxAge: sc.MaxAge, MaxBytes: int64(sc.MaxBytes)}
	}
	return out
}
