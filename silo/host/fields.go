package host

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// A field is one setting of Config. Its dotted path is its key in the
// YAML file, and the environment variable and flag names derive from it,
// so the three cannot drift apart. set and get convert the value from
// and to text, which is what the environment and flags give.
type field struct {
	path string
	arg  string // the value's shape in --help: "host:port", "duration", ...
	help string
	// isBool makes the flag a switch: --tracing.insecure alone means true.
	isBool bool
	// isList makes a YAML sequence a valid value.
	isList bool
	set    func(c *Config, text string) error
	get    func(c *Config) string
	// redact, when set, is what logs show of the value instead of it.
	redact func(text string) string
	// emptyOff: the empty value turns something off (no admin server, no
	// cluster, no gateway), so an environment variable set to empty is
	// taken rather than counted as unset.
	emptyOff bool
}

// envName is the environment variable of the field at path:
// cluster.gossip.listen is GRANARY_CLUSTER_GOSSIP_LISTEN.
func envName(path string) string {
	return "GRANARY_" + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// EnvNames returns every environment variable the host reads:
// GRANARY_CONFIG, then each setting's, in the order of --help. Deployment
// files can be checked against it, since the host cannot tell a misspelt
// variable from one meant for something else.
func EnvNames() []string {
	names := make([]string, 0, len(fields)+1)
	names = append(names, configEnv)
	for _, f := range fields {
		names = append(names, envName(f.path))
	}
	return names
}

// configEnv and configFlag name the configuration file.
const (
	configEnv  = "GRANARY_CONFIG"
	configFlag = "config"
)

// fields is every setting, in the order of the YAML schema and --help.
var fields = []*field{
	text("name", "name", "the silo's name, in logs, its member ID and the admin API (default: the hostname)",
		func(c *Config) *string { return &c.Name }),
	text("log.format", "json|console", "log format, to standard error",
		func(c *Config) *string { return &c.Log.Format }),
	text("log.level", "debug|info|warn|error", "the least severe level logged",
		func(c *Config) *string { return &c.Log.Level }),
	duration("shutdown.timeout", "graceful-stop budget after SIGTERM, SIGINT or a drain request; past it the silo is closed at once",
		func(c *Config) *time.Duration { return &c.Shutdown.Timeout }),
	duration("shutdown.close_timeout", "once shutdown.timeout has run out, how long closing the silo waits for grain turns still running before it abandons them",
		func(c *Config) *time.Duration { return &c.Shutdown.CloseTimeout }),
	offWhenEmpty("admin.listen", "host:port", "admin HTTP server: probes, metrics, admin API, dashboard; empty runs none",
		func(c *Config) *string { return &c.Admin.Listen }),
	text("admin.advertise", "host:port", "where other silos and granaryctl reach the admin server (default: derived from the bound address)",
		func(c *Config) *string { return &c.Admin.Advertise }),
	text("admin.tls.mode", "off|tls|mtls", "admin server TLS: tls (a client certificate from ca_file, when given, authenticates an operator) or mtls (one is required, probes included)",
		func(c *Config) *string { return &c.Admin.TLS.Mode }),
	text("admin.tls.cert_file", "file", "admin: this side's certificate chain, PEM (re-read when it changes)",
		func(c *Config) *string { return &c.Admin.TLS.CertFile }),
	text("admin.tls.key_file", "file", "admin: the certificate's private key, PEM",
		func(c *Config) *string { return &c.Admin.TLS.KeyFile }),
	text("admin.tls.ca_file", "file", "admin: the CA bundle peers' certificates must chain to, PEM",
		func(c *Config) *string { return &c.Admin.TLS.CAFile }),
	text("admin.token_file", "file", "admin tokens, TOKEN PRINCIPAL a line: needed to deactivate and drain (off without tokens or admin certificates), and for the dashboard",
		func(c *Config) *string { return &c.Admin.TokenFile }),
	offWhenEmpty("cluster.id", "id", "the cluster ID; empty runs a silo alone",
		func(c *Config) *string { return &c.Cluster.ID }),
	text("cluster.gossip.listen", "ip:port", "gossip listeners, TCP and UDP; an empty host listens on every interface",
		func(c *Config) *string { return &c.Cluster.Gossip.Listen }),
	text("cluster.gossip.advertise", "ip:port", "the gossip address other silos use, behind NAT or in a container; the silo's gRPC address takes its host too (default, when bound to every interface: an IP the hostname resolves to, else the first private IP)",
		func(c *Config) *string { return &c.Cluster.Gossip.Advertise }),
	text("cluster.grpc.listen", "host:port", "the silo-to-silo gRPC server",
		func(c *Config) *string { return &c.Cluster.GRPC.Listen }),
	list("cluster.seeds", "host:port,...", "gossip addresses of silos to join through; none founds the cluster",
		func(c *Config) *[]string { return &c.Cluster.Seeds }),
	text("cluster.seed_dns", "name", "a DNS name whose addresses, at the gossip port, are seeds too (a Kubernetes headless service)",
		func(c *Config) *string { return &c.Cluster.SeedDNS }),
	secret(text("cluster.secret_key", "base64", "gossip encryption key, base64 of 16, 24 or 32 bytes; the same on every silo",
		func(c *Config) *string { return &c.Cluster.SecretKey })),
	secret(list("cluster.accepted_secret_keys", "base64,...", "more gossip keys accepted but never sent, for changing secret_key by rolling restarts",
		func(c *Config) *[]string { return &c.Cluster.AcceptedSecretKeys })),
	text("cluster.profile", "lan|local|wan", "failure-detection timing",
		func(c *Config) *string { return &c.Cluster.Profile }),
	text("cluster.tls.mode", "off|mtls", "mutual TLS between silos: mtls, or off on a network no one else shares",
		func(c *Config) *string { return &c.Cluster.TLS.Mode }),
	text("cluster.tls.cert_file", "file", "cluster: this side's certificate chain, PEM (re-read when it changes)",
		func(c *Config) *string { return &c.Cluster.TLS.CertFile }),
	text("cluster.tls.key_file", "file", "cluster: the certificate's private key, PEM",
		func(c *Config) *string { return &c.Cluster.TLS.KeyFile }),
	text("cluster.tls.ca_file", "file", "cluster: the CA bundle peers' certificates must chain to, PEM",
		func(c *Config) *string { return &c.Cluster.TLS.CAFile }),
	offWhenEmpty("gateway.listen", "host:port", "the gateway external clients dial; empty serves none",
		func(c *Config) *string { return &c.Gateway.Listen }),
	text("gateway.advertise", "host:port", "the address clients are told to dial (default: derived from the bound address)",
		func(c *Config) *string { return &c.Gateway.Advertise }),
	text("gateway.tls.mode", "off|tls|mtls", "gateway TLS: tls, or mtls to require client certificates (their subject is the caller's principal)",
		func(c *Config) *string { return &c.Gateway.TLS.Mode }),
	text("gateway.tls.cert_file", "file", "gateway: this side's certificate chain, PEM (re-read when it changes)",
		func(c *Config) *string { return &c.Gateway.TLS.CertFile }),
	text("gateway.tls.key_file", "file", "gateway: the certificate's private key, PEM",
		func(c *Config) *string { return &c.Gateway.TLS.KeyFile }),
	text("gateway.tls.ca_file", "file", "gateway: the CA bundle peers' certificates must chain to, PEM",
		func(c *Config) *string { return &c.Gateway.TLS.CAFile }),
	integer("gateway.max_connections", "n", "the most client connections the gateway holds at once; one over it is closed at once and counted",
		func(c *Config) *int { return &c.Gateway.MaxConnections }),
	text("gateway.auth.token_file", "file", "bearer tokens clients may send, TOKEN PRINCIPAL a line, re-read when it changes",
		func(c *Config) *string { return &c.Gateway.Auth.TokenFile }),
	text("storage.provider", "memory|embedded|postgres", "the default storage provider (default: embedded for a silo alone; a cluster must choose)",
		func(c *Config) *string { return &c.Storage.Provider }),
	text("storage.data_dir", "dir", "the embedded store's directory",
		func(c *Config) *string { return &c.Storage.DataDir }),
	withRedact(text("storage.postgres.dsn", "dsn", "the PostgreSQL database, a URL or key=value words",
		func(c *Config) *string { return &c.Storage.Postgres.DSN }), redactDSN),
	text("storage.postgres.service_id", "id", "separates the rows of clusters that share a database (default: cluster.id)",
		func(c *Config) *string { return &c.Storage.Postgres.ServiceID }),
	optionalBool("reminders.enabled", "run the reminder service (auto: with a persistent storage provider)",
		func(c *Config) **bool { return &c.Reminders.Enabled }),
	duration("reminders.min_period", "the shortest reminder period (0: 1m)",
		func(c *Config) *time.Duration { return &c.Reminders.MinPeriod }),
	text("streams.memory_provider", "name", "the name of a memory stream provider, which may lose events (default: none)",
		func(c *Config) *string { return &c.Streams.MemoryProvider }),
	text("streams.durable_provider", "name", "the name of a durable stream provider, logged in the default storage provider: at least once, rewindable, followed by clients (default: none)",
		func(c *Config) *string { return &c.Streams.DurableProvider }),
	integer("streams.partitions", "n", "the durable provider's log partitions; fix it for the life of the log (0: 16)",
		func(c *Config) *int { return &c.Streams.Partitions }),
	duration("streams.max_age", "drop durable events older than this (0: keep them)",
		func(c *Config) *time.Duration { return &c.Streams.MaxAge }),
	byteCount("streams.max_bytes", "drop a durable partition's oldest events beyond this much payload, in bytes (0: keep them)",
		func(c *Config) *uint64 { return &c.Streams.MaxBytes }),
	integer("queue_limits.soft", "n", "requests queued at one activation past which the silo logs a warning (0: no limit)",
		func(c *Config) *int { return &c.QueueLimits.Soft }),
	integer("queue_limits.hard", "n", "requests queued at one activation past which a new one is refused with ResourceExhausted (0: no limit)",
		func(c *Config) *int { return &c.QueueLimits.Hard }),
	duration("queue_limits.wait", "refuse a request from a client or another silo that waited longer than this for its turn, with ResourceExhausted (0: no limit)",
		func(c *Config) *time.Duration { return &c.QueueLimits.Wait }),
	boolean("load_shedding.enabled", "refuse new requests while CPU use or the Go heap is over its limit, and limit them to keep their latency under its limit",
		func(c *Config) *bool { return &c.LoadShedding.Enabled }),
	number("load_shedding.cpu_limit", "0..1", "shed above this CPU use, a fraction of the cores Go may use (0: not for CPU)",
		func(c *Config) *float64 { return &c.LoadShedding.CPULimit }),
	byteCount("load_shedding.heap_limit", "shed above this Go heap, in bytes (0: not for memory)",
		func(c *Config) *uint64 { return &c.LoadShedding.HeapLimit }),
	duration("load_shedding.latency_limit", "keep the mean time new requests from clients and other silos take, from arrival to the end of their turns, under this by limiting how many run at once (0: no limit)",
		func(c *Config) *time.Duration { return &c.LoadShedding.LatencyLimit }),
	integer("load_shedding.min_concurrency", "n", "the fewest new requests the latency limit lets the silo run at once",
		func(c *Config) *int { return &c.LoadShedding.MinConcurrency }),
	duration("load_shedding.window", "the span CPU use and the heap are averaged over; the latency limit acts on each fifth of it",
		func(c *Config) *time.Duration { return &c.LoadShedding.Window }),
	number("load_shedding.hysteresis", "0..1", "once shedding, stop when every measure is under this fraction of its limit",
		func(c *Config) *float64 { return &c.LoadShedding.Hysteresis }),
	duration("load_shedding.retry_after", "the delay a refused caller is asked to wait before it tries again",
		func(c *Config) *time.Duration { return &c.LoadShedding.RetryAfter }),
	byteCount("memory_collection.heap_target", "collect idle activations, least recently used first, while the Go heap is over this many bytes (0: off)",
		func(c *Config) *uint64 { return &c.MemoryCollection.HeapTarget }),
	duration("memory_collection.interval", "how often the heap is checked against memory_collection.heap_target",
		func(c *Config) *time.Duration { return &c.MemoryCollection.Interval }),
	integer("memory_collection.max_per_round", "n", "the most activations one check collects",
		func(c *Config) *int { return &c.MemoryCollection.MaxPerRound }),
	text("tracing.exporter", "none|otlp|stdout", "where traces of grain calls go",
		func(c *Config) *string { return &c.Tracing.Exporter }),
	text("tracing.endpoint", "host:port", "the OTLP collector's gRPC address",
		func(c *Config) *string { return &c.Tracing.Endpoint }),
	boolean("tracing.insecure", "send OTLP without TLS",
		func(c *Config) *bool { return &c.Tracing.Insecure }),
	number("tracing.sample_ratio", "0..1", "the fraction of new traces recorded",
		func(c *Config) *float64 { return &c.Tracing.SampleRatio }),
}

// fieldByPath and sections index fields: sections holds every path that
// has fields under it (cluster, cluster.gossip, ...).
var (
	fieldByPath = map[string]*field{}
	sections    = map[string]bool{}
)

func init() {
	for _, f := range fields {
		fieldByPath[f.path] = f
		for p := f.path; strings.Contains(p, "."); {
			p = p[:strings.LastIndexByte(p, '.')]
			sections[p] = true
		}
	}
}

// offWhenEmpty is a text field whose empty value turns something off.
func offWhenEmpty(path, arg, help string, at func(*Config) *string) *field {
	f := text(path, arg, help, at)
	f.emptyOff = true
	return f
}

func text(path, arg, help string, at func(*Config) *string) *field {
	return &field{
		path: path, arg: arg, help: help,
		set: func(c *Config, s string) error { *at(c) = s; return nil },
		get: func(c *Config) string { return *at(c) },
	}
}

func duration(path, help string, at func(*Config) *time.Duration) *field {
	return &field{
		path: path, arg: "duration", help: help,
		set: func(c *Config, s string) error {
			d, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("%q is not a duration (such as 30s or 1m30s)", s)
			}
			*at(c) = d
			return nil
		},
		get: func(c *Config) string { return at(c).String() },
	}
}

