package host

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"
)

// defaultTestTimeout bounds each test's waits.
const defaultTestTimeout = 30 * time.Second

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// envOf returns a lookupEnv over m.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// writeFile writes a configuration file in the test's directory and
// returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "silo.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadOK loads and fails the test on an error.
func loadOK(t *testing.T, args []string, env map[string]string) Config {
	t.Helper()
	c, err := load(args, envOf(env), &bytes.Buffer{})
	if err != nil {
		t.Fatalf("load(%q, %v): %v", args, env, err)
	}
	return c
}

// loadErr loads, expects an error, and returns its text.
func loadErr(t *testing.T, args []string, env map[string]string) string {
	t.Helper()
	_, err := load(args, envOf(env), &bytes.Buffer{})
	if err == nil {
		t.Fatalf("load(%q, %v) succeeded; want an error", args, env)
	}
	return err.Error()
}

func TestLoadPrecedence(t *testing.T) {
	file := writeFile(t, `
name: from-file
log:
  level: warn
shutdown:
  timeout: 11s
cluster:
  id: c1
  seeds: [10.0.0.1:7946, 10.0.0.2:7946]
storage:
  provider: memory
`)
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string // the name
		timeout time.Duration
		source  string // of name
	}{
		{"file alone", []string{"--config", file}, nil, "from-file", 11 * time.Second, "file " + file + " line 2"},
		{"file by env", nil, map[string]string{"GRANARY_CONFIG": file}, "from-file", 11 * time.Second, "file " + file + " line 2"},
		{"env over file", []string{"--config=" + file}, map[string]string{"GRANARY_NAME": "from-env", "GRANARY_SHUTDOWN_TIMEOUT": "12s"},
			"from-env", 12 * time.Second, "env GRANARY_NAME"},
		{"flag over env", []string{"--config", file, "--name", "from-flag"}, map[string]string{"GRANARY_NAME": "from-env"},
			"from-flag", 11 * time.Second, "flag --name"},
		{"last flag wins", []string{"--name=a", "--name=b"}, nil, "b", 30 * time.Second, "flag --name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := loadOK(t, tt.args, tt.env)
			if c.Name != tt.want || c.Shutdown.Timeout != tt.timeout {
				t.Errorf("name %q timeout %v; want %q %v", c.Name, c.Shutdown.Timeout, tt.want, tt.timeout)
			}
			if got := c.source("name", nil); got != tt.source {
				t.Errorf("source of name %q; want %q", got, tt.source)
			}
		})
	}
	c := loadOK(t, []string{"--config", file}, map[string]string{"GRANARY_TRACING_INSECURE": "true"})
	if c.Log.Level != "warn" || c.Cluster.ID != "c1" || !slices.Equal(c.Cluster.Seeds, []string{"10.0.0.1:7946", "10.0.0.2:7946"}) ||
		c.Storage.Provider != "memory" || !c.Tracing.Insecure || c.Log.Format != "json" {
		t.Errorf("loaded %+v", c)
	}
	if got := c.source("log.format", nil); got != "default" {
		t.Errorf("source of an unset field %q; want default", got)
	}
}

