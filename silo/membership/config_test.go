package membership

import (
	"errors"
	"strings"
	"testing"
	"time"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
)

// validConfig is a LAN profile with the required fields set.
func validConfig() Config {
	cfg := DefaultLANConfig()
	cfg.ClusterID = "prod"
	cfg.Name = "silo-a"
	cfg.GRPCAddr = "10.0.0.1:11111"
	return cfg
}

func TestProfilesValidate(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]Config{"LAN": DefaultLANConfig(), "WAN": DefaultWANConfig(), "Local": DefaultLocalConfig()} {
		cfg.ClusterID, cfg.Name, cfg.GRPCAddr = "c", "n", "127.0.0.1:1"
		if err := cfg.validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if cfg.ProbeTimeout >= cfg.ProbeInterval {
			t.Errorf("%s: ProbeTimeout %v >= ProbeInterval %v", name, cfg.ProbeTimeout, cfg.ProbeInterval)
		}
	}
	// The profiles leave the required fields to the caller.
	var ce *ConfigError
	lan := DefaultLANConfig()
	if err := lan.validate(); !errors.As(err, &ce) || ce.Field != "ClusterID" {
		t.Errorf("DefaultLANConfig().validate() = %v, want a ClusterID error", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field string
		edit  func(*Config)
	}{
		{"ClusterID", func(c *Config) { c.ClusterID = "" }},
		{"ClusterID", func(c *Config) { c.ClusterID = strings.Repeat("x", 256) }},
		{"ClusterID", func(c *Config) { c.ClusterID = "bad\x00id" }},
		{"ClusterID", func(c *Config) { c.ClusterID = "bad\xffutf8" }},
		{"Name", func(c *Config) { c.Name = "" }},
		{"Name", func(c *Config) { c.Name = "tab\there" }},
		{"Name", func(c *Config) { c.Name = strings.Repeat("n", 129) }},
		{"BindAddr", func(c *Config) { c.BindAddr = "" }},
		{"BindAddr", func(c *Config) { c.BindAddr = "localhost" }},
		{"BindPort", func(c *Config) { c.BindPort = -1 }},
		{"BindPort", func(c *Config) { c.BindPort = 65536 }},
		{"AdvertiseAddr", func(c *Config) { c.AdvertiseAddr = "not-an-ip" }},
		{"AdvertisePort", func(c *Config) { c.AdvertisePort = 70000 }},
		{"GRPCAddr", func(c *Config) { c.GRPCAddr = "" }},
		{"GRPCAddr", func(c *Config) { c.GRPCAddr = "10.0.0.1" }},
		{"GRPCAddr", func(c *Config) { c.GRPCAddr = ":11111" }},
		{"GRPCAddr", func(c *Config) { c.GRPCAddr = "10.0.0.1:0" }},
		{"Roles[1]", func(c *Config) { c.Roles = []string{"a", ""} }},
		{"Roles[2]", func(c *Config) { c.Roles = []string{"a", "b", "a"} }},
		{"Types[0]", func(c *Config) { c.Types = []string{"bad\nname"} }},
		{"Types[1]", func(c *Config) { c.Types = []string{"Counter", "Counter"} }},
		{"Seeds[2]", func(c *Config) { c.Seeds = []string{"10.0.0.2:7946", "seed:7946", "no-port"} }},
		{"Seeds[0]", func(c *Config) { c.Seeds = []string{"10.0.0.2:99999"} }},
		{"Seeds[1]", func(c *Config) { c.Seeds = []string{"10.0.0.2:7946", ":7946"} }},
		{"SeedDNS", func(c *Config) { c.SeedDNS = "silos.svc:7946" }},
		{"SeedPort", func(c *Config) { c.SeedPort = -2 }},
		{"SeedPort", func(c *Config) { c.SeedDNS, c.BindPort = "silos.svc", 0 }},
		{"JoinRetryInterval", func(c *Config) { c.JoinRetryInterval = 0 }},
		{"SecretKey", func(c *Config) { c.SecretKey = make([]byte, 15) }},
		{"SecretKey", func(c *Config) { c.SecretKey = make([]byte, 33) }},
		{"ProbeInterval", func(c *Config) { c.ProbeInterval = 0 }},
		{"ProbeTimeout", func(c *Config) { c.ProbeTimeout = -time.Millisecond }},
		{"ProbeTimeout", func(c *Config) { c.ProbeTimeout = c.ProbeInterval }},
		{"GossipInterval", func(c *Config) { c.GossipInterval = -1 }},
		{"TCPTimeout", func(c *Config) { c.TCPTimeout = 0 }},
		{"PushPullInterval", func(c *Config) { c.PushPullInterval = -time.Second }},
		{"ReconnectInterval", func(c *Config) { c.ReconnectInterval = -time.Second }},
		{"ReconnectTimeout", func(c *Config) { c.ReconnectTimeout = 0 }},
		{"LeavePropagateDelay", func(c *Config) { c.LeavePropagateDelay = -1 }},
		{"SuspicionMult", func(c *Config) { c.SuspicionMult = 0 }},
		{"SuspicionMaxTimeoutMult", func(c *Config) { c.SuspicionMaxTimeoutMult = 0 }},
		{"GossipNodes", func(c *Config) { c.GossipNodes = 0 }},
		{"RetransmitMult", func(c *Config) { c.RetransmitMult = 0 }},
	}
	for _, tt := range tests {
		cfg := validConfig()
		tt.edit(&cfg)
		err := cfg.validate()
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: validate() = %v, want a *ConfigError", tt.field, err)
			continue
		}
		if ce.Field != tt.field {
			t.Errorf("validate() field = %s (%v), want %s", ce.Field, err, tt.field)
		}
		if want := "membership: config: " + tt.field + ": "; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error %q does not start with %q", err, want)
		}
		if _, err := New(cfg, nil); err == nil {
			t.Errorf("%s: New accepted an invalid config", tt.field)
		}
	}
}

