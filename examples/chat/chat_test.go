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
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/proctest"
)

const (
	// postTimeout bounds a post's way to every member's stdout. The
	// clients renew their membership less often (testRejoin), so a post
	// that reached a member only with a renewal's recent posts, and not
	// through its observer, fails the test.
	postTimeout = 10 * time.Second
	testRejoin  = 25 * time.Second
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
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser // a client's; nil for a silo
	out     *proctest.Output
	stderr  *os.File
	done    chan struct{}
	exitErr error // set before done is closed

	member, gossip, gateway string // a silo's, from its ready line
}

// startChild starts the program with args as child name, with a pipe on
// its stdin if withStdin. t.Cleanup kills it if it still runs and, if
// the test failed, logs its stdout and the end of its stderr.
func startChild(t *testing.T, bin, name string, withStdin bool, args ...string) *child {
	t.Helper()
	stderr, err := os.Create(filepath.Join(t.TempDir(), name+".stderr"))
	if err != nil {
		t.Fatal(err)
	}
	c := &child{name: name, out: proctest.NewOutput(), stderr: stderr, done: make(chan struct{})}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Stdout, c.cmd.Stderr = c.out, stderr
	if withStdin {
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.exitErr = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("%s: stdout:\n%s\nstderr, the last lines:\n%s", name, c.out, lastLines(stderr.Name(), 40))
		}
		_ = stderr.Close()
	})
	return c
}

// lastLines returns the last n lines of a child's stderr.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// startSilo starts a silo process named name in cluster clusterID, on
// ports of its choosing, and waits for its ready line.
func startSilo(t *testing.T, ctx context.Context, bin, name, clusterID string, seeds ...string) *child {
	t.Helper()
	c := startChild(t, bin, name, false, "silo", "-name", name, "-cluster", clusterID, "-profile", "local",
		"-gossip", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-gateway", "127.0.0.1:0", "-seeds", strings.Join(seeds, ","))
	line, _, err := c.out.WaitLine(ctx, c.done, "ready ", 0)
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
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	return c.waitExit(ctx, "stopped member="+c.member)
}

// waitExit waits for the child to exit, which must be with status 0 and
// after a line starting with last.
func (c *child) waitExit(ctx context.Context, last string) error {
	select {
	case <-c.done:
	case <-ctx.Done():
		return fmt.Errorf("%s did not exit within %v", c.name, exitTimeout)
	}
	if c.exitErr != nil {
		return fmt.Errorf("%s exited: %v", c.name, c.exitErr)
	}
	if !c.out.Has(last, 0) {
		return fmt.Errorf("%s exited without a %q line", c.name, last)
	}
	return nil
}

// TestChatAcrossSilos runs a cluster of two silo processes and two client
// processes in one room, each client through another silo's gateway. A
// line typed into either client shows on both, through their observers;
// at the end of their stdin both leave and exit 0, and the silos then
// stop gracefully on SIGTERM.
func TestChatAcrossSilos(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program and runs a cluster of processes: skipped with -short")
	}
	if runtime.GOOS == "windows" {
		t.Skip("stops processes with SIGTERM")
	}
	bin := buildChat(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*defaultTestTimeout)
	defer cancel()

	// The first silo founds the cluster, the second joins through it.
	readyCtx, readyCancel := context.WithTimeout(ctx, defaultTestTimeout)
	defer readyCancel()
	clusterID := proctest.ClusterID("chat-test")
	a := startSilo(t, readyCtx, bin, "a", clusterID)
	b := startSilo(t, readyCtx, bin, "b", clusterID, a.gossip)

	// A room name of its own, so that concurrent runs never share one.
	room := fmt.Sprintf("room-%d", os.Getpid())
	clients := []*child{
		startChild(t, bin, "alice", true, "client", "-gateways", a.gateway, "-room", room, "-name", "alice", "-rejoin", testRejoin.String()),
		startChild(t, bin, "bob", true, "client", "-gateways", b.gateway, "-room", room, "-name", "bob", "-rejoin", testRejoin.String()),
	}
	for _, c := range clients {
		line, _, err := c.out.WaitLine(readyCtx, c.done, "joined ", 0)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		f := proctest.Fields(line)
		if f["room"] != room || f["name"] != c.name || (f["home"] != a.member && f["home"] != b.member) {
			t.Fatalf("%s: joined line %q, want room %s, its name, and a home among %s and %s", c.name, line, room, a.member, b.member)
		}
	}

	// Each says something in turn; both show it, and so in one order.
	var want []string
	for _, from := range clients {
		text := "hello from " + from.name
		if _, err := io.WriteString(from.stdin, text+"\n"); err != nil {
			t.Fatalf("%s: %v", from.name, err)
		}
		post := fmt.Sprintf("[%s] %s: %s", room, from.name, text)
		want = append(want, post)
		postCtx, postCancel := context.WithTimeout(ctx, postTimeout)
		for _, to := range clients {
			if _, _, err := to.out.WaitLine(postCtx, to.done, post, 0); err != nil {
				postCancel()
				t.Fatalf("%s's post on %s: %v", from.name, to.name, err)
			}
		}
		postCancel()
	}

	// The end of stdin: each leaves and exits 0.
	exitCtx, exitCancel := context.WithTimeout(ctx, exitTimeout)
	defer exitCancel()
	for _, c := range clients {
		if err := c.stdin.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range clients {
		if err := c.waitExit(exitCtx, "left room="+room); err != nil {
			t.Error(err)
		}
		if got := c.out.Lines("[", 0); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s showed %q, want %q", c.name, got, want)
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
