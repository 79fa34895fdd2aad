package host

import (
	"crypto/tls"
	"errors"

	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin"
	"go.uber.org/zap"
)

// loadTLS reads the files of the TLS section at path, or returns nil when
// its mode is off. An error is a FieldError naming the file's setting.
func (c *Config) loadTLS(path string, t TLSConfig, log *zap.Logger) (*tlsfiles.Source, error) {
	if t.Mode == tlsOff || t.Mode == "" {
		return nil, nil
	}
	for _, f := range []struct{ key, value string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"ca_file", t.CAFile}} {
		if f.value == "" {
			continue
		}
		// Load each file alone first, so the error names the one at
		// fault.
		files := tlsfiles.Files{CA: f.value}
		if f.key != "ca_file" {
			files = tlsfiles.Files{Cert: t.CertFile, Key: t.KeyFile}
		}
		if _, err := tlsfiles.Load(files, tlsfiles.Options{}); err != nil {
			field := path + "." + f.key
			return nil, &FieldError{Field: field, Source: c.source(field, nil), Reason: err.Error()}
		}
	}
	src, err := tlsfiles.Load(tlsfiles.Files{Cert: t.CertFile, Key: t.KeyFile, CA: t.CAFile},
		tlsfiles.Options{Logger: log.With(zap.String("tls", path))})
	if err != nil {
		return nil, &FieldError{Field: path, Source: c.source(path+".mode", nil), Reason: err.Error()}
	}
	return src, nil
}

// serverTLS is the server configuration of the TLS section at path, or
// nil when its mode is off.
func (c *Config) serverTLS(path string, t TLSConfig, log *zap.Logger, o tlsfiles.ServerOptions) (*tlsfiles.Source, *tls.Config, error) {
	src, err := c.loadTLS(path, t, log)
	if src == nil || err != nil {
		return nil, nil, err
	}
	mode, _ := tlsfiles.ParseMode(t.Mode) // Validate checked it
	cfg, err := src.ServerConfig(mode, o)
	if err != nil {
		return nil, nil, &FieldError{Field: path + ".mode", Source: c.source(path+".mode", nil), Reason: err.Error()}
	}
	return src, cfg, nil
}

// clusterTLS sets cc's mutual TLS from cluster.tls.
func (c *Config) clusterTLS(cc *silo.ClusterConfig, log *zap.Logger) error {
	src, err := c.loadTLS("cluster.tls", c.Cluster.TLS, log)
	if src == nil || err != nil {
		return err
	}
	cc.ServerTLS, cc.DialTLS, err = silo.ClusterTLS(src)
	if err != nil {
		return &FieldError{Field: "cluster.tls", Source: c.source("cluster.tls.mode", nil), Reason: err.Error()}
	}
	return nil
}

// loadTokens reads the token file at field's path, or returns nil when
// it is "".
func (c *Config) loadTokens(field, path string, log *zap.Logger) (*auth.TokenFile, error) {
	if path == "" {
		return nil, nil
	}
	tf, err := auth.LoadTokenFile(path, auth.TokenFileOptions{Logger: log})
	if err != nil {
		return nil, &FieldError{Field: field, Source: c.source(field, nil), Reason: err.Error()}
	}
	if tf.Tokens().Len() == 0 {
		return nil, &FieldError{Field: field, Source: c.source(field, nil), Reason: errors.New("the token file lists no token: every call would be refused").Error()}
	}
	return tf, nil
}

// adminConfig is the admin server's TLS and credentials from admin.*.
func (c *Config) adminConfig(log *zap.Logger) (admin.Config, error) {
	acfg := admin.Config{Listen: c.Admin.Listen, Logger: log}
	src, serverTLS, err := c.serverTLS("admin.tls", c.Admin.TLS, log, tlsfiles.ServerOptions{NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		return acfg, err
	}
	if src != nil {
		acfg.TLS = serverTLS
		// Silos reach each other's admin servers by the addresses they
		// gossip, IPs as often as not: the CA vouches for the peer.
		acfg.PeerTLS = src.ClientConfig(tlsfiles.ClientOptions{SkipNameCheck: true, NextProtos: []string{"h2", "http/1.1"}})
		acfg.CertAdmins = src.HasCA()
	}
	if acfg.Tokens, err = c.loadTokens("admin.token_file", c.Admin.TokenFile, log); err != nil {
		return acfg, err
	}
	return acfg, nil
}

// gatewayAuth is the gateway's authenticator: a client certificate's
// subject when gateway.tls has a CA, else a bearer token from
// gateway.auth.token_file; nil when neither is configured.
func (c *Config) gatewayAuth(src *tlsfiles.Source, log *zap.Logger) (auth.Authenticator, error) {
	var chain []auth.Authenticator
	if src != nil && src.HasCA() {
		chain = append(chain, auth.ClientCert())
	}
	tf, err := c.loadTokens("gateway.auth.token_file", c.Gateway.Auth.TokenFile, log)
	if err != nil {
		return nil, err
	}
	if tf != nil {
		chain = append(chain, auth.Bearer(tf))
	}
	if len(chain) == 0 {
		return nil, nil
	}
	return auth.Chain(chain...), nil
}

// warnInsecure warns of settings that authenticate callers while leaving
// a door open behind them.
func (c *Config) warnInsecure(log *zap.Logger) {
	authed := c.Gateway.Auth.TokenFile != "" || c.Gateway.TLS.CAFile != ""
	if authed && c.Cluster.ID != "" && c.Cluster.TLS.Mode == tlsOff {
		log.Warn("the gateway authenticates its callers but cluster.tls.mode is off: anyone who reaches the silo-to-silo port (cluster.grpc.listen) can call any grain as any principal; set cluster.tls.mode mtls unless no one else shares that network")
	}
	if c.Cluster.ID != "" && c.Cluster.SecretKey == "" && c.Cluster.TLS.Mode != tlsOff {
		log.Warn("cluster.secret_key is empty: gossip is in the clear, and anyone who reaches the gossip port can read the membership (mutual TLS still keeps strangers out of the cluster)")
	}
}