func boolean(path, help string, at func(*Config) *bool) *field {
	return &field{
		path: path, arg: "bool", help: help, isBool: true,
		set: func(c *Config, s string) error {
			b, err := parseBool(s)
			if err != nil {
				return err
			}
			*at(c) = b
			return nil
		},
		get: func(c *Config) string { return strconv.FormatBool(*at(c)) },
	}
}

// optionalBool is a bool that may be left to a derived default: "auto"
// (or empty) sets it to nil.
func optionalBool(path, help string, at func(*Config) **bool) *field {
	return &field{
		path: path, arg: "true|false|auto", help: help, isBool: true,
		set: func(c *Config, s string) error {
			if s = strings.TrimSpace(s); s == "" || s == "auto" {
				*at(c) = nil
				return nil
			}
			b, err := parseBool(s)
			if err != nil {
				return fmt.Errorf("%q is not a bool (true, false or auto)", s)
			}
			*at(c) = &b
			return nil
		},
		get: func(c *Config) string {
			if b := *at(c); b != nil {
				return strconv.FormatBool(*b)
			}
			return "auto"
		},
	}
}

func integer(path, arg, help string, at func(*Config) *int) *field {
	return &field{
		path: path, arg: arg, help: help,
		set: func(c *Config, s string) error {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("%q is not a whole number", s)
			}
			*at(c) = n
			return nil
		},
		get: func(c *Config) string { return strconv.Itoa(*at(c)) },
	}
}