// TestErrorsNameSource gives one bad value from each source: each error
// names the field and that source.
func TestErrorsNameSource(t *testing.T) {
	file := writeFile(t, "name: ok\n\nshutdown:\n  timeout: soon\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"file", []string{"--config", file}, nil,
			`config: shutdown.timeout (file ` + file + ` line 4): "soon" is not a duration (such as 30s or 1m30s)`},
		{"env", nil, map[string]string{"GRANARY_SHUTDOWN_TIMEOUT": "soon"},
			`config: shutdown.timeout (env GRANARY_SHUTDOWN_TIMEOUT): "soon" is not a duration`},
		{"flag", []string{"--shutdown.timeout", "soon"}, nil,
			`config: shutdown.timeout (flag --shutdown.timeout): "soon" is not a duration`},
		{"flag over a bad env", []string{"--shutdown.timeout=-1s"}, map[string]string{"GRANARY_SHUTDOWN_TIMEOUT": "5s"},
			`config: shutdown.timeout (flag --shutdown.timeout): -1s must be positive`},
		{"default", nil, map[string]string{"GRANARY_CLUSTER_ID": "c1"},
			`config: storage.provider (default): must be set in a cluster`},
		{"gossip listen from env", nil, map[string]string{"GRANARY_CLUSTER_GOSSIP_LISTEN": "abc"},
			`config: cluster.gossip.listen (env GRANARY_CLUSTER_GOSSIP_LISTEN): "abc" is not host:port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := loadErr(t, tt.args, tt.env); !strings.HasPrefix(got, tt.want) {
				t.Errorf("error %q;\nwant it to begin %q", got, tt.want)
			}
		})
	}
}

func TestValidationErrors(t *testing.T) {
	key16 := "MDEyMzQ1Njc4OWFiY2RlZg==" // 16 bytes
	key20 := "MDEyMzQ1Njc4OWFiY2RlZmdoaWo="
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"bad bool", map[string]string{"GRANARY_TRACING_INSECURE": "maybe"},
			`config: tracing.insecure (env GRANARY_TRACING_INSECURE): "maybe" is not a bool`},
		{"bad optional bool", map[string]string{"GRANARY_REMINDERS_ENABLED": "sometimes"},
			`config: reminders.enabled (env GRANARY_REMINDERS_ENABLED): "sometimes" is not a bool (true, false or auto)`},
		{"bad number", map[string]string{"GRANARY_TRACING_SAMPLE_RATIO": "half"},
			`config: tracing.sample_ratio (env GRANARY_TRACING_SAMPLE_RATIO): "half" is not a number`},
		{"sample ratio above 1", map[string]string{"GRANARY_TRACING_SAMPLE_RATIO": "1.5"},
			`config: tracing.sample_ratio (env GRANARY_TRACING_SAMPLE_RATIO): 1.5 is not in [0, 1]`},
		{"sample ratio negative", map[string]string{"GRANARY_TRACING_SAMPLE_RATIO": "-0.1"},
			`config: tracing.sample_ratio (env GRANARY_TRACING_SAMPLE_RATIO): -0.1 is not in [0, 1]`},
		{"sample ratio NaN", map[string]string{"GRANARY_TRACING_SAMPLE_RATIO": "NaN"},
			`config: tracing.sample_ratio (env GRANARY_TRACING_SAMPLE_RATIO): NaN is not in [0, 1]`},
		{"key length", map[string]string{"GRANARY_CLUSTER_ID": "c", "GRANARY_STORAGE_PROVIDER": "memory", "GRANARY_CLUSTER_SECRET_KEY": key20},
			`config: cluster.secret_key (env GRANARY_CLUSTER_SECRET_KEY): decodes to 20 bytes; want 16, 24 or 32`},
		{"key not base64", map[string]string{"GRANARY_CLUSTER_ID": "c", "GRANARY_STORAGE_PROVIDER": "memory", "GRANARY_CLUSTER_SECRET_KEY": "not*base64"},
			`config: cluster.secret_key (env GRANARY_CLUSTER_SECRET_KEY): is not standard base64 (10 characters)`},
		{"key without a cluster", map[string]string{"GRANARY_CLUSTER_SECRET_KEY": key16},
			`config: cluster.secret_key (env GRANARY_CLUSTER_SECRET_KEY): is set but cluster.id is empty`},
		{"seeds without a cluster", map[string]string{"GRANARY_CLUSTER_SEEDS": "a:1"},
			`config: cluster.seeds (env GRANARY_CLUSTER_SEEDS): is set but cluster.id is empty`},
		{"unknown provider", map[string]string{"GRANARY_STORAGE_PROVIDER": "redis"},
			`config: storage.provider (env GRANARY_STORAGE_PROVIDER): "redis" is not one of memory, embedded, postgres`},
		{"postgres without dsn", map[string]string{"GRANARY_STORAGE_PROVIDER": "postgres"},
			`config: storage.postgres.dsn (default): required with storage.provider postgres (env GRANARY_STORAGE_PROVIDER)`},
		{"embedded in a cluster", map[string]string{"GRANARY_CLUSTER_ID": "c", "GRANARY_STORAGE_PROVIDER": "embedded"},
			`config: storage.provider (env GRANARY_STORAGE_PROVIDER): embedded is for a silo alone`},
		{"log level", map[string]string{"GRANARY_LOG_LEVEL": "verbose"},
			`config: log.level (env GRANARY_LOG_LEVEL): "verbose" is not one of debug, info, warn, error`},
		{"log format", map[string]string{"GRANARY_LOG_FORMAT": "xml"},
			`config: log.format (env GRANARY_LOG_FORMAT): "xml" is not one of json, console`},
		{"profile", map[string]string{"GRANARY_CLUSTER_PROFILE": "fast"},
			`config: cluster.profile (env GRANARY_CLUSTER_PROFILE): "fast" is not one of lan, local, wan`},
		{"exporter", map[string]string{"GRANARY_TRACING_EXPORTER": "jaeger"},
			`config: tracing.exporter (env GRANARY_TRACING_EXPORTER): "jaeger" is not one of none, otlp, stdout`},
		{"otlp endpoint", map[string]string{"GRANARY_TRACING_EXPORTER": "otlp", "GRANARY_TRACING_ENDPOINT": "collector"},
			`config: tracing.endpoint (env GRANARY_TRACING_ENDPOINT): "collector" is not the OTLP collector's gRPC host:port`},
		{"gossip host not an IP", map[string]string{"GRANARY_CLUSTER_GOSSIP_LISTEN": "myhost:7946"},
			`config: cluster.gossip.listen (env GRANARY_CLUSTER_GOSSIP_LISTEN): the host of "myhost:7946" is not an IP address`},
		{"gossip port", map[string]string{"GRANARY_CLUSTER_GOSSIP_LISTEN": ":70000"},
			`config: cluster.gossip.listen (env GRANARY_CLUSTER_GOSSIP_LISTEN): the port of ":70000" is not in [0, 65535]`},
		{"gossip advertise", map[string]string{"GRANARY_CLUSTER_ID": "c", "GRANARY_STORAGE_PROVIDER": "memory", "GRANARY_CLUSTER_GOSSIP_ADVERTISE": "pod:7946"},
			`config: cluster.gossip.advertise (env GRANARY_CLUSTER_GOSSIP_ADVERTISE): the host of "pod:7946" is not an IP address`},
		{"seed", map[string]string{"GRANARY_CLUSTER_ID": "c", "GRANARY_STORAGE_PROVIDER": "memory", "GRANARY_CLUSTER_SEEDS": "a:7946,b"},
			`config: cluster.seeds (env GRANARY_CLUSTER_SEEDS): seed 2: "b" is not host:port`},
		{"seed dns", map[string]string{"GRANARY_CLUSTER_ID": "c", "GRANARY_STORAGE_PROVIDER": "memory", "GRANARY_CLUSTER_SEED_DNS": "svc:7946"},
			`config: cluster.seed_dns (env GRANARY_CLUSTER_SEED_DNS): "svc:7946" is not a DNS name`},
		{"grpc listen", map[string]string{"GRANARY_CLUSTER_GRPC_LISTEN": "7947"},
			`config: cluster.grpc.listen (env GRANARY_CLUSTER_GRPC_LISTEN): "7947" is not host:port`},
		{"gateway advertise", map[string]string{"GRANARY_GATEWAY_ADVERTISE": "gw:0"},
			`config: gateway.advertise (env GRANARY_GATEWAY_ADVERTISE): the port of "gw:0" is not in [1, 65535]`},
		{"admin listen", map[string]string{"GRANARY_ADMIN_LISTEN": "localhost"},
			`config: admin.listen (env GRANARY_ADMIN_LISTEN): "localhost" is not host:port`},
		{"admin advertise", map[string]string{"GRANARY_ADMIN_ADVERTISE": ":8080"},
			`config: admin.advertise (env GRANARY_ADMIN_ADVERTISE): ":8080" has no host`},
		{"cluster id", map[string]string{"GRANARY_CLUSTER_ID": "a\tb", "GRANARY_STORAGE_PROVIDER": "memory"},
			`config: cluster.id (env GRANARY_CLUSTER_ID): "a\tb" is not printable UTF-8 text`},
		{"min period", map[string]string{"GRANARY_REMINDERS_MIN_PERIOD": "-1m"},
			`config: reminders.min_period (env GRANARY_REMINDERS_MIN_PERIOD): -1m0s must not be negative`},
		{"close timeout", map[string]string{"GRANARY_SHUTDOWN_CLOSE_TIMEOUT": "0s"},
			`config: shutdown.close_timeout (env GRANARY_SHUTDOWN_CLOSE_TIMEOUT): 0s must be positive`},
		{"close timeout not a duration", map[string]string{"GRANARY_SHUTDOWN_CLOSE_TIMEOUT": "10"},
			`config: shutdown.close_timeout (env GRANARY_SHUTDOWN_CLOSE_TIMEOUT): "10" is not a duration`},
		{"soft queue limit negative", map[string]string{"GRANARY_QUEUE_LIMITS_SOFT": "-1"},
			`config: queue_limits.soft (env GRANARY_QUEUE_LIMITS_SOFT): -1 must not be negative (0: no limit)`},
		{"hard queue limit negative", map[string]string{"GRANARY_QUEUE_LIMITS_HARD": "-5"},
			`config: queue_limits.hard (env GRANARY_QUEUE_LIMITS_HARD): -5 must not be negative (0: no limit)`},
		{"hard queue limit not a number", map[string]string{"GRANARY_QUEUE_LIMITS_HARD": "lots"},
			`config: queue_limits.hard (env GRANARY_QUEUE_LIMITS_HARD): "lots" is not a whole number`},
		{"soft queue limit over the hard", map[string]string{"GRANARY_QUEUE_LIMITS_SOFT": "60000"},
			`config: queue_limits.soft (env GRANARY_QUEUE_LIMITS_SOFT): 60000 must not exceed queue_limits.hard 50000 (default)`},
		{"soft queue limit over no hard limit", map[string]string{"GRANARY_QUEUE_LIMITS_SOFT": "30000", "GRANARY_QUEUE_LIMITS_HARD": "0"},
			``},
		{"load shedding not a bool", map[string]string{"GRANARY_LOAD_SHEDDING_ENABLED": "on"},
			`config: load_shedding.enabled (env GRANARY_LOAD_SHEDDING_ENABLED): "on" is not a bool`},
		{"cpu limit above 1", map[string]string{"GRANARY_LOAD_SHEDDING_CPU_LIMIT": "1.5"},
			`config: load_shedding.cpu_limit (env GRANARY_LOAD_SHEDDING_CPU_LIMIT): 1.5 is not in [0, 1]`},
		{"cpu limit NaN", map[string]string{"GRANARY_LOAD_SHEDDING_CPU_LIMIT": "NaN"},
			`config: load_shedding.cpu_limit (env GRANARY_LOAD_SHEDDING_CPU_LIMIT): NaN is not in [0, 1]`},
		{"cpu limit as a percentage", map[string]string{"GRANARY_LOAD_SHEDDING_CPU_LIMIT": "95%"},
			`config: load_shedding.cpu_limit (env GRANARY_LOAD_SHEDDING_CPU_LIMIT): "95%" is not a number`},
		{"shedding with no limit", map[string]string{"GRANARY_LOAD_SHEDDING_ENABLED": "true", "GRANARY_LOAD_SHEDDING_CPU_LIMIT": "0"},
			`config: load_shedding.cpu_limit (env GRANARY_LOAD_SHEDDING_CPU_LIMIT): is 0 and so are load_shedding.heap_limit and load_shedding.latency_limit: load shedding is enabled (env GRANARY_LOAD_SHEDDING_ENABLED) with no limit to shed at`},
		{"shedding for memory alone", map[string]string{"GRANARY_LOAD_SHEDDING_ENABLED": "true", "GRANARY_LOAD_SHEDDING_CPU_LIMIT": "0", "GRANARY_LOAD_SHEDDING_HEAP_LIMIT": "1073741824"},
			``},
		{"shedding for latency alone", map[string]string{"GRANARY_LOAD_SHEDDING_ENABLED": "true", "GRANARY_LOAD_SHEDDING_CPU_LIMIT": "0", "GRANARY_LOAD_SHEDDING_LATENCY_LIMIT": "200ms"},
			``},
		{"latency limit negative", map[string]string{"GRANARY_LOAD_SHEDDING_LATENCY_LIMIT": "-1ms"},
			`config: load_shedding.latency_limit (env GRANARY_LOAD_SHEDDING_LATENCY_LIMIT): -1ms must not be negative`},
		{"queue wait limit negative", map[string]string{"GRANARY_QUEUE_LIMITS_WAIT": "-2s"},
			`config: queue_limits.wait (env GRANARY_QUEUE_LIMITS_WAIT): -2s must not be negative`},
		{"heap limit with a unit", map[string]string{"GRANARY_LOAD_SHEDDING_HEAP_LIMIT": "512MiB"},
			`config: load_shedding.heap_limit (env GRANARY_LOAD_SHEDDING_HEAP_LIMIT): "512MiB" is not a whole number of bytes`},
		{"heap limit negative", map[string]string{"GRANARY_LOAD_SHEDDING_HEAP_LIMIT": "-1"},
			`config: load_shedding.heap_limit (env GRANARY_LOAD_SHEDDING_HEAP_LIMIT): "-1" is not a whole number of bytes`},
		{"shedding window", map[string]string{"GRANARY_LOAD_SHEDDING_WINDOW": "0s"},
			`config: load_shedding.window (env GRANARY_LOAD_SHEDDING_WINDOW): 0s must be positive`},
		{"hysteresis 0", map[string]string{"GRANARY_LOAD_SHEDDING_HYSTERESIS": "0"},
			`config: load_shedding.hysteresis (env GRANARY_LOAD_SHEDDING_HYSTERESIS): 0 is not in (0, 1]`},
		{"hysteresis above 1", map[string]string{"GRANARY_LOAD_SHEDDING_HYSTERESIS": "1.1"},
			`config: load_shedding.hysteresis (env GRANARY_LOAD_SHEDDING_HYSTERESIS): 1.1 is not in (0, 1]`},
		{"hysteresis NaN", map[string]string{"GRANARY_LOAD_SHEDDING_HYSTERESIS": "nan"},
			`config: load_shedding.hysteresis (env GRANARY_LOAD_SHEDDING_HYSTERESIS): NaN is not in (0, 1]`},
		{"hysteresis 1", map[string]string{"GRANARY_LOAD_SHEDDING_HYSTERESIS": "1"},
			``},
		{"retry after", map[string]string{"GRANARY_LOAD_SHEDDING_RETRY_AFTER": "-1s"},
			`config: load_shedding.retry_after (env GRANARY_LOAD_SHEDDING_RETRY_AFTER): -1s must be positive`},
		{"heap target with a unit", map[string]string{"GRANARY_MEMORY_COLLECTION_HEAP_TARGET": "2G"},
			`config: memory_collection.heap_target (env GRANARY_MEMORY_COLLECTION_HEAP_TARGET): "2G" is not a whole number of bytes`},
		{"memory collection interval", map[string]string{"GRANARY_MEMORY_COLLECTION_INTERVAL": "0s"},
			`config: memory_collection.interval (env GRANARY_MEMORY_COLLECTION_INTERVAL): 0s must be positive`},
		{"memory collection round", map[string]string{"GRANARY_MEMORY_COLLECTION_MAX_PER_ROUND": "0"},
			`config: memory_collection.max_per_round (env GRANARY_MEMORY_COLLECTION_MAX_PER_ROUND): 0 must be at least 1`},
		{"data dir", map[string]string{"GRANARY_STORAGE_DATA_DIR": " "},
			``}, // a space is a directory name: no error
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == "" {
				loadOK(t, nil, tt.env)
				return
			}
			got := loadErr(t, nil, tt.env)
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("error %q;\nwant it to begin %q", got, tt.want)
			}
			if key := tt.env["GRANARY_CLUSTER_SECRET_KEY"]; key != "" && strings.Contains(got, key) {
				t.Errorf("the error %q shows the secret key", got)
			}
		})
	}
}

