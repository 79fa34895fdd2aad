package silo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/internal/transport"
	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/granaryio/granary/silo/internal/cluster"
	"github.com/granaryio/granary/silo/membership"
	"github.com/granaryio/granary/silo/placement"
)

// ClusterConfig makes a silo a member of a cluster: it gossips with the
// other silos, places grains over them, keeps its part of the grain
// directory and carries calls to them. Start from DefaultClusterConfig.
type ClusterConfig struct {
	// Membership is the gossip configuration: cluster ID, seeds, gossip
	// addresses, encryption key, failure detection. Its Name defaults to
	// the silo's Name, its Types are the grain types registered on the
	// silo, and its GRPCAddr defaults to the address of the silo's
	// listener (with the gossip advertise or bind address as its host when
	// the listener is bound to every interface).
	Membership membership.Config

	// GRPCListen is where the silo's gRPC server listens for the streams
	// of other silos, host:port; port 0 picks a free port. Default
	// ":7947".
	GRPCListen string

	// Transport sets the limits of the streams between silos and of the
	// connections to GRPCListen. Its ClusterID, Self and Rejections are
	// filled in.
	Transport transport.Config

	// ServerTLS and DialTLS secure the streams between silos with mutual
	// TLS: ServerTLS is the listener's (it must require and verify a
	// client certificate), DialTLS is for dialling peers (it presents
	// this silo's certificate and verifies theirs). Set both or neither;
	// ClusterTLS makes both from a tlsfiles.Source. Nil (the default):
	// plaintext, for a network no one else shares. Ignored with Listener
	// and Network, which bring their own.
	ServerTLS, DialTLS *tls.Config

	// Directory configures this silo's part of the grain directory. Its
	// Logger, Clock and Lost are filled in.
	Directory directory.Config

	// Placement picks the default placement strategy.
	Placement placement.Config

	// LoadReportInterval is how often the silo gossips its load (its
	// activation count and queued turns) when it changed, for
	// activation-count placement, and sends again the directory
	// registrations that a membership change could not deliver. Default
	// 1 s.
	LoadReportInterval time.Duration

	// ShutdownGossipDelay is how long Stop waits after telling the
	// cluster this silo is shutting down, before it hands its grains and
	// directory ranges over: the time for the news to spread, so the
	// other silos stop placing grains here and take over its directory
	// ranges first. Default 500 ms.
	ShutdownGossipDelay time.Duration

	// The seams, for tests. NewMembership makes the membership service
	// (default: memberlist); Listener accepts other silos' streams
	// (default: a gRPC server on GRPCListen); Network dials them (default:
	// gRPC).
	NewMembership func(cfg membership.Config, onEvent func(membership.Event)) (membership.Service, error)
	Listener      transport.Listener
	Network       transport.Network
}

// DefaultClusterConfig returns a cluster configuration for a LAN, with
// the cluster ID, seeds and addresses left to fill in.
func DefaultClusterConfig() ClusterConfig {
	return ClusterConfig{
		Membership:          membership.DefaultLANConfig(),
		GRPCListen:          ":7947",
		Transport:           transport.DefaultConfig(),
		Directory:           directory.DefaultConfig(),
		Placement:           placement.DefaultConfig(),
		LoadReportInterval:  time.Second,
		ShutdownGossipDelay: 500 * time.Millisecond,
	}
}

