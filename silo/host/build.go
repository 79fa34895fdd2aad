package host

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/membership"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/pgstore"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/credentials"
)

// Silo validates c and builds the silo.Config it describes, logging to
// logger: the cluster, the gateway, the default storage provider, the
// reminder service, the close bound and the overload settings. For the postgres provider it opens the store within
// ctx; closeStorage closes what Silo opened, once the silo has stopped
// (it is never nil). The metrics and tracing filters and AdminAddr are
// Run's to add.
func (c Config) Silo(ctx context.Context, logger *zap.Logger) (cfg silo.Config, closeStorage func(), err error) {
	closeStorage = func() {}
	if err := c.Validate(); err != nil {
		return silo.Config{}, closeStorage, err
	}
	cfg = silo.DefaultConfig()
	cfg.Name = c.Name
	cfg.Logger = logger
	cfg.CloseTimeout = c.Shutdown.CloseTimeout
	cfg.QueueLimits = silo.QueueLimits{Soft: c.QueueLimits.Soft, Hard: c.QueueLimits.Hard, Wait: c.QueueLimits.Wait}
	ls := &c.LoadShedding
	cfg.LoadShedding = silo.LoadSheddingConfig{
		Enabled: ls.Enabled, CPULimit: ls.CPULimit, HeapLimit: ls.HeapLimit, LatencyLimit: ls.LatencyLimit,
		MinConcurrency: ls.MinConcurrency, Window: ls.Window, Hysteresis: ls.Hysteresis, RetryAfter: ls.RetryAfter,
	}
	mc := &c.MemoryCollection
	cfg.MemoryCollection = silo.MemoryCollectionConfig{HeapTarget: mc.HeapTarget, Interval: mc.Interval, MaxPerRound: mc.MaxPerRound}
	if c.Cluster.ID != "" {
		cc := silo.DefaultClusterConfig()
		cc.Membership = c.membership()
		cc.GRPCListen = c.Cluster.GRPC.Listen
		if err := c.clusterTLS(&cc, logger); err != nil {
			return silo.Config{}, closeStorage, err
		}
		cfg.Cluster = &cc
	}
	if c.Gateway.Listen != "" {
		gc := silo.DefaultGatewayConfig()
		gc.Listen = c.Gateway.Listen
		gc.Advertise = c.Gateway.Advertise
		gc.Transport.MaxConnections = c.Gateway.MaxConnections
		gwSrc, gwTLS, err := c.serverTLS("gateway.tls", c.Gateway.TLS, logger, tlsfiles.ServerOptions{})
		if err != nil {
			return silo.Config{}, closeStorage, err
		}
		if gwTLS != nil {
			gc.Credentials = credentials.NewTLS(gwTLS)
		}
		if gc.Authenticator, err = c.gatewayAuth(gwSrc, logger); err != nil {
			return silo.Config{}, closeStorage, err
		}
		cfg.Gateway = &gc
	}
	switch c.provider() {
	case providerMemory:
		cfg.Storage = map[string]storage.Provider{grain.DefaultStorage: storage.NewMemory(0)}
	case providerEmbedded:
		cfg.DataDir = c.Storage.DataDir
	case providerPostgres:
		serviceID := c.Storage.Postgres.ServiceID
		if serviceID == "" {
			serviceID = c.Cluster.ID
		}
		store, err := pgstore.Open(ctx, pgstore.Config{DSN: c.Storage.Postgres.DSN, ServiceID: serviceID})
		if err != nil {
			// pgstore's errors name the host, never the password.
			return silo.Config{}, closeStorage, fmt.Errorf("host: opening the postgres store (storage.postgres.dsn): %w", err)
		}
		cfg.Storage = map[string]storage.Provider{grain.DefaultStorage: store}
		closeStorage = store.Close
	}
	if c.remindersEnabled() {
		cfg.Reminders = &silo.RemindersConfig{MinPeriod: c.Reminders.MinPeriod}
	}
	cfg.Streams = c.streams()
	return cfg, closeStorage, nil
}

// membership is the gossip configuration of a valid c in a cluster.
func (c *Config) membership() membership.Config {
	var m membership.Config
	switch c.Cluster.Profile {
	case "local":
		m = membership.DefaultLocalConfig()
	case "wan":
		m = membership.DefaultWANConfig()
	default:
		m = membership.DefaultLANConfig()
	}
	m.ClusterID = c.Cluster.ID
	m.Name = c.Name
	host, port, _ := net.SplitHostPort(c.Cluster.Gossip.Listen) // Validate checked it
	if host == "" {
		host = "0.0.0.0"
	}
	m.BindAddr, m.BindPort = host, parsePort(port)
	if a := c.Cluster.Gossip.Advertise; a != "" {
		host, port, _ := net.SplitHostPort(a)
		m.AdvertiseAddr, m.AdvertisePort = host, parsePort(port)
	} else if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		// Bound to every interface: the other silos need one address to
		// reach this one's gossip and gRPC at, so pick it here, as the
		// admin address is picked.
		m.AdvertiseAddr = c.routableHost()
	}
	m.Seeds = slices.Clone(c.Cluster.Seeds)
	m.SeedDNS = c.Cluster.SeedDNS
	if c.Cluster.SecretKey != "" {
		m.SecretKey, _ = base64.StdEncoding.DecodeString(c.Cluster.SecretKey)
	}
	for _, k := range c.Cluster.AcceptedSecretKeys {
		raw, _ := base64.StdEncoding.DecodeString(k) // Validate checked it
		m.AcceptedKeys = append(m.AcceptedKeys, raw)
	}
	return m
}

