// The multi-process test: the program is built once, three copies of it
// form a cluster on loopback, and the test kills one with SIGKILL. Every
// child is killed by t.Cleanup if the test fails; a test binary that is
// itself killed (a -timeout shorter than the test's own bounds) leaves
// them running.

package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/proctest"
	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/membership"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/status"
)

const (
	// clusterSilos is how many silo processes the test starts.
	clusterSilos = 3
	// grainCount is how many counters the test spreads over them.
	grainCount = 30
	// callTimeout bounds one call attempt. A call that waits on a dead
	// silo fails by then, and the next attempt starts.
	callTimeout = time.Second
	// recoveryTarget is what the test asserts: every counter of the
	// killed silo answers from a survivor this soon after the SIGKILL.
	// DefaultLANConfig declares a silo dead in about 2.4 s.
	recoveryTarget = 5 * time.Second
	// recoveryTimeout bounds the retries of the killed silo's counters.
	recoveryTimeout = 10 * time.Second
	// settleWatch is how long the survivors' counters are still watched
	// after the last of the killed silo's counters is back: the directory
	// settles its entries in that time.
	settleWatch = time.Second
	// retryBackoff is the pause between two attempts on one counter.
	retryBackoff = 20 * time.Millisecond
	// exitTimeout bounds a child's graceful exit after SIGTERM: the
	// program's own stopTimeout, plus slack.
	exitTimeout = stopTimeout + 5*time.Second
)

// program is the program the multi-process test runs, built once per
// test binary; TestMain removes it.
var program proctest.Program

// buildSilo builds the program and returns its path.
func buildSilo(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*defaultTestTimeout)
	defer cancel()
	return program.Build(ctx, t, "silo")
}

// child is one silo process.
type child struct {
	*proctest.Child
	gossip, grpc string
	member       string // from its ready line
}

// startChild starts the program as silo name, with the lan profile and
// the extra arguments given. If the test fails, its stdout and the
// notable lines of its log are logged.
func startChild(t *testing.T, bin, name, clusterID, gossip, grpc string, seeds []string, extra ...string) *child {
	t.Helper()
	args := []string{"-name", name, "-cluster", clusterID,
		"-gossip", gossip, "-grpc", grpc, "-seeds", strings.Join(seeds, ","), "-profile", "lan"}
	return &child{
		Child:  proctest.Start(t, bin, name, false, notableLogs, append(args, extra...)...),
		gossip: gossip, grpc: grpc,
	}
}

// startCluster starts clusterSilos children, "a", "b" and so on, as a
// cluster on loopback, child i with the extra arguments extra(i) (nil:
// none), and waits within ctx for their ready lines. It returns them in
// order of their names, and by member ID.
//
// Each silo picks its own ports (a port picked ahead and handed over
// could be taken meanwhile by another test). The first founds the
// cluster; the others join through it, once its ready line names its
// gossip address.
func startCluster(t *testing.T, ctx context.Context, bin, clusterID string, extra func(i int) []string) ([]*child, map[string]*child) {
	t.Helper()
	children := make([]*child, clusterSilos)
	var seeds []string
	byMember := map[string]*child{}
	for i := range children {
		var args []string
		if extra != nil {
			args = extra(i)
		}
		children[i] = startChild(t, bin, string(rune('a'+i)), clusterID, "127.0.0.1:0", "127.0.0.1:0", seeds, args...)
		if i == 0 {
			if err := children[0].waitReady(ctx); err != nil {
				t.Fatal(err)
			}
			seeds = []string{children[0].gossip}
		}
	}
	for _, c := range children {
		if c.member == "" {
			if err := c.waitReady(ctx); err != nil {
				t.Fatal(err)
			}
		}
		byMember[c.member] = c
	}
	return children, byMember
}

// notableLogs returns the lines of a child's log that say something went
// wrong or the cluster changed, at most the last 60.
func notableLogs(path string) string {
	logs, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var notable []string
	for _, l := range strings.Split(string(logs), "\n") {
		if strings.Contains(l, "\tWARN\t") || strings.Contains(l, "\tERROR\t") || strings.Contains(l, "left the cluster") {
			notable = append(notable, l)
		}
	}
	return strings.Join(notable[max(0, len(notable)-60):], "\n")
}

