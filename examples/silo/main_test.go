package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/internal/proctest"
	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"go.uber.org/goleak"
)

// defaultTestTimeout bounds each test, the build included.
const defaultTestTimeout = 2 * time.Minute

var program proctest.Program

// TestMain checks that no goroutine outlives the tests and removes the
// program built for them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		program.Remove()
		os.Exit(code)
	}))
}

// proc is a running silo process.
type proc struct {
	cmd    *exec.Cmd
	stdout *proctest.Output
	stderr *proctest.Output // its JSON log lines
	done   chan struct{}    // closed when it exited
	err    error            // Wait's error, set before done is closed
}

// start runs the binary with env (GRANARY_* settings; the test's own
// GRANARY_ variables are dropped) and args. t.Cleanup kills it if it
// still runs and, if the test failed, logs what it wrote.
func start(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), stdout: proctest.NewOutput(), stderr: proctest.NewOutput(), done: make(chan struct{})}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GRANARY_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", p.stdout, p.stderr)
		}
	})
	return p
}

// waitLog returns the fields of the first JSON log line from index skip
// on whose message is msg, and the index after it.
func (p *proc) waitLog(ctx context.Context, msg string, skip int) (map[string]any, int, error) {
	for {
		line, i, err := p.stderr.WaitLine(ctx, p.done, "{", skip)
		if err != nil {
			return nil, 0, fmt.Errorf("waiting for the %q log line: %w", msg, err)
		}
		skip = i + 1
		var fields map[string]any
		if json.Unmarshal([]byte(line), &fields) == nil && fields["msg"] == msg {
			return fields, skip, nil
		}
	}
}

// exitCode waits for the process to exit and returns its status.
func (p *proc) exitCode(ctx context.Context) (int, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("the silo did not exit: %w", ctx.Err())
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0, nil
	case errors.As(p.err, &ee) && ee.Exited():
		return ee.ExitCode(), nil
	default:
		return 0, p.err
	}
}

// waitReady polls the admin server's /readyz until it answers 200.
func waitReady(ctx context.Context, adminAddr string) error {
	ac, err := adminapi.NewClient(adminAddr, nil)
	if err != nil {
		return err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ac.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %v (%w)", err, ctx.Err())
		case <-tick.C:
		}
	}
}

// siloEnv configures a silo alone on loopback ports picked at run time,
// its counts in the embedded store in dataDir.
func siloEnv(dataDir string) []string {
	return []string{
		"GRANARY_NAME=example",
		"GRANARY_ADMIN_LISTEN=127.0.0.1:0",
		"GRANARY_GATEWAY_LISTEN=127.0.0.1:0",
		"GRANARY_STORAGE_DATA_DIR=" + dataDir,
		"GRANARY_SHUTDOWN_TIMEOUT=20s",
	}
}

// runOnce starts the silo, waits until it is ready, adds 1 to the counter
// key through its gateway and returns the count, then stops it with
// SIGTERM and checks that it exits 0 after logging "stopped".
func runOnce(t *testing.T, ctx context.Context, bin, dataDir, key string) int64 {
	t.Helper()
	p := start(t, bin, siloEnv(dataDir))
	admin, skip, err := p.waitLog(ctx, "admin address", 0)
	if err != nil {
		t.Fatal(err)
	}
	adminAddr, _ := admin["listen"].(string)
	if err := waitReady(ctx, adminAddr); err != nil {
		t.Fatal(err)
	}
	if code := getStatus(t, ctx, "http://"+adminAddr+adminapi.PathHealthz); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	ready, _, err := p.waitLog(ctx, "silo ready", skip)
	if err != nil {
		t.Fatal(err)
	}
	gateway, _ := ready["gateway"].(string)

	cl, err := client.Dial(ctx, client.WithGateways(gateway))
	if err != nil {
		t.Fatal(err)
	}
	r, err := clusterpb.NewCounterRef(cl, key).Add(ctx, &clusterpb.AddRequest{Delta: 1})
	if cerr := cl.Close(); cerr != nil {
		t.Errorf("closing the client: %v", cerr)
	}
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	if r.GetSilo() != "example" {
		t.Errorf("answered by %q; want example", r.GetSilo())
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := p.exitCode(ctx)
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v; want 0", code, err)
	}
	if _, _, err := p.waitLog(ctx, "stopped", 0); err != nil {
		t.Errorf("after SIGTERM: %v", err)
	}
	return r.GetValue()
}

func getStatus(t *testing.T, ctx context.Context, url string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSiloProcess runs the binary twice on one data directory: each run
// serves a Counter call and stops on SIGTERM with status 0, and the
// second goes on from the count the first stored.
func TestSiloProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	bin := program.Build(ctx, t, "silo")
	dataDir := t.TempDir()
	if got := runOnce(t, ctx, bin, dataDir, "k"); got != 1 {
		t.Errorf("first run: count %d; want 1", got)
	}
	if got := runOnce(t, ctx, bin, dataDir, "k"); got != 2 {
		t.Errorf("second run: count %d; want 2, the stored count plus 1", got)
	}
}

// TestSiloConfigErrors checks that a bad setting exits 2 naming it and
// its source, and --help exits 0 listing the environment variables.
func TestSiloConfigErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	bin := program.Build(ctx, t, "silo")

	p := start(t, bin, []string{"GRANARY_LOG_LEVEL=loud"}, "--cluster.profile=fast")
	if code, err := p.exitCode(ctx); err != nil || code != 2 {
		t.Errorf("a bad setting: exit %d, %v; want 2", code, err)
	}
	for _, want := range []string{
		`config: log.level (env GRANARY_LOG_LEVEL): "loud" is not one of debug, info, warn, error`,
		`config: cluster.profile (flag --cluster.profile): "fast" is not one of lan, local, wan`,
	} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, p.stderr)
		}
	}

	p = start(t, bin, nil, "--help")
	if code, err := p.exitCode(ctx); err != nil || code != 0 {
		t.Errorf("--help: exit %d, %v; want 0", code, err)
	}
	for _, want := range []string{"--cluster.seeds", "env GRANARY_CLUSTER_SEEDS", "env GRANARY_STORAGE_POSTGRES_DSN"} {
		if !strings.Contains(p.stdout.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, p.stdout)
		}
	}
}