func TestConfigValidateAccepts(t *testing.T) {
	t.Parallel()
	for name, edit := range map[string]func(*Config){
		"seeds by name":       func(c *Config) { c.Seeds = []string{"silo-b.internal:7946", "[::1]:7946"} },
		"DNS seeds":           func(c *Config) { c.SeedDNS = "silos.granary.svc.cluster.local" },
		"DNS with port 0":     func(c *Config) { c.SeedDNS, c.BindPort, c.SeedPort = "silos", 0, 7946 },
		"AES-128":             func(c *Config) { c.SecretKey = make([]byte, 16) },
		"AES-256":             func(c *Config) { c.SecretKey = make([]byte, 32) },
		"advertise":           func(c *Config) { c.AdvertiseAddr, c.AdvertisePort = "192.0.2.7", 30000 },
		"no push/pull":        func(c *Config) { c.PushPullInterval = 0 },
		"IPv6 bind":           func(c *Config) { c.BindAddr = "::" },
		"gRPC by hostname":    func(c *Config) { c.GRPCAddr = "silo-a.granary:11111" },
		"255-byte cluster ID": func(c *Config) { c.ClusterID = strings.Repeat("c", 255) },
	} {
		cfg := validConfig()
		edit(&cfg)
		if err := cfg.validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestMemberlistConfigCopiesTuning(t *testing.T) {
	t.Parallel()
	cfg := validConfig()
	cfg.SecretKey = make([]byte, 24)
	mc := cfg.memberlistConfig("silo-a-xyz")
	switch {
	case mc.Name != "silo-a-xyz", mc.Label != "prod":
		t.Errorf("Name, Label = %q, %q", mc.Name, mc.Label)
	case mc.ProbeInterval != cfg.ProbeInterval, mc.ProbeTimeout != cfg.ProbeTimeout,
		mc.SuspicionMult != cfg.SuspicionMult, mc.SuspicionMaxTimeoutMult != cfg.SuspicionMaxTimeoutMult,
		mc.GossipInterval != cfg.GossipInterval, mc.GossipNodes != cfg.GossipNodes,
		mc.PushPullInterval != cfg.PushPullInterval, mc.TCPTimeout != cfg.TCPTimeout,
		mc.RetransmitMult != cfg.RetransmitMult:
		t.Errorf("tuning not copied: %+v", mc)
	case len(mc.SecretKey) != 24, mc.BindPort != cfg.BindPort, mc.AdvertisePort != cfg.BindPort:
		t.Errorf("key or ports not copied: %+v", mc)
	}
}

func TestStatusAndKinds(t *testing.T) {
	t.Parallel()
	for _, s := range []Status{StatusJoining, StatusActive, StatusShuttingDown, StatusDead} {
		back, err := StatusFromProto(s.Proto())
		if err != nil || back != s {
			t.Errorf("%v: round trip = %v, %v", s, back, err)
		}
		if strings.HasPrefix(s.String(), "Status(") {
			t.Errorf("%d has no name", int(s))
		}
	}
	if _, err := StatusFromProto(granaryv1.SiloStatus_SILO_STATUS_UNSPECIFIED); err == nil {
		t.Error("UNSPECIFIED converted")
	}
	if got := Status(9).Proto(); got != granaryv1.SiloStatus_SILO_STATUS_UNSPECIFIED {
		t.Errorf("Status(9).Proto() = %v", got)
	}
	if Status(9).String() != "Status(9)" || EventKind(9).String() != "EventKind(9)" {
		t.Error("unknown values badly named")
	}
	for k, want := range map[EventKind]string{EventJoined: "joined", EventUpdated: "updated", EventLeft: "left", EventFailed: "failed"} {
		if k.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(k), k.String(), want)
		}
	}
	m := Member{Roles: []string{"edge"}, Types: []string{"Counter"}}
	if !m.Hosts("Counter") || m.Hosts("Chat") || !m.HasRole("edge") || m.HasRole("core") {
		t.Error("Hosts or HasRole wrong")
	}
}