// waitReady waits for the child's ready line and records its member ID.
func (c *child) waitReady(ctx context.Context) error {
	line, _, err := c.Out.WaitLine(ctx, c.Done, "ready ", 0)
	if err != nil {
		return fmt.Errorf("silo %s: %w", c.Name, err)
	}
	f := proctest.Fields(line)
	if c.member = f["member"]; !strings.HasPrefix(c.member, c.Name+"-") || f["grpc"] == "" || f["gossip"] == "" {
		return fmt.Errorf("silo %s: ready line %q does not name its member and addresses", c.Name, line)
	}
	c.gossip, c.grpc = f["gossip"], f["grpc"] // the ports it picked
	return nil
}

// kill sends SIGKILL: the silo dies without telling anyone.
func (c *child) kill() error { return c.Cmd.Process.Kill() }

// terminate sends SIGTERM and waits for the exit, which must be a clean
// one after the program's "stopped" line.
func (c *child) terminate(ctx context.Context) error {
	if err := c.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("silo %s: %w", c.Name, err)
	}
	return c.WaitExit(ctx, "stopped member="+c.member)
}

// terminateSurvivors stops the children but the killed one (a member ID)
// gracefully, all at once, and waits within ctx for each to exit cleanly.
func terminateSurvivors(ctx context.Context, children []*child, killed string) error {
	var stopping sync.WaitGroup
	errs := make([]error, len(children))
	for i, c := range children {
		if c.member != killed {
			stopping.Go(func() { errs[i] = c.terminate(ctx) })
		}
	}
	stopping.Wait()
	return errors.Join(errs...)
}

// startCaller starts the test's own silo in the cluster: it hosts no grain
// type, so every call it makes goes to a child. Its log entries are
// recorded, so the test can tell when it saw the victim fail.
func startCaller(t *testing.T, ctx context.Context, clusterID string, seeds []string) (*silo.Silo, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	if testing.Verbose() {
		dev, err := zap.NewDevelopment(zap.IncreaseLevel(zapcore.InfoLevel))
		if err != nil {
			t.Fatal(err)
		}
		core = zapcore.NewTee(core, dev.Core())
	}
	cc := silo.DefaultClusterConfig()
	cc.Membership = membership.DefaultLANConfig()
	cc.Membership.ClusterID = clusterID
	cc.Membership.BindAddr = "127.0.0.1"
	cc.Membership.BindPort = 0
	cc.Membership.Seeds = seeds
	cc.GRPCListen = "127.0.0.1:0"
	cfg := silo.DefaultConfig()
	cfg.Name = "tester"
	cfg.Logger = zap.New(core)
	cfg.Cluster = &cc
	s, err := silo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("the test's silo joining the cluster: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, logs
}

// add calls counter key once, bounded by callTimeout.
func add(ctx context.Context, s *silo.Silo, key string) (*clusterpb.AddReply, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return clusterpb.NewCounterRef(s, key).Add(ctx, &clusterpb.AddRequest{Delta: 1})
}

// home is where a counter answered from: its silo and activation, and
// the count it last returned.
type home struct {
	silo       string
	activation uint64
	value      int64
}

func homeOf(r *clusterpb.AddReply) home {
	return home{silo: r.GetSilo(), activation: r.GetActivation(), value: r.GetValue()}
}

// errorTally counts failed calls by their gRPC code and message (with the
// counter's key masked), and how long the slowest of each took to fail.
type errorTally struct {
	mu     sync.Mutex
	n      int
	byText map[string]*tallied
}

type tallied struct {
	n       int
	longest time.Duration
}

// counterKey matches the counters' keys in error messages.
var counterKey = regexp.MustCompile(`counter-\d+`)

func (e *errorTally) add(err error, took time.Duration) {
	st := status.Convert(err)
	text := st.Code().String() + ": " + counterKey.ReplaceAllString(st.Message(), "counter-NN")
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.byText == nil {
		e.byText = map[string]*tallied{}
	}
	e.n++
	t := e.byText[text]
	if t == nil {
		t = &tallied{}
		e.byText[text] = t
	}
	t.n++
	t.longest = max(t.longest, took)
}

func (e *errorTally) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, text := range slices.Sorted(maps.Keys(e.byText)) {
		t := e.byText[text]
		fmt.Fprintf(&b, "\n\t%d× (slowest %v) %s", t.n, t.longest.Round(time.Millisecond), text)
	}
	return b.String()
}

