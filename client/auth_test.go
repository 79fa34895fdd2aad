package client_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

const testToken = "client-test-token-0123456789"

// TestTokenNeedsTLS: Dial refuses to send a bearer token over plaintext,
// naming WithToken and the way out, unless WithInsecureToken says so.
func TestTokenNeedsTLS(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]client.Option{
		{client.WithToken(testToken)},
		{client.WithToken(testToken), client.WithTransportCredentials(insecure.NewCredentials())},
	} {
		var ce *client.ConfigError
		_, err := client.Dial(testCtx(t), append(opts, client.WithGateways("127.0.0.1:1"))...)
		if !errors.As(err, &ce) || ce.Option != "WithToken" {
			t.Errorf("a token over plaintext: got %v, want a ConfigError naming WithToken", err)
		}
	}
	var ce *client.ConfigError
	if _, err := client.Dial(testCtx(t), client.WithGateways("h:1"), client.WithToken("a b")); !errors.As(err, &ce) || ce.Option != "WithToken" {
		t.Errorf("a token with a space: got %v, want a ConfigError naming WithToken", err)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	_, err := client.Dial(ctx, client.WithGateways("127.0.0.1:1"), client.WithToken(testToken), client.WithInsecureToken())
	if grain.Code(err) != codes.Unavailable {
		t.Errorf("an insecure token, no gateway: got %v, want Unavailable", err)
	}
}

// TestWithTLSFilesErrors: files that cannot be read are a ConfigError
// naming WithTLSFiles, before anything is dialled.
func TestWithTLSFilesErrors(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, opt := range []client.Option{
		client.WithTLSFiles("", "", ""),
		client.WithTLSFiles(missing, "", ""),
		client.WithTLSFiles("", missing, ""),
	} {
		var ce *client.ConfigError
		if _, err := client.Dial(testCtx(t), client.WithGateways("127.0.0.1:1"), opt); !errors.As(err, &ce) || ce.Option != "WithTLSFiles" {
			t.Errorf("got %v, want a ConfigError naming WithTLSFiles", err)
		}
	}
}

// TestTokenSentOnEveryRPC: the token goes as "authorization: Bearer
// TOKEN" with the gateway list request and on the call stream.
func TestTokenSentOnEveryRPC(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string][]string{} // full method: authorization values
	record := func(ctx context.Context, method string) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		seen[method] = md.Get("authorization")
		mu.Unlock()
	}
	cfg := silo.DefaultConfig()
	gc := silo.DefaultGatewayConfig()
	gc.Listen = "127.0.0.1:0"
	gc.ServerOptions = []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			record(ctx, info.FullMethod)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			record(ss.Context(), info.FullMethod)
			return h(srv, ss)
		}),
	}
	cfg.Gateway = &gc
	s, err := silo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(testCtx(t)) })
	cl, err := client.Dial(testCtx(t), client.WithGateways(s.GatewayAddr()), client.WithToken(testToken), client.WithInsecureToken())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := probe.NewProbeRef(cl, "k").Call(testCtx(t), &probe.Request{}); grain.Code(err) != codes.NotFound {
		t.Fatalf("a type the silo does not host: got %v, want NotFound", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range []string{"/granary.v1.Gateway/Gateways", "/granary.v1.Gateway/Connect"} {
		if got := seen[m]; !slices.Equal(got, []string{"Bearer " + testToken}) {
			t.Errorf("%s carried authorization %q, want the bearer token", m, got)
		}
	}
}
