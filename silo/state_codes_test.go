package silo

import (
	"testing"

	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/storage"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestStatePostgresUnstorableKey: a grain whose key PostgreSQL's text
// columns cannot hold (a NUL byte) fails with InvalidArgument, not with
// Unavailable, which would tell the caller to retry what never succeeds.
func TestStatePostgresUnstorableKey(t *testing.T) {
	t.Parallel()
	st := openPostgres(t)
	w := newRegisterWorld()
	s := newStateSilo(t, w, func(c *Config) { c.Storage = map[string]storage.Provider{"default": st} })
	_, err := reg(s, "bad\x00key").Get(testCtx(t), &probe.RegisterOp{})
	if status.Code(err) == codes.Unavailable {
		t.Fatalf("activating a grain whose key PostgreSQL cannot store: %v; Unavailable tells the caller to retry what never succeeds", err)
	}
}
