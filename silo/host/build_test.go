package host

import (
	"bytes"
	"context"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/membership"
	"github.com/granaryio/granary/silo/storage"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestSiloAlone(t *testing.T) {
	dir := t.TempDir()
	c := loadOK(t, []string{"--name=solo", "--storage.data_dir=" + dir, "--gateway.listen=127.0.0.1:0"}, nil)
	sc, closeStorage, err := c.Silo(context.Background(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer closeStorage()
	switch {
	case sc.Name != "solo":
		t.Errorf("Name %q", sc.Name)
	case sc.Cluster != nil:
		t.Errorf("a silo alone has a cluster: %+v", sc.Cluster)
	case sc.Gateway == nil || sc.Gateway.Listen != "127.0.0.1:0":
		t.Errorf("Gateway %+v", sc.Gateway)
	case sc.DataDir != dir || sc.Storage != nil:
		t.Errorf("embedded storage: DataDir %q, Storage %v", sc.DataDir, sc.Storage)
	case sc.Reminders == nil:
		t.Errorf("reminders off with the embedded store")
	case sc.Logger == nil:
		t.Errorf("no logger")
	}

	c = loadOK(t, []string{"--gateway.listen=", "--storage.provider=memory", "--reminders.min_period=2m"}, nil)
	sc, closeStorage, err = c.Silo(context.Background(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	closeStorage()
	if sc.Gateway != nil || sc.DataDir != "" || sc.Reminders != nil {
		t.Errorf("memory, no gateway: %+v %q %+v", sc.Gateway, sc.DataDir, sc.Reminders)
	}
	if _, ok := sc.Storage[grain.DefaultStorage].(*storage.Memory); !ok {
		t.Errorf("Storage %v; want a memory provider", sc.Storage)
	}

	c = loadOK(t, []string{"--storage.provider=memory", "--reminders.enabled", "--reminders.min_period=2m"}, nil)
	if sc, _, err = c.Silo(context.Background(), zap.NewNop()); err != nil || sc.Reminders == nil || sc.Reminders.MinPeriod != 2*time.Minute {
		t.Errorf("reminders.enabled with memory: %+v, %v", sc.Reminders, err)
	}
	c = loadOK(t, []string{"--reminders.enabled=false", "--storage.data_dir=" + dir}, nil)
	if sc, _, err = c.Silo(context.Background(), zap.NewNop()); err != nil || sc.Reminders != nil {
		t.Errorf("reminders.enabled=false with embedded: %+v, %v", sc.Reminders, err)
	}

	bad := DefaultConfig()
	bad.Log.Level = "loud"
	if _, closeStorage, err := bad.Silo(context.Background(), zap.NewNop()); err == nil || !strings.Contains(err.Error(), "log.level (set in code)") {
		t.Errorf("Silo of a bad Config set in code: %v", err)
	} else {
		closeStorage()
	}
}

func TestSiloCluster(t *testing.T) {
	key := "MDEyMzQ1Njc4OWFiY2RlZg=="
	env := map[string]string{
		"GRANARY_NAME":                     "s1",
		"GRANARY_CLUSTER_ID":               "prod",
		"GRANARY_CLUSTER_GOSSIP_LISTEN":    ":7000",
		"GRANARY_CLUSTER_GOSSIP_ADVERTISE": "10.1.2.3:7001",
		"GRANARY_CLUSTER_GRPC_LISTEN":      "127.0.0.1:7002",
		"GRANARY_CLUSTER_SEEDS":            "10.1.2.4:7000, 10.1.2.5:7000",
		"GRANARY_CLUSTER_SEED_DNS":         "silos.default.svc",
		"GRANARY_CLUSTER_SECRET_KEY":       key,
		"GRANARY_STORAGE_PROVIDER":         "memory",
		"GRANARY_GATEWAY_ADVERTISE":        "gw.example:30000",
	}
	c := loadOK(t, nil, env)
	sc, closeStorage, err := c.Silo(context.Background(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer closeStorage()
	if sc.Cluster == nil {
		t.Fatal("no cluster")
	}
	m := sc.Cluster.Membership
	lan := membership.DefaultLANConfig()
	switch {
	case m.ClusterID != "prod" || m.Name != "s1":
		t.Errorf("ClusterID %q Name %q", m.ClusterID, m.Name)
	case m.BindAddr != "0.0.0.0" || m.BindPort != 7000:
		t.Errorf("bind %s:%d", m.BindAddr, m.BindPort)
	case m.AdvertiseAddr != "10.1.2.3" || m.AdvertisePort != 7001:
		t.Errorf("advertise %s:%d", m.AdvertiseAddr, m.AdvertisePort)
	case !slices.Equal(m.Seeds, []string{"10.1.2.4:7000", "10.1.2.5:7000"}) || m.SeedDNS != "silos.default.svc":
		t.Errorf("seeds %q dns %q", m.Seeds, m.SeedDNS)
	case string(m.SecretKey) != "0123456789abcdef":
		t.Errorf("secret key %q", m.SecretKey)
	case m.ProbeInterval != lan.ProbeInterval:
		t.Errorf("the lan profile probes every %v", m.ProbeInterval)
	case sc.Cluster.GRPCListen != "127.0.0.1:7002":
		t.Errorf("GRPCListen %q", sc.Cluster.GRPCListen)
	case sc.Gateway == nil || sc.Gateway.Advertise != "gw.example:30000":
		t.Errorf("Gateway %+v", sc.Gateway)
	case sc.DataDir != "" || sc.Reminders != nil:
		t.Errorf("memory in a cluster: DataDir %q Reminders %+v", sc.DataDir, sc.Reminders)
	}

	for profile, want := range map[string]time.Duration{
		"local": membership.DefaultLocalConfig().ProbeInterval,
		"wan":   membership.DefaultWANConfig().ProbeInterval,
	} {
		env["GRANARY_CLUSTER_PROFILE"] = profile
		c := loadOK(t, nil, env)
		m := c.membership()
		if m.ProbeInterval != want || m.BindPort != 7000 || m.ClusterID != "prod" {
			t.Errorf("profile %s: probes every %v, port %d; want %v, 7000", profile, m.ProbeInterval, m.BindPort, want)
		}
	}
	if w := membership.DefaultWANConfig(); w.ProbeTimeout >= w.ProbeInterval || w.ProbeInterval <= lan.ProbeInterval {
		t.Errorf("wan profile: probe timeout %v, interval %v", w.ProbeTimeout, w.ProbeInterval)
	}
}

// TestSiloPostgres opens the postgres provider when a test database is
// configured (scripts/postgres-test.sh).
func TestSiloPostgres(t *testing.T) {
	dsn := os.Getenv("GRANARY_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("GRANARY_TEST_POSTGRES_DSN is not set")
	}
	c := loadOK(t, nil, map[string]string{
		"GRANARY_CLUSTER_ID":           "host-test",
		"GRANARY_STORAGE_PROVIDER":     "postgres",
		"GRANARY_STORAGE_POSTGRES_DSN": dsn,
	})
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	sc, closeStorage, err := c.Silo(ctx, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer closeStorage()
	if sc.Storage[grain.DefaultStorage] == nil || sc.Reminders == nil {
		t.Errorf("postgres: Storage %v Reminders %+v", sc.Storage, sc.Reminders)
	}
}

func TestRedaction(t *testing.T) {
	tests := []struct{ dsn, want string }{
		{"postgres://u:hunter2@db:5432/g?sslmode=disable", "postgres://u:xxxxx@db:5432/g?sslmode=disable"},
		{"postgres://db/g?user=u&password=hunter2", "postgres://db/g?user=u&password=xxxxx"},
		{"postgres://u:hunter2@/g?host=/var/run/postgresql", "postgres://u:xxxxx@/g?host=/var/run/postgresql"},
		{"postgres://u:hun%ter2@db:5432/g", "postgres://u:xxxxx@db:5432/g"},
		{"postgres://u:hun#ter@2@db/g", "postgres://u:xxxxx@db/g"},
		{"postgres://u@db/g", "postgres://u@db/g"},
		{"host=db password=hunter2 user=u", "host=db password=xxxxx user=u"},
		{"host=db password = 'hunter 2' user=u", "host=db password = xxxxx user=u"},
		{"host=db user=u", "host=db user=u"},
	}
	for _, tt := range tests {
		if got := redactDSN(tt.dsn); got != tt.want {
			t.Errorf("redactDSN(%q) = %q; want %q", tt.dsn, got, tt.want)
		}
	}

	key, oldKey := "MDEyMzQ1Njc4OWFiY2RlZg==", "ZmVkY2JhOTg3NjU0MzIxMA=="
	file := writeFile(t, "log:\n  level: debug\n")
	c := loadOK(t, []string{"--config", file, "--name=n1"}, map[string]string{
		"GRANARY_CLUSTER_ID":                   "prod",
		"GRANARY_CLUSTER_SECRET_KEY":           key,
		"GRANARY_CLUSTER_ACCEPTED_SECRET_KEYS": oldKey,
		"GRANARY_STORAGE_PROVIDER":             "postgres",
		"GRANARY_STORAGE_POSTGRES_DSN":         "postgres://u:hunter2@db/g",
	})
	c.Tracing.Exporter = "stdout" // set in code
	core, logs := observer.New(zap.InfoLevel)
	c.logLoaded(zap.New(core))
	entries := logs.FilterMessage("config loaded").All()
	if len(entries) != 1 {
		t.Fatalf("%d config loaded entries", len(entries))
	}
	fields := entries[0].ContextMap()
	text := strings.Join(toStrings(fields["settings"]), "\n")
	for _, secret := range []string{key, oldKey, "hunter2"} {
		if strings.Contains(text, secret) {
			t.Errorf("the log shows %q:\n%s", secret, text)
		}
	}
	for _, want := range []string{
		`log.level="debug" (file ` + file + ` line 2)`,
		`name="n1" (flag --name)`,
		`cluster.secret_key="(redacted)" (env GRANARY_CLUSTER_SECRET_KEY)`,
		`cluster.accepted_secret_keys="(redacted)" (env GRANARY_CLUSTER_ACCEPTED_SECRET_KEYS)`,
		`storage.postgres.dsn="postgres://u:xxxxx@db/g" (env GRANARY_STORAGE_POSTGRES_DSN)`,
		`tracing.exporter="stdout" (set in code)`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("settings lack %q:\n%s", want, text)
		}
	}
	if got := toStrings(fields["sources"]); !slices.Equal(got, []string{"defaults", "file", "env", "flags", "code"}) {
		t.Errorf("sources %q", got)
	}
	if fields["file"] != file {
		t.Errorf("file %v", fields["file"])
	}
}

func toStrings(v any) []string {
	items, _ := v.([]any)
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, _ := it.(string)
		out = append(out, s)
	}
	return out
}

func TestAdvertisedAdmin(t *testing.T) {
	alone := DefaultConfig()
	clustered := DefaultConfig()
	clustered.Cluster.ID = "c"
	clustered.Cluster.Gossip.Advertise = "10.9.8.7:7946"
	bound := DefaultConfig()
	bound.Cluster.ID = "c"
	bound.Cluster.Gossip.Listen = "10.1.1.1:7946"
	explicit := DefaultConfig()
	explicit.Admin.Advertise = "admin.example:8080"
	tests := []struct {
		name  string
		c     Config
		bound string
		want  string // "" means a routable IP with the bound port
	}{
		{"explicit", explicit, "0.0.0.0:8080", "admin.example:8080"},
		{"loopback stays", alone, "127.0.0.1:4321", "127.0.0.1:4321"},
		{"gossip advertise host", clustered, "0.0.0.0:8080", "10.9.8.7:8080"},
		{"gossip advertise host, IPv6 any", clustered, "[::]:8080", "10.9.8.7:8080"},
		{"gossip listen host", bound, "0.0.0.0:8080", "10.1.1.1:8080"},
		{"hostname's IP", alone, "[::]:8080", ""},
	}
	for _, tt := range tests {
		var cc *silo.ClusterConfig
		if tt.c.Cluster.ID != "" {
			cc = &silo.ClusterConfig{Membership: tt.c.membership()}
		}
		got := tt.c.advertisedAdmin(tt.bound, cc)
		if tt.want != "" {
			if got != tt.want {
				t.Errorf("%s: %q; want %q", tt.name, got, tt.want)
			}
			continue
		}
		host, port, err := net.SplitHostPort(got)
		if ip := net.ParseIP(host); err != nil || port != "8080" || ip == nil || ip.IsUnspecified() {
			t.Errorf("%s: %q; want a routable IP and port 8080", tt.name, got)
		}
	}
}

// A silo whose gossip listens on every interface and names no advertise
// address still gives the others one address to reach its gossip and its
// gRPC server at: Silo would otherwise refuse to start in a container.
func TestUnspecifiedGossipGetsAnAdvertiseAddress(t *testing.T) {
	c := loadOK(t, nil, map[string]string{
		"GRANARY_CLUSTER_ID":            "prod",
		"GRANARY_STORAGE_PROVIDER":      "memory",
		"GRANARY_CLUSTER_GOSSIP_LISTEN": ":7946",
	})
	sc, closeStorage, err := c.Silo(context.Background(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer closeStorage()
	m := sc.Cluster.Membership
	if ip := net.ParseIP(m.AdvertiseAddr); ip == nil || ip.IsUnspecified() {
		t.Errorf("AdvertiseAddr = %q, want an IP others can dial", m.AdvertiseAddr)
	}
	if got, want := c.advertisedAdmin("[::]:8080", sc.Cluster), net.JoinHostPort(m.AdvertiseAddr, "8080"); got != want {
		t.Errorf("admin address %q, want %q: the host the gossip is reached at", got, want)
	}
}

// TestOverloadSettingsReachTheSilo sets the close bound, the queue limits,
// load shedding and memory collection from a file, the environment and
// flags, and finds each value in the silo.Config, which silo.New accepts.
func TestOverloadSettingsReachTheSilo(t *testing.T) {
	file := writeFile(t, `
shutdown:
  close_timeout: 7s
queue_limits:
  soft: 100
  hard: 400
  wait: 300ms
load_shedding:
  enabled: true
  cpu_limit: 0.8
  heap_limit: 1073741824
  latency_limit: 150ms
  min_concurrency: 24
  window: 10s
  hysteresis: 0.75
  retry_after: 2s
memory_collection:
  heap_target: 536870912
  interval: 250ms
  max_per_round: 50
`)
	c := loadOK(t, []string{"--config", file, "--queue_limits.hard=500", "--load_shedding.retry_after=3s"},
		map[string]string{"GRANARY_LOAD_SHEDDING_CPU_LIMIT": "0.85", "GRANARY_MEMORY_COLLECTION_MAX_PER_ROUND": "60",
			"GRANARY_LOAD_SHEDDING_LATENCY_LIMIT": "250ms"})
	sc, closeStorage, err := c.Silo(context.Background(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	closeStorage()
	if sc.CloseTimeout != 7*time.Second {
		t.Errorf("CloseTimeout %v, want 7s", sc.CloseTimeout)
	}
	if want := (silo.QueueLimits{Soft: 100, Hard: 500, Wait: 300 * time.Millisecond}); sc.QueueLimits != want {
		t.Errorf("QueueLimits %+v, want %+v", sc.QueueLimits, want)
	}
	wantShed := silo.LoadSheddingConfig{Enabled: true, CPULimit: 0.85, HeapLimit: 1 << 30, LatencyLimit: 250 * time.Millisecond, MinConcurrency: 24, Window: 10 * time.Second, Hysteresis: 0.75, RetryAfter: 3 * time.Second}
	if sc.LoadShedding != wantShed {
		t.Errorf("LoadShedding %+v, want %+v", sc.LoadShedding, wantShed)
	}
	wantMem := silo.MemoryCollectionConfig{HeapTarget: 512 << 20, Interval: 250 * time.Millisecond, MaxPerRound: 60}
	if sc.MemoryCollection != wantMem {
		t.Errorf("MemoryCollection %+v, want %+v", sc.MemoryCollection, wantMem)
	}
	for path, want := range map[string]string{
		"queue_limits.hard":               "flag --queue_limits.hard",
		"load_shedding.cpu_limit":         "env GRANARY_LOAD_SHEDDING_CPU_LIMIT",
		"memory_collection.heap_target":   "file " + file + " line 18",
		"queue_limits.wait":               "file " + file + " line 7",
		"load_shedding.latency_limit":     "env GRANARY_LOAD_SHEDDING_LATENCY_LIMIT",
		"memory_collection.max_per_round": "env GRANARY_MEMORY_COLLECTION_MAX_PER_ROUND",
	} {
		if got := c.source(path, nil); got != want {
			t.Errorf("source of %s %q, want %q", path, got, want)
		}
	}
	s, err := silo.New(sc)
	if err != nil {
		t.Fatalf("silo.New refuses what the host accepted: %v", err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestOverloadDefaultsAreTheSilos: a host that sets none of the overload
// settings runs the silo with silo.DefaultConfig's.
func TestOverloadDefaultsAreTheSilos(t *testing.T) {
	c := loadOK(t, []string{"--storage.provider=memory"}, nil)
	sc, closeStorage, err := c.Silo(context.Background(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	closeStorage()
	def := silo.DefaultConfig()
	if sc.CloseTimeout != def.CloseTimeout || sc.QueueLimits != def.QueueLimits ||
		sc.LoadShedding != def.LoadShedding || sc.MemoryCollection != def.MemoryCollection {
		t.Errorf("the host's defaults give close %v, queues %+v, shedding %+v, memory %+v;\nthe silo's are %v, %+v, %+v, %+v",
			sc.CloseTimeout, sc.QueueLimits, sc.LoadShedding, sc.MemoryCollection,
			def.CloseTimeout, def.QueueLimits, def.LoadShedding, def.MemoryCollection)
	}
}

// TestStreamsSettingsReachTheSilo: the stream providers named in the
// configuration become the silo's, the durable one with its retention,
// and a bad setting is refused naming its field.
func TestStreamsSettingsReachTheSilo(t *testing.T) {
	c := loadOK(t, []string{"--storage.provider=memory", "--streams.memory_provider=default", "--streams.max_age=24h"},
		map[string]string{"GRANARY_STREAMS_DURABLE_PROVIDER": "logged", "GRANARY_STREAMS_PARTITIONS": "8", "GRANARY_STREAMS_MAX_BYTES": "1048576"})
	sc, closeStorage, err := c.Silo(context.Background(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	closeStorage()
	want := &silo.StreamsConfig{Providers: map[string]silo.StreamProviderConfig{
		"default": {},
		"logged":  {Kind: "durable", Partitions: 8, MaxAge: 24 * time.Hour, MaxBytes: 1 << 20},
	}}
	if !reflect.DeepEqual(sc.Streams, want) {
		t.Fatalf("Streams %+v, want %+v", sc.Streams, want)
	}
	s, err := silo.New(sc)
	if err != nil {
		t.Fatalf("silo.New refuses what the host accepted: %v", err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"--streams.durable_provider=a/b"}, "streams.durable_provider"},
		{[]string{"--streams.memory_provider=x", "--streams.durable_provider=x"}, "streams.durable_provider"},
		{[]string{"--streams.memory_provider=x", "--streams.partitions=4"}, "streams.partitions"},
		{[]string{"--streams.durable_provider=x", "--streams.max_age=-1s"}, "streams.max_age"},
	} {
		_, err := load(append([]string{"--storage.provider=memory"}, tc.args...), envOf(nil), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.field)
		}
	}
}
