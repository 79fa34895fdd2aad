package grpcapi

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/security/auth"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// FuzzMetadata feeds arbitrary request metadata and key fields to what a
// gateway reads from a plain gRPC call: the grain key (from the granary-key
// metadata and the request's key field, for a string and an int64 key
// kind) and the bearer token (AuthRequest, then auth.Bearer). Nothing
// panics; a key is returned only when it has the form of its kind and
// agrees with every place it was sent; every refusal of a key is
// InvalidArgument; only the known token authenticates.
//
//	go test -run '^$' -fuzz FuzzMetadata -fuzztime 10s ./silo/grpcapi
func FuzzMetadata(f *testing.F) {
	f.Add("alice", "", "", false, int64(0), "Bearer fuzz-token-0123456789")
	f.Add("", "bob", "", false, int64(7), "")
	f.Add("alice", "bob", "", false, int64(0), "bearer x")
	f.Add("42", "", "42", true, int64(42), "Basic Zm9vOmJhcg==")
	f.Add("a", "", "b", true, int64(-1), "Bearer  fuzz-token-0123456789 ")
	f.Add("\x00", "", "", false, int64(0), "Bearer \xff")
	strKeyed := fuzzMethod(f, &probe.KeyedProbe_ServiceDesc)
	intKeyed := fuzzMethod(f, &probe.IntKeyedProbe_ServiceDesc)
	tokens, err := auth.ParseTokens([]byte("fuzz-token-0123456789 fuzzer\n"))
	if err != nil {
		f.Fatal(err)
	}
	bearer := auth.Bearer(tokens)

	f.Fuzz(func(t *testing.T, mdKey, field, mdKey2 string, twice bool, id int64, authz string) {
		md := metadata.MD{}
		if mdKey != "" {
			md.Append(KeyHeader, mdKey)
		}
		if twice {
			md.Append(KeyHeader, mdKey2)
		}
		if authz != "" {
			md.Append(AuthorizationHeader, authz)
		}
		ctx := metadata.NewIncomingContext(context.Background(), md)
		sent := md.Get(KeyHeader)

		check := func(m *method, fromField string, key string, err error) {
			t.Helper()
			if err != nil {
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("%s: key refused with %v, want InvalidArgument", m.name, err)
				}
				return
			}
			if key == "" || m.kind.CheckKey(key) != nil {
				t.Fatalf("%s: key %q is not a %v key", m.name, key, m.kind)
			}
			if len(sent) > 1 {
				t.Fatalf("%s: key %q taken from metadata sent %d times", m.name, key, len(sent))
			}
			if fromField != "" && key != fromField {
				t.Fatalf("%s: key %q, but the field holds %q", m.name, key, fromField)
			}
			if len(sent) == 1 && sent[0] != "" && key != sent[0] {
				t.Fatalf("%s: key %q, but the metadata holds %q", m.name, key, sent[0])
			}
		}
		key, err := strKeyed.key(ctx, &probe.KeyedRequest{Name: field})
		check(strKeyed, field, key, err)
		fromID := ""
		if id != 0 {
			fromID = strconv.FormatInt(id, 10)
		}
		key, err = intKeyed.key(ctx, &probe.IntKeyedRequest{Id: id})
		check(intKeyed, fromID, key, err)

		r := AuthRequest(ctx)
		if len(r.Authorization) != len(md.Get(AuthorizationHeader)) || r.PeerCertificates != nil {
			t.Fatalf("AuthRequest = %+v from metadata %v", r, md)
		}
		if p, err := bearer.Authenticate(r); err == nil && (p != "fuzzer" || !strings.Contains(authz, "fuzz-token-0123456789")) {
			t.Fatalf("authorization %q authenticated as %q", authz, p)
		}
	})
}

func fuzzMethod(f *testing.F, sd *grain.ServiceDesc) *method {
	m, err := newMethod(sd, &sd.Methods[0], nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	return m
}