// recovery is how a counter of the killed silo came back.
type recovery struct {
	key   string
	after time.Duration // from the SIGKILL to its first answer from a survivor
	home  home
	err   error // the last failure, if it never came back
}

// recoverCounter calls counter key until it answers from a silo other
// than the killed one, or ctx ends. Failures go to tally.
func recoverCounter(ctx context.Context, s *silo.Silo, key, killed string, killedAt time.Time, tally *errorTally) recovery {
	for {
		start := time.Now()
		r, err := add(ctx, s, key)
		if err == nil && r.GetSilo() == killed {
			err = fmt.Errorf("answered from %s, which was killed", killed)
		}
		if err == nil {
			return recovery{key: key, after: time.Since(killedAt), home: homeOf(r)}
		}
		tally.add(err, time.Since(start))
		t := time.NewTimer(retryBackoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return recovery{key: key, err: err}
		case <-t.C:
		}
	}
}

// watchCounter calls a counter of a surviving silo over and over until
// stop is closed. It returns how many calls it made and, if one answered
// from another activation than h's or with a count that did not go up,
// what the first such answer was. Failures go to tally.
func watchCounter(ctx context.Context, s *silo.Silo, key string, h home, killedAt time.Time, stop <-chan struct{}, tally *errorTally) (calls int, problem string) {
	for {
		select {
		case <-stop:
			return calls, ""
		default:
		}
		start := time.Now()
		r, err := add(ctx, s, key)
		calls++
		if err != nil {
			tally.add(err, time.Since(start))
			continue
		}
		if got := homeOf(r); got.silo != h.silo || got.activation != h.activation || got.value <= h.value {
			return calls, fmt.Sprintf("%s answered %+v %v after the SIGKILL; before, %+v",
				key, got, time.Since(killedAt).Round(time.Millisecond), h)
		}
		h.value = r.GetValue()
	}
}

