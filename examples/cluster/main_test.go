package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/proctest"
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
		program.Remove()
		os.Exit(code)
	}))
}

// TestRunAlone runs the program in-process as a cluster of one with the
// driver on: it prints its ready line, drive lines in which every call
// succeeded on itself, and, once its context ends, stops gracefully.
func TestRunAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	o := options{
		name:    "solo",
		cluster: proctest.ClusterID("cluster-test"),
		gossip:  "127.0.0.1:0", // picked by the silo, named in the ready line
		grpc:    "127.0.0.1:0",
		drive:   3,
		profile: "local",
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	out := proctest.NewOutput()
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = run(runCtx, o, out)
	}()
	t.Cleanup(func() { stop(); <-done }) // on a failure: stop the silo before goleak looks

	ready, _, err := out.WaitLine(ctx, done, "ready ", 0)
	if err != nil {
		stop()
		<-done
		t.Fatalf("%v (run: %v)", err, runErr)
	}
	f := proctest.Fields(ready)
	member := f["member"]
	if !strings.HasPrefix(member, "solo-") || !strings.HasPrefix(f["grpc"], "127.0.0.1:") || !strings.HasPrefix(f["gossip"], "127.0.0.1:") ||
		strings.HasSuffix(f["grpc"], ":0") || strings.HasSuffix(f["gossip"], ":0") {
		t.Fatalf("ready line %q: want member solo-... and the loopback ports the silo picked", ready)
	}
	line, _, err := out.WaitLine(ctx, done, "drive ", 0)
	if err != nil {
		t.Fatal(err)
	}
	f = proctest.Fields(line)
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
	if !out.Has("stopped member="+member, 0) {
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
