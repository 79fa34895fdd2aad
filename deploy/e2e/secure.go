package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/granaryio/granary/security/auth"

	"github.com/granaryio/granary/client"
	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// The files of the secrets directory (-secrets) the run reads, as make
// certs (deploy/mksecrets) lays them out.
const (
	caFileName        = "pki/ca.crt"
	adminTokensName   = "admin-tokens"
	gatewayTokensName = "gateway-tokens"
)

// secrets are what the run needs to speak to the secured cluster.
type secrets struct {
	caFile       string         // the CA bundle the silos' certificates chain to
	roots        *x509.CertPool // caFile's certificates
	adminToken   string         // a token of the admin servers' admin.token_file
	gatewayToken string         // a token of the gateways' gateway.auth.token_file
}

// loadSecrets reads the CA and the first token of each token file in
// dir. An error names the file and says how to make it.
func loadSecrets(dir string) (secrets, error) {
	s := secrets{caFile: filepath.Join(dir, caFileName)}
	pem, err := os.ReadFile(s.caFile)
	if err != nil {
		return secrets{}, fmt.Errorf("-secrets %s: %w (run make certs)", dir, err)
	}
	s.roots = x509.NewCertPool()
	if !s.roots.AppendCertsFromPEM(pem) {
		return secrets{}, fmt.Errorf("-secrets %s: %s holds no PEM certificate", dir, s.caFile)
	}
	if s.adminToken, err = auth.ReadToken(filepath.Join(dir, adminTokensName)); err != nil {
		return secrets{}, fmt.Errorf("-secrets %s: %w (run make certs)", dir, err)
	}
	if s.gatewayToken, err = auth.ReadToken(filepath.Join(dir, gatewayTokensName)); err != nil {
		return secrets{}, fmt.Errorf("-secrets %s: %w (run make certs)", dir, err)
	}
	return s, nil
}

// tlsConfig verifies the silos' certificates against the CA.
func (s secrets) tlsConfig() *tls.Config {
	return &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12}
}

// adminClient returns an admin API client for addr over https, sending
// token ("" for none).
func (s secrets) adminClient(addr, token string) (*adminapi.Client, error) {
	return adminapi.NewClientWith(addr, adminapi.ClientOptions{TLS: s.tlsConfig(), Token: token})
}

// clientOptions are the options a Go client needs for the gateways: TLS
// verified against the CA, and the gateway token.
func (s secrets) clientOptions() []client.Option {
	return []client.Option{client.WithTLSFiles(s.caFile, "", ""), client.WithToken(s.gatewayToken)}
}

// check is one security property of the cluster the run asserts: Err is
// nil when it held.
type check struct {
	Name string
	Err  error
}

// checkSecured asserts, against the first silo, that the cluster is
// secured as deploy/compose.yaml says: the gateway refuses plaintext and
// calls without a token, and the admin server refuses plain HTTP and API
// requests without the admin token, while its probes stay open. key is a
// counter of the load's, which the checks read with an Add of 0 so as to
// activate no counter the load does not.
func checkSecured(ctx context.Context, s silo, sec secrets, key string) []check {
	const timeout = 10 * time.Second
	var out []check
	add := func(name string, f func(ctx context.Context) error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		out = append(out, check{Name: name, Err: f(ctx)})
	}
	add("the gateway refuses plaintext gRPC", func(ctx context.Context) error {
		cc, err := grpc.NewClient(s.Gateway, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
			return fmt.Errorf("%s answered a plaintext health check", s.Gateway)
		}
		return nil
	})
	add("the gateway refuses calls without a token", func(ctx context.Context) error {
		c, err := client.Dial(ctx, client.WithGateways(s.Gateway), client.WithTLSFiles(sec.caFile, "", ""), client.WithLogger(zap.NewNop()))
		if err == nil {
			defer c.Close()
			_, err = clusterpb.NewCounterRef(c, key).Add(ctx, &clusterpb.AddRequest{Delta: 0})
		}
		if err == nil {
			return fmt.Errorf("%s served a call without a token", s.Gateway)
		}
		if status.Code(err) != codes.Unauthenticated && !strings.Contains(err.Error(), "Unauthenticated") {
			return fmt.Errorf("a call without a token failed, but not as Unauthenticated: %w", err)
		}
		return nil
	})
	add("the gateway's certificate verifies against the CA, and the gateway token is taken", func(ctx context.Context) error {
		c, err := client.Dial(ctx, append(sec.clientOptions(), client.WithGateways(s.Gateway), client.WithLogger(zap.NewNop()))...)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = clusterpb.NewCounterRef(c, key).Add(ctx, &clusterpb.AddRequest{Delta: 0})
		return err
	})
	add("the admin server refuses plain HTTP", func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Admin+adminapi.PathReadyz, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil // refused outright
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			return fmt.Errorf("http://%s%s answered %s", s.Admin, adminapi.PathReadyz, resp.Status)
		}
		return nil
	})
	add("the admin server's probes need no credentials", func(ctx context.Context) error {
		c, err := sec.adminClient(s.Admin, "")
		if err != nil {
			return err
		}
		return c.Ready(ctx)
	})
	add("the admin API refuses requests without the admin token", func(ctx context.Context) error {
		c, err := sec.adminClient(s.Admin, "")
		if err != nil {
			return err
		}
		_, err = c.Silo(ctx)
		var apiErr *adminapi.APIError
		switch {
		case err == nil:
			return fmt.Errorf("https://%s answered the silo report without a token", s.Admin)
		case !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized:
			return fmt.Errorf("the silo report without a token failed, but not with 401: %w", err)
		}
		return nil
	})
	add("the admin API answers the admin token", func(ctx context.Context) error {
		c, err := sec.adminClient(s.Admin, sec.adminToken)
		if err != nil {
			return err
		}
		_, err = c.Silo(ctx)
		return err
	})
	return out
}
