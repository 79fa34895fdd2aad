package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// defaultTestTimeout bounds each wait of a test that has not failed:
// building the program, joining, a graceful stop. Generous for -race on a
// loaded machine; a test that needs it has failed.
const defaultTestTimeout = 30 * time.Second

// TestMain checks that no goroutine outlives the tests (memberlist's own
// end shortly after the silo stops; goleak retries long enough to see
// them go) and removes the program built for the multi-process test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if buildDir != "" {
			_ = os.RemoveAll(buildDir)
		}
		os.Exit(code)
	}))
}

// clusterSeq numbers the clusters the tests make.
var clusterSeq atomic.Int64

// newClusterID returns a cluster ID no other test run shares, so silos of
// concurrent runs on one machine never join each other.
func newClusterID() string {
	return fmt.Sprintf("cluster-test-%d-%d", os.Getpid(), clusterSeq.Add(1))
}

// output collects the lines a program writes to stdout, for the test to
// wait on. Write and waitLine may be called from any goroutine.
type output struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	grew    chan struct{} // closed and replaced when a line arrives
}

func newOutput() *output { return &output{grew: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.partial = append(o.partial, p...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		o.lines = append(o.lines, string(o.partial[:i]))
		o.partial = o.partial[i+1:]
		close(o.grew)
		o.grew = make(chan struct{})
	}
	return len(p), nil
}

// waitLine returns the first line after the first skip lines that starts
// with prefix, and its index, or fails when ctx ends or done is closed
// (the program exited) first.
func (o *output) waitLine(ctx context.Context, done <-chan struct{}, prefix string, skip int) (string, int, error) {
	for {
		o.mu.Lock()
		for i := skip; i < len(o.lines); i++ {
			if line := o.lines[i]; strings.HasPrefix(line, prefix) {
				o.mu.Unlock() // read under the lock: Write may grow lines
				return line, i, nil
			}
		}
		skip = len(o.lines)
		grew := o.grew
		o.mu.Unlock()
		select {
		case <-grew:
		case <-done:
			done = nil // look once more: the line may have come last
			if o.has(prefix, skip) {
				continue
			}
			return "", 0, fmt.Errorf("the program exited without printing a %q line", prefix)
		case <-ctx.Done():
			return "", 0, fmt.Errorf("no %q line: %w", prefix, ctx.Err())
		}
	}
}

// String returns every line so far.
func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.lines, "\n")
}

// has reports whether a line from skip on starts with prefix.
func (o *output) has(prefix string, skip int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range o.lines[min(skip, len(o.lines)):] {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// fields parses the key=value words of a line such as
// "ready member=a-1 grpc=127.0.0.1:1 gossip=127.0.0.1:2".
func fields(line string) map[string]string {
	f := map[string]string{}
	for _, w := range strings.Fields(line) {
		if k, v, ok := strings.Cut(w, "="); ok {
			f[k] = v
		}
	}
	return f
}

// TestRunAlone runs the program in-process as a cluster of one with the
// driver on: it prints its ready line, drive lines in which every call
// succeeded on itself, and, once its context ends, stops gracefully.
func TestRunAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	o := options{
		name:    "solo",
		cluster: newClusterID(),
		gossip:  "127.0.0.1:0", // picked by the silo, named in the ready line
		grpc:    "127.0.0.1:0",
		drive:   3,
		profile: "local",
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	out := newOutput()
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = run(runCtx, o, out)
	}()
	t.Cleanup(func() { stop(); <-done }) // on a failure: stop the silo before goleak looks

	ready, _, err := out.waitLine(ctx, done, "ready ", 0)
	if err != nil {
		stop()
		<-done
		t.Fatalf("%v (run: %v)", err, runErr)
	}
	f := fields(ready)
	member := f["member"]
	if !strings.HasPrefix(member, "solo-") || !strings.HasPrefix(f["grpc"], "127.0.0.1:") || !strings.HasPrefix(f["gossip"], "127.0.0.1:") ||
		strings.HasSuffix(f["grpc"], ":0") || strings.HasSuffix(f["gossip"], ":0") {
		t.Fatalf("ready line %q: want member solo-... and the loopback ports the silo picked", ready)
	}
	line, _, err := out.waitLine(ctx, done, "drive ", 0)
	if err != nil {
		t.Fatal(err)
	}
	f = fields(line)
	if ok, _ := strconv.Atoi(f["ok"]); ok == 0 || f["failed"] != "0" || !strings.HasPrefix(f["silos"], member+":") || strings.Contains(f["silos"], ",") {
		t.Fatalf("drive line %q: want calls ok, none failed, all on %s", line, member)
	}

	stop()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("run did not return after its context ended")
	}
	if runErr != nil {
		t.Fatalf("run: %v", runErr)
	}
	if !out.has("stopped member="+member, 0) {
		t.Fatalf("no stopped line; output:\n%s", out)
	}
}

// TestFlags checks the command line and the configuration made from it.
func TestFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string // "" for none
		check   func(o options) error
	}{
		{name: "defaults", check: func(o options) error {
			if o.name != "silo" || o.profile != "lan" || o.gossip != "127.0.0.1:7946" || o.grpc != "127.0.0.1:7947" || o.seeds != nil || o.drive != 0 {
				return fmt.Errorf("defaults %+v", o)
			}
			return nil
		}},
		{name: "seeds", args: []string{"-seeds", " 10.0.0.1:7946,,10.0.0.2:7946 "}, check: func(o options) error {
			if len(o.seeds) != 2 || o.seeds[0] != "10.0.0.1:7946" || o.seeds[1] != "10.0.0.2:7946" {
				return fmt.Errorf("seeds %q", o.seeds)
			}
			return nil
		}},
		{name: "every interface", args: []string{"-gossip", ":7000"}, check: func(o options) error {
			cfg, err := siloConfig(o)
			if err != nil {
				return err
			}
			if m := cfg.Cluster.Membership; m.BindAddr != "0.0.0.0" || m.BindPort != 7000 {
				return fmt.Errorf("bind %s:%d", m.BindAddr, m.BindPort)
			}
			return nil
		}},
		{name: "negative drive", args: []string{"-drive", "-1"}, wantErr: "-drive -1"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "unknown profile", args: []string{"-profile", "wan"}, wantErr: `-profile "wan"`},
		{name: "port out of range", args: []string{"-grpc", "127.0.0.1:70000"}, wantErr: "-grpc"},
		{name: "no port", args: []string{"-gossip", "127.0.0.1"}, wantErr: "-gossip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, io.Discard)
			if err == nil {
				_, err = siloConfig(o)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			case tt.check != nil:
				if err := tt.check(o); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if _, err := parseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
}
