package proctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The variables that say where grpcurl is and whether its tests must run.
const (
	// GrpcurlEnv names the grpcurl binary; make race sets it.
	GrpcurlEnv = "GRANARY_GRPCURL"
	// GrpcurlRequiredEnv, set to 1 (as CI does), makes a missing grpcurl
	// fail the tests that drive it instead of skipping them.
	GrpcurlRequiredEnv = "GRANARY_TEST_GRPCURL_REQUIRED"
)

// Grpcurl returns the grpcurl binary: $GRANARY_GRPCURL, else the one make
// installs in the repository's bin directory (found from the module
// root above the test's working directory), else grpcurl on PATH.
// Without one the test is skipped, or fails when
// GRANARY_TEST_GRPCURL_REQUIRED=1: grpcurl is the client that proves the
// gateway needs no Granary code, so CI must not let it pass unnoticed.
func Grpcurl(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(GrpcurlEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", GrpcurlEnv, p, err)
		}
		return p
	}
	if root := moduleRoot(); root != "" {
		p := filepath.Join(root, "bin", "grpcurl")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("grpcurl"); err == nil {
		return p
	}
	why := "grpcurl not found: " + GrpcurlEnv + " is not set, bin/grpcurl does not exist and none is on PATH; `make bin/grpcurl` installs it"
	if os.Getenv(GrpcurlRequiredEnv) == "1" {
		t.Fatalf("%s, and %s=1", why, GrpcurlRequiredEnv)
	}
	t.Skip(why)
	return ""
}

// moduleRoot is the nearest directory above the working directory that
// holds a go.mod, or "".
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
