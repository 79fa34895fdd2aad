package silo

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/internal/local"
)

// actOf returns the (non-worker) activation of typ/key, or nil.
func actOf(h *harness, typ, key string) *local.ActivationRec {
	v, ok := h.s.rt.Types[typ].Acts.Load(key)
	if !ok {
		return nil
	}
	return v
}

// waitNoGoroutineIn waits until no goroutine's stack mentions fn: for
// clock callbacks started with `go`, whose end nothing announces.
func waitNoGoroutineIn(t *testing.T, fn string) {
	t.Helper()
	waitFor(t, "no goroutine in "+fn, func() bool {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		return !strings.Contains(string(buf[:n]), fn)
	})
}

func reentrantID(key string) string { return "probe.ReentrantProbe/" + key }

var _ = grain.ID{}

// runInChild re-runs test name in a subprocess (GRANARY_TEST_CHILD=1), for
// reproductions that crash or hang the process, and fails with its output.
func runInChild(t *testing.T, name string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GRANARY_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		s := string(out)
		if i := strings.Index(s, "panic:"); i > 0 {
			s = s[i:]
		}
		t.Fatalf("child failed (%v):\n%.2500s", err, s)
	}
}