// TestClusterSurvivesKill runs a cluster of three silo processes, spreads
// counters over them, kills the silo holding the most with SIGKILL, and
// checks that each of its counters answers again from a survivor within
// recoveryTarget, while the survivors' counters keep their activations.
// The test calls from a silo of its own, in the cluster but hosting no
// grain type. It then stops the survivors with SIGTERM.
func TestClusterSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program and runs a cluster of processes: skipped with -short")
	}
	if runtime.GOOS == "windows" {
		t.Skip("stops processes with SIGTERM")
	}
	bin := buildSilo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*defaultTestTimeout)
	defer cancel()

	clusterID := proctest.ClusterID("cluster-test")
	readyCtx, readyCancel := context.WithTimeout(ctx, defaultTestTimeout)
	defer readyCancel()
	children, byMember := startCluster(t, readyCtx, bin, clusterID, nil)
	var gossip []string
	for _, c := range children {
		gossip = append(gossip, c.gossip)
	}
	s, logs := startCaller(t, readyCtx, clusterID, gossip)

	// Spread the counters: placement is random over the three.
	homes := map[string]home{}
	perSilo := map[string][]string{}
	for i := range grainCount {
		key := fmt.Sprintf("counter-%02d", i)
		r, err := add(ctx, s, key)
		if err != nil {
			t.Fatalf("first call of %s: %v", key, err)
		}
		if byMember[r.GetSilo()] == nil || r.GetValue() != 1 {
			t.Fatalf("first call of %s: answered %+v; want a count of 1 from one of %v", key, homeOf(r), slices.Sorted(maps.Keys(byMember)))
		}
		homes[key] = homeOf(r)
		perSilo[r.GetSilo()] = append(perSilo[r.GetSilo()], key)
	}
	members := slices.Sorted(maps.Keys(byMember))
	victim := members[0]
	for _, m := range members {
		if len(perSilo[m]) > len(perSilo[victim]) {
			victim = m
		}
	}
	for _, m := range members {
		t.Logf("silo %s holds %d counters", m, len(perSilo[m]))
	}
	lost := perSilo[victim]
	survivorHomes := map[string]home{}
	for key, h := range homes {
		if h.silo != victim {
			survivorHomes[key] = h
		}
	}

	// Kill the victim, then call its counters until each answers from a
	// survivor, while the survivors' counters are called alongside, and
	// for settleWatch after.
	killedAt := time.Now()
	if err := byMember[victim].kill(); err != nil {
		t.Fatal(err)
	}
	recCtx, recCancel := context.WithTimeout(ctx, recoveryTimeout)
	defer recCancel()
	var lostTally, survivorTally errorTally
	recs := make([]recovery, len(lost))
	var recovering sync.WaitGroup
	for i, key := range lost {
		recovering.Go(func() { recs[i] = recoverCounter(recCtx, s, key, victim, killedAt, &lostTally) })
	}
	stopWatch := make(chan struct{})
	var watching sync.WaitGroup
	var watchMu sync.Mutex
	var watchCalls int
	var watchProblems []string
	for key, h := range survivorHomes {
		watching.Go(func() {
			calls, problem := watchCounter(ctx, s, key, h, killedAt, stopWatch, &survivorTally)
			watchMu.Lock()
			defer watchMu.Unlock()
			watchCalls += calls
			if problem != "" {
				watchProblems = append(watchProblems, problem)
			}
		})
	}
	recovering.Wait()
	time.Sleep(settleWatch) // a window to measure in, not a wait for an event
	close(stopWatch)
	watching.Wait()
	slices.Sort(watchProblems)
	<-byMember[victim].Done

	first, last := recoveryTimeout, time.Duration(0)
	var missing []string
	for _, r := range recs {
		if r.err != nil {
			missing = append(missing, fmt.Sprintf("%s (last error: %v)", r.key, r.err))
			continue
		}
		first, last = min(first, r.after), max(last, r.after)
	}
	detected := "not seen in its log"
	for _, e := range logs.FilterMessage("silo left the cluster").All() {
		if e.ContextMap()["member"] == victim {
			detected = e.Time.Sub(killedAt).Round(time.Millisecond).String()
		}
	}
	t.Logf("SIGKILL of %s (%d counters): the test's silo saw it fail after %s; first counter back after %v, last after %v; %d failed calls on its counters meanwhile:%s",
		victim, len(lost), detected, first.Round(time.Millisecond), last.Round(time.Millisecond), lostTally.n, &lostTally)
	t.Logf("survivors' counters: %d calls, %d failed:%s", watchCalls, survivorTally.n, &survivorTally)
	if len(missing) > 0 {
		t.Fatalf("%d of %d counters of %s never answered from a survivor within %v: %s",
			len(missing), len(lost), victim, recoveryTimeout, strings.Join(missing, "; "))
	}
	if last > recoveryTarget {
		t.Errorf("the last counter of %s answered from a survivor %v after the SIGKILL, want at most %v", victim, last.Round(time.Millisecond), recoveryTarget)
	}
	for _, p := range watchProblems {
		t.Errorf("a survivor's counter changed activation or lost its count: %s", p)
	}

	// Every counter answers once more, each from the one activation it
	// had since the recovery.
	for _, r := range recs {
		survivorHomes[r.key] = r.home
	}
	for _, key := range slices.Sorted(maps.Keys(survivorHomes)) {
		h := survivorHomes[key]
		r, err := add(ctx, s, key)
		switch {
		case err != nil:
			t.Errorf("%s after the recovery: %v", key, err)
		case r.GetSilo() != h.silo || r.GetActivation() != h.activation || r.GetValue() <= h.value:
			t.Errorf("%s after the recovery: answered %+v, want the activation of %+v with a higher count", key, homeOf(r), h)
		}
	}

	// The survivors stop gracefully and exit 0, then the test's silo.
	stopCtx, stopCancel := context.WithTimeout(ctx, exitTimeout)
	defer stopCancel()
	if err := terminateSurvivors(stopCtx, children, victim); err != nil {
		t.Error(err)
	}
	if err := s.Stop(stopCtx); err != nil {
		t.Errorf("stopping the test's silo: %v", err)
	}
}