func (c *ClusterConfig) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: "Cluster." + field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Membership.ClusterID == "":
		return bad("Membership.ClusterID", "must not be empty")
	case c.Listener == nil && c.GRPCListen == "":
		return bad("GRPCListen", "must not be empty")
	case c.LoadReportInterval <= 0:
		return bad("LoadReportInterval", "%v must be positive", c.LoadReportInterval)
	case c.ShutdownGossipDelay < 0:
		return bad("ShutdownGossipDelay", "%v must not be negative", c.ShutdownGossipDelay)
	case (c.ServerTLS == nil) != (c.DialTLS == nil):
		return bad("ServerTLS", "set ServerTLS and DialTLS together: mutual TLS needs both sides")
	case c.ServerTLS != nil && c.ServerTLS.ClientAuth != tls.RequireAndVerifyClientCert &&
		(c.ServerTLS.ClientAuth != tls.RequireAnyClientCert || c.ServerTLS.VerifyConnection == nil && c.ServerTLS.VerifyPeerCertificate == nil):
		return bad("ServerTLS", "must require and verify client certificates (ClientAuth %v): between silos only mutual TLS keeps a stranger from sending envelopes", c.ServerTLS.ClientAuth)
	}
	if c.Listener == nil {
		if _, _, err := net.SplitHostPort(c.GRPCListen); err != nil {
			return bad("GRPCListen", "%q is not host:port: %v", c.GRPCListen, err)
		}
	}
	return nil
}

// ClusterTLS returns ServerTLS and DialTLS for mutual TLS between silos
// from src, which needs a certificate, its key and the cluster's CA. A
// peer is a silo when its certificate chains to the CA and is for both
// server and client use; names are not checked, since silos dial each
// other by the addresses they gossip, IPs as often as not. So a client's
// certificate (client use only) from the same CA cannot pass for a
// silo's; keep the cluster's CA for silos alone all the same.
func ClusterTLS(src *tlsfiles.Source) (server, dial *tls.Config, err error) {
	if !src.HasCert() || !src.HasCA() {
		return nil, nil, &ConfigError{Field: "Cluster.ServerTLS", Reason: "mutual TLS between silos needs a certificate, its key and the cluster's CA"}
	}
	server, err = src.ServerConfig(tlsfiles.MTLS, tlsfiles.ServerOptions{
		RequireUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, nil, err
	}
	return server, src.ClientConfig(tlsfiles.ClientOptions{
		SkipNameCheck: true,
		RequireUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}), nil
}

// startCluster makes the silo a member of its cluster. Start calls it
// after the runtime runs; on error, everything it started is stopped.
func (s *Silo) startCluster(ctx context.Context) error {
	c := s.cfg.Cluster
	p := cluster.Config{
		Name:                s.cfg.Name,
		AdminAddr:           s.cfg.AdminAddr,
		Rejections:          s.cfg.Rejections,
		Membership:          c.Membership,
		GRPCListen:          c.GRPCListen,
		Transport:           c.Transport,
		ServerTLS:           c.ServerTLS,
		DialTLS:             c.DialTLS,
		Directory:           c.Directory,
		Placement:           c.Placement,
		LoadReportInterval:  c.LoadReportInterval,
		ShutdownGossipDelay: c.ShutdownGossipDelay,
		NewMembership:       c.NewMembership,
		Listener:            c.Listener,
		Network:             c.Network,
	}
	if s.gw != nil {
		p.GatewayAddr = s.gw.Addr
	}
	cl, err := cluster.New(s.rt, p)
	if err != nil {
		return configError(err)
	}
	s.cl = cl // requests may arrive once the cluster serves
	s.rt.Cl = cl
	if s.gw != nil {
		s.gw.Cl = cl
	}
	if err := cl.Join(ctx); err != nil {
		cl.Close()
		return configError(err)
	}
	return nil
}

// ClusterAddrs returns the addresses this silo gossips on and takes
// other silos' streams on, as other silos reach them (a port 0 in the
// configuration shows as the port picked), or "" for a silo alone. Valid
// once Start has returned.
func (s *Silo) ClusterAddrs() (gossip, grpc string) {
	if s.cl == nil {
		return "", ""
	}
	return s.cl.Mship.Local().GossipAddr, s.cl.GrpcAddr
}

// Member returns this silo's member ID in its cluster, or "" for a silo
// alone.
func (s *Silo) Member() string {
	if s.cl == nil {
		return ""
	}
	return s.cl.SelfID
}