// byteCount is a size in bytes, a whole number.
func byteCount(path, help string, at func(*Config) *uint64) *field {
	return &field{
		path: path, arg: "bytes", help: help,
		set: func(c *Config, s string) error {
			n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return fmt.Errorf("%q is not a whole number of bytes", s)
			}
			*at(c) = n
			return nil
		},
		get: func(c *Config) string { return strconv.FormatUint(*at(c), 10) },
	}
}

func number(path, arg, help string, at func(*Config) *float64) *field {
	return &field{
		path: path, arg: arg, help: help,
		set: func(c *Config, s string) error {
			x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil {
				return fmt.Errorf("%q is not a number", s)
			}
			*at(c) = x
			return nil
		},
		get: func(c *Config) string { return strconv.FormatFloat(*at(c), 'g', -1, 64) },
	}
}

// list is a list of strings, comma-separated as text; empty items are
// dropped.
func list(path, arg, help string, at func(*Config) *[]string) *field {
	return &field{
		path: path, arg: arg, help: help, isList: true,
		set: func(c *Config, s string) error {
			var items []string
			for item := range strings.SplitSeq(s, ",") {
				if item = strings.TrimSpace(item); item != "" {
					items = append(items, item)
				}
			}
			*at(c) = items
			return nil
		},
		get: func(c *Config) string { return strings.Join(*at(c), ",") },
	}
}

