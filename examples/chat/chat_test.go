// The multi-process test: the program is built once, two copies of it
// form a cluster on loopback, and two more chat through it. Every child
// is killed by t.Cleanup if the test fails; a test binary that is itself
// killed (a -timeout shorter than the test's own bounds) leaves them
// running.

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/pgtest"
	"github.com/granaryio/granary/internal/proctest"
)

const (
	// postTimeout bounds a post's way to every member's stdout.
	postTimeout = 10 * time.Second
	// exitTimeout bounds a child's exit after SIGTERM or the end of its
	// stdin: the program's own stopTimeout, or a Leave's callTimeout, plus
	// slack.
	exitTimeout = stopTimeout + 5*time.Second
)

// program is the program the multi-process test runs, built once per
// test binary; TestMain removes it.
var program proctest.Program

// buildChat builds the program and returns its path.
func buildChat(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*defaultTestTimeout)
	defer cancel()
	return program.Build(ctx, t, "chat")
}

// child is one process of the program: a silo or a client.
type child struct {
	*proctest.Child
	member, gossip, gateway string // a silo's, from its ready line
}

// startChild starts the program with args as child name, with a pipe on
// its stdin if withStdin; if the test fails, its stdout and the end of
// its stderr are logged.
func startChild(t *testing.T, bin, name string, withStdin bool, args ...string) *child {
	t.Helper()
	return &child{Child: proctest.Start(t, bin, name, withStdin, func(path string) string { return proctest.LastLines(path, 40) }, args...)}
}

// startSilo starts a silo process named name in cluster clusterID, on
// ports of its choosing, keeping the rooms in the PostgreSQL database dsn,
// and waits for its ready line.
func startSilo(t *testing.T, ctx context.Context, bin, name, clusterID, dsn string, seeds ...string) *child {
	t.Helper()
	c := startChild(t, bin, name, false, "silo", "-name", name, "-cluster", clusterID, "-profile", "local", "-postgres", dsn,
		"-gossip", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-gateway", "127.0.0.1:0", "-seeds", strings.Join(seeds, ","))
	line, _, err := c.Out.WaitLine(ctx, c.Done, "ready ", 0)
	if err != nil {
		t.Fatalf("silo %s: %v", name, err)
	}
	f := proctest.Fields(line)
	c.member, c.gossip, c.gateway = f["member"], f["gossip"], f["gateway"]
	if !strings.HasPrefix(c.member, name+"-") || c.gossip == "" || strings.HasSuffix(c.gossip, ":0") ||
		c.gateway == "" || strings.HasSuffix(c.gateway, ":0") {
		t.Fatalf("silo %s: ready line %q does not name its member and the ports it picked", name, line)
	}
	return c
}

// terminate sends SIGTERM and waits for the exit, which must be a clean
// one after the silo's stopped line.
func (c *child) terminate(ctx context.Context) error {
	if err := c.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("%s: %w", c.Name, err)
	}
	return c.WaitExit(ctx, "stopped member="+c.member)
}

// TestChatAcrossSilos runs a cluster of two silo processes, sharing the
// rooms in PostgreSQL, and two client processes in one room, each client
// through another silo's gateway. A line typed into either client shows on
// both, in one order; a third client that comes later sees what was said
// before it; at the end of their stdin the clients leave and exit 0, and
// the silos then stop gracefully on SIGTERM. Without PostgreSQL (see
// internal/pgtest) it is skipped.
func TestChatAcrossSilos(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program and runs a cluster of processes: skipped with -short")
	}
	if runtime.GOOS == "windows" {
		t.Skip("stops processes with SIGTERM")
	}
	dsn := pgtest.DSN(t)
	bin := buildChat(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*defaultTestTimeout)
	defer cancel()

	// The first silo founds the cluster, the second joins through it.
	readyCtx, readyCancel := context.WithTimeout(ctx, defaultTestTimeout)
	defer readyCancel()
	clusterID := proctest.ClusterID("chat-test")
	a := startSilo(t, readyCtx, bin, "a", clusterID, dsn)
	b := startSilo(t, readyCtx, bin, "b", clusterID, dsn, a.gossip)

	// A room name of its own, so that concurrent runs never share one.
	room := fmt.Sprintf("room-%d", os.Getpid())
	clients := []*child{
		startChild(t, bin, "alice", true, "client", "-gateways", a.gateway, "-room", room, "-name", "alice"),
		startChild(t, bin, "bob", true, "client", "-gateways", b.gateway, "-room", room, "-name", "bob"),
	}
	for _, c := range clients {
		line, _, err := c.Out.WaitLine(readyCtx, c.Done, "joined ", 0)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if f := proctest.Fields(line); f["room"] != room || f["name"] != c.Name {
			t.Fatalf("%s: joined line %q, want room %s and its name", c.Name, line, room)
		}
	}

	// Each says something in turn; both show it, and so in one order.
	var want []string
	for _, from := range clients {
		text := "hello from " + from.Name
		if _, err := io.WriteString(from.Stdin, text+"\n"); err != nil {
			t.Fatalf("%s: %v", from.Name, err)
		}
		post := fmt.Sprintf("[%s] %s: %s", room, from.Name, text)
		want = append(want, post)
		postCtx, postCancel := context.WithTimeout(ctx, postTimeout)
		for _, to := range clients {
			if _, _, err := to.Out.WaitLine(postCtx, to.Done, post, 0); err != nil {
				postCancel()
				t.Fatalf("%s's post on %s: %v", from.Name, to.Name, err)
			}
		}
		postCancel()
	}

	// A latecomer sees what was said before it came, in the same order.
	late := startChild(t, bin, "carol", true, "client", "-gateways", b.gateway, "-room", room, "-name", "carol")
	clients = append(clients, late)
	lateCtx, lateCancel := context.WithTimeout(ctx, postTimeout)
	defer lateCancel()
	if _, _, err := late.Out.WaitLine(lateCtx, late.Done, want[len(want)-1], 0); err != nil {
		t.Fatalf("the latecomer did not see the room's history: %v", err)
	}

	// The end of stdin: each leaves and exits 0.
	exitCtx, exitCancel := context.WithTimeout(ctx, exitTimeout)
	defer exitCancel()
	for _, c := range clients {
		if err := c.Stdin.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range clients {
		if err := c.WaitExit(exitCtx, "left room="+room); err != nil {
			t.Error(err)
		}
		if got := c.Out.Lines("[", 0); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s showed %q, want %q", c.Name, got, want)
		}
	}

	// The silos stop gracefully, one after the other: the second leaves a
	// cluster of one.
	stopCtx, stopCancel := context.WithTimeout(ctx, 2*exitTimeout)
	defer stopCancel()
	for _, s := range []*child{b, a} {
		if err := s.terminate(stopCtx); err != nil {
			t.Error(err)
		}
	}
}