func TestEveryErrorReported(t *testing.T) {
	got := loadErr(t, []string{"--log.level=loud"}, map[string]string{"GRANARY_SHUTDOWN_TIMEOUT": "0s", "GRANARY_TRACING_EXPORTER": "x"})
	for _, want := range []string{"log.level (flag --log.level)", "shutdown.timeout (env GRANARY_SHUTDOWN_TIMEOUT)", "tracing.exporter (env GRANARY_TRACING_EXPORTER)"} {
		if !strings.Contains(got, want) {
			t.Errorf("error %q lacks %q", got, want)
		}
	}
	if n := strings.Count(got, "\n") + 1; n != 3 {
		t.Errorf("%d errors reported; want 3:\n%s", n, got)
	}
}

func TestFileErrors(t *testing.T) {
	tests := []struct {
		name, text string
		want       string // after "config: "; FILE stands for the file's path
	}{
		{"unknown key", "name: a\ncluster:\n  id: c\n  seedz: [a:1]\n",
			`cluster.seedz (file FILE line 4): unknown key; did you mean cluster.seeds?`},
		{"key in the wrong section", "seeds: [a:1]\n",
			`seeds (file FILE line 1): unknown key; did you mean cluster.seeds?`},
		{"unknown section", "metrics:\n  port: 9\n",
			`metrics (file FILE line 1): unknown key`},
		{"scalar for a section", "cluster: c1\n",
			`cluster (file FILE line 1): is a section: want a mapping of its keys accepted_secret_keys, gossip, grpc, id, profile, secret_key, seed_dns, seeds, tls`},
		{"mapping for a value", "name:\n  first: a\n",
			`name (file FILE line 1): want a value, not a mapping`},
		{"list for a value", "name: [a, b]\n",
			`name (file FILE line 1): want a single value, not a list`},
		{"repeated key", "name: a\nname: b\n",
			`name (file FILE line 2): repeats the key of line 1`},
		{"bad bool", "tracing:\n  insecure: perhaps\n",
			`tracing.insecure (file FILE line 2): "perhaps" is not a bool`},
		{"not a mapping", "- a\n- b\n",
			`file FILE line 1: the document must be a mapping`},
		{"syntax", "name: [a\n",
			`file FILE: yaml: line 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeFile(t, tt.text)
			got := loadErr(t, []string{"--config", file}, nil)
			want := "config: " + strings.ReplaceAll(tt.want, "FILE", file)
			if !strings.HasPrefix(got, want) {
				t.Errorf("error %q;\nwant it to begin %q", got, want)
			}
		})
	}
	got := loadErr(t, nil, map[string]string{"GRANARY_CONFIG": filepath.Join(t.TempDir(), "missing.yaml")})
	if !strings.HasPrefix(got, "config: config (env GRANARY_CONFIG): open ") {
		t.Errorf("missing file: %q", got)
	}
}

func TestFileForms(t *testing.T) {
	file := writeFile(t, `# comments only above
base: &seeds [10.0.0.1:7946]
`)
	if got := loadErr(t, []string{"--config", file}, nil); !strings.Contains(got, "base (file") {
		t.Errorf("an unknown top-level key: %q", got)
	}
	file = writeFile(t, `
cluster:
  id: c
  seeds: "10.0.0.1:7946, 10.0.0.2:7946"
  gossip:
storage: {provider: memory}
reminders:
  enabled: ~
`)
	c := loadOK(t, []string{"--config", file}, nil)
	if !slices.Equal(c.Cluster.Seeds, []string{"10.0.0.1:7946", "10.0.0.2:7946"}) || c.Cluster.Gossip.Listen != ":7946" ||
		c.Storage.Provider != "memory" || c.Reminders.Enabled != nil {
		t.Errorf("loaded %+v", c)
	}
	empty := writeFile(t, "# nothing set\n")
	if c := loadOK(t, []string{"--config", empty}, nil); c.Shutdown.Timeout != 30*time.Second {
		t.Errorf("an empty file changed the defaults: %+v", c)
	}
}

func TestFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--cluster.seedz=a:1"}, `config: cluster.seedz (flag --cluster.seedz): unknown flag; did you mean cluster.seeds?; --help lists them`},
		{[]string{"--name"}, `config: flag needs an argument: --name`},
		{[]string{"extra"}, `config: unexpected argument "extra"`},
	}
	for _, tt := range tests {
		if got := loadErr(t, tt.args, nil); !strings.HasPrefix(got, tt.want) {
			t.Errorf("load(%q): %q;\nwant it to begin %q", tt.args, got, tt.want)
		}
	}
	// A bool flag alone is true; an optional one too.
	c := loadOK(t, []string{"--tracing.insecure", "--reminders.enabled"}, nil)
	if !c.Tracing.Insecure || c.Reminders.Enabled == nil || !*c.Reminders.Enabled {
		t.Errorf("bool flags: %+v", c.Tracing)
	}
	c = loadOK(t, []string{"--reminders.enabled=auto"}, map[string]string{"GRANARY_REMINDERS_ENABLED": "false"})
	if c.Reminders.Enabled != nil {
		t.Errorf("--reminders.enabled=auto left %v", *c.Reminders.Enabled)
	}
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	_, err := load([]string{"--help"}, envOf(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("load(--help): %v; want flag.ErrHelp", err)
	}
	help := out.String()
	for _, f := range fields {
		line := "  --" + f.path + " " + f.arg + "\n      env " + envName(f.path) + ", default "
		if !strings.Contains(help, line) {
			t.Errorf("help lacks %q", line)
		}
	}
	for _, want := range []string{"--config file\n      env GRANARY_CONFIG", `--shutdown.timeout duration` + "\n" + `      env GRANARY_SHUTDOWN_TIMEOUT, default "30s"`,
		`env GRANARY_CLUSTER_GOSSIP_LISTEN, default ":7946"`} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
}

// TestSchemaMatchesFields checks that the yaml tags of Config and the
// field table name the same settings, and that each field's accessor
// reaches the struct field its tag names.
func TestSchemaMatchesFields(t *testing.T) {
	var c Config
	for _, f := range fields {
		value := map[string]string{"duration": "7s", "bool": "true", "true|false|auto": "true", "0..1": "0.25", "host:port,...": "h:1", "n": "17", "bytes": "4096"}[f.arg]
		if value == "" {
			value = "v-" + f.path
		}
		if err := f.set(&c, value); err != nil {
			t.Fatalf("%s: set %q: %v", f.path, value, err)
		}
	}
	data, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var tree map[string]any
	if err := yaml.Unmarshal(data, &tree); err != nil {
		t.Fatal(err)
	}
	leaves := map[string]string{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			p := strings.TrimPrefix(prefix+"."+k, ".")
			if sub, ok := v.(map[string]any); ok {
				walk(p, sub)
				continue
			}
			if list, ok := v.([]any); ok && len(list) == 1 {
				v = list[0]
			}
			leaves[p] = yamlScalar(v)
		}
	}
	walk("", tree)
	for _, f := range fields {
		got, ok := leaves[f.path]
		if !ok {
			t.Errorf("field %s has no yaml key", f.path)
			continue
		}
		if want := f.get(&c); got != want {
			t.Errorf("yaml key %s holds %q; the field's accessor %q", f.path, got, want)
		}
		delete(leaves, f.path)
	}
	for p := range leaves {
		t.Errorf("yaml key %s is not in the field table", p)
	}
}

func yamlScalar(v any) string {
	out, _ := yaml.Marshal(v)
	return strings.TrimSpace(string(out))
}

// EnvNames lists the variables Load reads: each one set alone is taken.
func TestEnvNamesAreRead(t *testing.T) {
	names := EnvNames()
	if len(names) != len(fields)+1 || names[0] != "GRANARY_CONFIG" {
		t.Fatalf("EnvNames = %q", names)
	}
	for _, f := range fields {
		read := false
		lookupEnv := func(name string) (string, bool) {
			if name == envName(f.path) {
				read = true
			}
			return "", false
		}
		if _, err := Load(nil, lookupEnv); err != nil {
			t.Fatal(err)
		}
		if !read || !slices.Contains(names, envName(f.path)) {
			t.Errorf("%s: read %v, listed %v", envName(f.path), read, slices.Contains(names, envName(f.path)))
		}
	}
}

// TestEmptyEnvTurnsOffOnlyWhatEmptyTurnsOff: a variable set to empty is
// taken for the settings whose empty value turns a subsystem off (the
// gateway here), and still counts as unset for every other setting.
func TestEmptyEnvTurnsOffOnlyWhatEmptyTurnsOff(t *testing.T) {
	t.Parallel()
	def := DefaultConfig()
	if def.Gateway.Listen == "" || def.Log.Format == "" {
		t.Fatalf("the defaults serve no gateway or have no log format: %+v", def)
	}

	c := loadOK(t, nil, map[string]string{"GRANARY_GATEWAY_LISTEN": "", "GRANARY_LOG_FORMAT": ""})
	if c.Gateway.Listen != "" {
		t.Errorf("GRANARY_GATEWAY_LISTEN= left the gateway on %q", c.Gateway.Listen)
	}
	if c.Log.Format != def.Log.Format {
		t.Errorf("GRANARY_LOG_FORMAT= changed the log format to %q; an empty variable counts as unset", c.Log.Format)
	}
	sc, closeStorage, err := c.Silo(context.Background(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	closeStorage()
	if sc.Gateway != nil {
		t.Errorf("GRANARY_GATEWAY_LISTEN= still configures a gateway: %+v", sc.Gateway)
	}

	if c := loadOK(t, nil, nil); c.Gateway.Listen != def.Gateway.Listen {
		t.Errorf("unset GRANARY_GATEWAY_LISTEN gives %q; want the default %q", c.Gateway.Listen, def.Gateway.Listen)
	}
	// A flag wins over the environment either way.
	if c := loadOK(t, []string{"--gateway.listen=127.0.0.1:0"}, map[string]string{"GRANARY_GATEWAY_LISTEN": ""}); c.Gateway.Listen != "127.0.0.1:0" {
		t.Errorf("--gateway.listen under GRANARY_GATEWAY_LISTEN= gives %q", c.Gateway.Listen)
	}
}