func secret(f *field) *field {
	return withRedact(f, func(string) string { return "(redacted)" })
}

func withRedact(f *field, redact func(string) string) *field {
	f.redact = redact
	return f
}

func parseBool(s string) (bool, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return false, fmt.Errorf("%q is not a bool (true or false)", s)
	}
	return b, nil
}

// logValue is the field's value as logs may show it.
func (f *field) logValue(c *Config) string {
	v := f.get(c)
	if f.redact != nil && v != "" {
		return f.redact(v)
	}
	return v
}

// dsnPassword finds the password of a key=value DSN.
var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactDSN hides the password of a DSN, in either form. A URL's user
// information is cut by hand rather than through url.Parse, which refuses
// passwords with '%' or '#' and would leave them shown.
func redactDSN(dsn string) string {
	scheme, rest, isURL := strings.Cut(dsn, "://")
	if !isURL {
		return dsnPassword.ReplaceAllString(dsn, "${1}xxxxx")
	}
	// The user information ends at the last '@' before the path: a
	// password may hold '@', '/', '?' and '#' too.
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, hasPassword := strings.Cut(rest[:at], ":"); hasPassword {
			rest = user + ":xxxxx" + rest[at:]
		}
	}
	if path, query, ok := strings.Cut(rest, "?"); ok {
		rest = path + "?" + dsnQueryPassword.ReplaceAllString(query, "${1}xxxxx")
	}
	return scheme + "://" + rest
}