// NewLogger builds the logger c.Log describes, writing to standard
// error: JSON objects or console lines, from the configured level up.
func (c Config) NewLogger() (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.Log.Level)
	if err != nil {
		return nil, &FieldError{Field: "log.level", Source: c.source("log.level", nil), Reason: err.Error()}
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.Encoding = c.Log.Format
	if c.Log.Format == "console" {
		zc.EncoderConfig = zap.NewDevelopmentEncoderConfig()
	}
	zc.EncoderConfig.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	zc.EncoderConfig.EncodeDuration = zapcore.StringDurationEncoder
	zc.OutputPaths = []string{"stderr"}
	zc.ErrorOutputPaths = []string{"stderr"}
	return zc.Build()
}

// logLoaded logs the configuration: the sources used and each setting
// that is not its default, with where it came from; secrets redacted.
func (c *Config) logLoaded(log *zap.Logger) {
	def := DefaultConfig()
	var settings []string
	used := map[string]bool{}
	for _, f := range fields {
		src := c.source(f.path, &def)
		if src == "default" {
			continue
		}
		settings = append(settings, fmt.Sprintf("%s=%q (%s)", f.path, f.logValue(c), src))
		switch {
		case strings.HasPrefix(src, "file "):
			used["file"] = true
		case strings.HasPrefix(src, "env "):
			used["env"] = true
		case strings.HasPrefix(src, "flag "):
			used["flags"] = true
		default:
			used["code"] = true
		}
	}
	sources := []string{"defaults"}
	for _, s := range []string{"file", "env", "flags", "code"} {
		if used[s] {
			sources = append(sources, s)
		}
	}
	log.Info("config loaded",
		zap.String("file", c.file),
		zap.Strings("sources", sources),
		zap.Strings("settings", settings),
		zap.String("cluster", c.Cluster.ID),
		zap.String("storage", c.provider()),
		zap.Bool("reminders", c.remindersEnabled()),
		zap.String("tracing", c.Tracing.Exporter))
}

// source says where the field at path got its value: the source Load
// recorded, else "set in code" if it differs from def (DefaultConfig,
// made here when nil), else "default".
func (c *Config) source(path string, def *Config) string {
	if s, ok := c.sources[path]; ok {
		return s
	}
	if def == nil {
		d := DefaultConfig()
		def = &d
	}
	if f := fieldByPath[path]; f != nil && f.get(c) != f.get(def) {
		return "set in code"
	}
	return "default"
}

// routableHost is a host other machines can reach this one at, for an
// address bound to every interface: an IP the hostname resolves to, else
// the first private or global unicast IP of an interface, else the
// loopback address.
func (c *Config) routableHost() string {
	if name, err := os.Hostname(); err == nil {
		if ips, err := net.LookupIP(name); err == nil {
			for _, ip := range ips {
				if !ip.IsLoopback() && !ip.IsUnspecified() {
					return ip.String()
				}
			}
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && (ipn.IP.IsPrivate() || ipn.IP.IsGlobalUnicast()) {
				return ipn.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// advertisedAdmin is the admin address to gossip for a server bound to
// bound: admin.advertise, else bound with a routable host in place of an
// unspecified one. In a cluster (cc not nil) that host is the one the
// silo's gossip is reached at, which membership chose; alone, routableHost.
func (c *Config) advertisedAdmin(bound string, cc *silo.ClusterConfig) string {
	if c.Admin.Advertise != "" {
		return c.Admin.Advertise
	}
	host, port, err := net.SplitHostPort(bound)
	if err != nil || !unspecifiedHost(host) {
		return bound
	}
	host = ""
	if cc != nil {
		for _, h := range []string{cc.Membership.AdvertiseAddr, cc.Membership.BindAddr} {
			if !unspecifiedHost(h) {
				host = h
				break
			}
		}
	}
	if host == "" {
		host = c.routableHost()
	}
	return net.JoinHostPort(host, port)
}

// unspecifiedHost reports whether host names no one machine: empty, or
// an address of every interface.
func unspecifiedHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}