// dsnQueryPassword finds a password given as a URL DSN's query parameter.
var dsnQueryPassword = regexp.MustCompile(`(?i)((?:^|&)password=)[^&]*`)

// Usage writes the command-line help of a silo host program named
// program: every flag with its environment variable and default.
func Usage(w io.Writer, program string) {
	def := DefaultConfig()
	fmt.Fprintf(w, "Usage: %s [flags]\n\n", program)
	fmt.Fprintf(w, "Runs a Granary silo. Each setting is taken from the first of: its flag, its\n"+
		"environment variable, the YAML file named by --%s or %s, its default.\n"+
		"Lists are comma-separated; durations are Go durations such as 30s or 1m30s;\n"+
		"sizes are whole numbers of bytes.\n"+
		"An empty environment variable counts as unset, except where an empty value\n"+
		"turns something off (admin.listen, cluster.id, gateway.listen): set empty,\n"+
		"GRANARY_GATEWAY_LISTEN= serves no gateway.\n\n", configFlag, configEnv)
	fmt.Fprintf(w, "  --%s file\n      env %s\n      the YAML configuration file; its keys are the flag names' parts\n", configFlag, configEnv)
	for _, f := range fields {
		fmt.Fprintf(w, "  --%s %s\n      env %s, default %q\n      %s\n", f.path, f.arg, envName(f.path), f.get(&def), f.help)
	}
}
