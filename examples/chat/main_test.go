package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/proctest"
	"go.uber.org/goleak"
)

// defaultTestTimeout bounds each wait of a test that has not failed:
// building the program, joining, a post going round, a graceful stop.
// Generous for -race on a loaded machine; a test that needs it has
// failed.
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

// TestRunInProcess runs the program's two modes in-process: a silo alone
// and two clients of one room through its gateway. A line on either
// client's stdin reaches both, and at the end of stdin each client leaves
// and returns; the silo then stops gracefully.
func TestRunInProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	siloCtx, stopSilo := context.WithCancel(ctx)
	defer stopSilo()
	var logs io.Writer = io.Discard
	if testing.Verbose() {
		logs = os.Stderr
	}
	siloOut := proctest.NewOutput()
	siloDone := make(chan struct{})
	var siloErr error
	go func() {
		defer close(siloDone)
		siloErr = runSilo(siloCtx, siloOptions{
			name: "solo", cluster: proctest.ClusterID("chat-test"), profile: "local",
			gossip: "127.0.0.1:0", grpc: "127.0.0.1:0", gateway: "127.0.0.1:0",
		}, siloOut, logs)
	}()
	t.Cleanup(func() { stopSilo(); <-siloDone }) // on a failure: stop the silo before goleak looks
	ready, _, err := siloOut.WaitLine(ctx, siloDone, "ready ", 0)
	if err != nil {
		stopSilo()
		<-siloDone
		t.Fatalf("%v (run: %v)", err, siloErr)
	}
	f := proctest.Fields(ready)
	gateway := f["gateway"]
	if !strings.HasPrefix(f["member"], "solo-") || !strings.HasPrefix(gateway, "127.0.0.1:") || strings.HasSuffix(gateway, ":0") {
		t.Fatalf("ready line %q: want member solo-... and the gateway port the silo picked", ready)
	}

	type member struct {
		name  string
		stdin *io.PipeWriter
		out   *proctest.Output
		done  chan struct{}
		err   error
	}
	members := []*member{{name: "alice"}, {name: "bob"}}
	for _, m := range members {
		var stdin *io.PipeReader
		stdin, m.stdin = io.Pipe()
		m.out, m.done = proctest.NewOutput(), make(chan struct{})
		o := clientOptions{gateways: []string{gateway}, room: "lobby", name: m.name, history: time.Hour}
		go func() {
			defer close(m.done)
			m.err = runClient(ctx, o, stdin, m.out, logs)
		}()
		t.Cleanup(func() { _ = m.stdin.Close(); <-m.done })
		if _, _, err := m.out.WaitLine(ctx, m.done, "joined room=lobby name="+m.name, 0); err != nil {
			t.Fatalf("%s: %v (run: %v)", m.name, err, m.err)
		}
	}
	for i, m := range members {
		line := fmt.Sprintf("hello %d from %s", i, m.name)
		if _, err := io.WriteString(m.stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
		postCtx, cancel := context.WithTimeout(ctx, postTimeout)
		for _, to := range members {
			if _, _, err := to.out.WaitLine(postCtx, to.done, "[lobby] "+m.name+": "+line, 0); err != nil {
				cancel()
				t.Fatalf("%s: %v", to.name, err)
			}
		}
		cancel()
	}
	for _, m := range members {
		_ = m.stdin.Close()
		select {
		case <-m.done:
		case <-ctx.Done():
			t.Fatalf("%s did not return at the end of its stdin", m.name)
		}
		if m.err != nil {
			t.Errorf("%s: %v", m.name, m.err)
		}
		want := []string{"[lobby] alice: hello 0 from alice", "[lobby] bob: hello 1 from bob"}
		if got := m.out.Lines("[", 0); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s showed %q, want %q", m.name, got, want)
		}
		if !m.out.Has("left room=lobby", 0) {
			t.Errorf("%s printed no left line; output:\n%s", m.name, m.out)
		}
	}

	stopSilo()
	select {
	case <-siloDone:
	case <-ctx.Done():
		t.Fatal("the silo did not return after its context ended")
	}
	if siloErr != nil {
		t.Fatalf("silo: %v", siloErr)
	}
	if !siloOut.Has("stopped member="+f["member"], 0) {
		t.Fatalf("no stopped line; output:\n%s", siloOut)
	}
}

// TestFlags checks the command lines of both modes and the silo
// configuration made from them.
func TestFlags(t *testing.T) {
	tests := []struct {
		name    string
		mode    string
		args    []string
		wantErr string // "" for none
		check   func(s siloOptions, c clientOptions) error
	}{
		{name: "silo defaults", mode: "silo", check: func(o siloOptions, _ clientOptions) error {
			if o.name != "silo" || o.profile != "lan" || o.gossip != "127.0.0.1:7946" || o.grpc != "127.0.0.1:7947" ||
				o.gateway != "127.0.0.1:30000" || o.seeds != nil || o.cluster != "granary-chat" {
				return fmt.Errorf("defaults %+v", o)
			}
			return nil
		}},
		{name: "silo seeds", mode: "silo", args: []string{"-postgres", "postgres://db", "-seeds", " 10.0.0.1:7946,,10.0.0.2:7946 "}, check: func(o siloOptions, _ clientOptions) error {
			if len(o.seeds) != 2 || o.seeds[0] != "10.0.0.1:7946" || o.seeds[1] != "10.0.0.2:7946" || o.postgres != "postgres://db" {
				return fmt.Errorf("seeds %q, postgres %q", o.seeds, o.postgres)
			}
			return nil
		}},
		{name: "silo seeds without postgres", mode: "silo", args: []string{"-seeds", "10.0.0.1:7946"}, wantErr: "-postgres"},
		{name: "silo config", mode: "silo", args: []string{"-gossip", ":7000", "-gateway", "127.0.0.1:0", "-profile", "local"}, check: func(o siloOptions, _ clientOptions) error {
			cfg, err := siloConfig(o)
			if err != nil {
				return err
			}
			if m := cfg.Cluster.Membership; m.BindAddr != "0.0.0.0" || m.BindPort != 7000 || m.ClusterID != "granary-chat" {
				return fmt.Errorf("bind %s:%d in %q", m.BindAddr, m.BindPort, m.ClusterID)
			}
			if cfg.Gateway == nil || cfg.Gateway.Listen != "127.0.0.1:0" {
				return fmt.Errorf("gateway %+v", cfg.Gateway)
			}
			if p, ok := cfg.Streams.Providers[streamProvider]; !ok || p.Kind != "durable" {
				return fmt.Errorf("streams %+v: want the durable provider %q", cfg.Streams, streamProvider)
			}
			return nil
		}},
		{name: "silo stray argument", mode: "silo", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "silo unknown profile", mode: "silo", args: []string{"-profile", "wan"}, wantErr: `-profile "wan"`},
		{name: "silo gateway without port", mode: "silo", args: []string{"-gateway", "127.0.0.1"}, wantErr: "-gateway"},
		{name: "silo port out of range", mode: "silo", args: []string{"-grpc", "127.0.0.1:70000"}, wantErr: "-grpc"},
		{name: "silo unknown flag", mode: "silo", args: []string{"-room", "x"}, wantErr: "flag provided but not defined"},
		{name: "client", mode: "client", args: []string{"-gateways", "a:1, b:2", "-room", "r", "-name", "alice"}, check: func(_ siloOptions, o clientOptions) error {
			if len(o.gateways) != 2 || o.gateways[0] != "a:1" || o.gateways[1] != "b:2" || o.room != "r" || o.name != "alice" || o.history != defaultHistory {
				return fmt.Errorf("options %+v", o)
			}
			return nil
		}},
		{name: "client without name", mode: "client", args: []string{"-room", "r"}, wantErr: "-name"},
		{name: "client name too long", mode: "client", args: []string{"-name", strings.Repeat("n", maxNameBytes+1)}, wantErr: "-name"},
		{name: "client without gateways", mode: "client", args: []string{"-name", "a", "-gateways", " , "}, wantErr: "-gateways"},
		{name: "client empty room", mode: "client", args: []string{"-name", "a", "-room", ""}, wantErr: "-room"},
		{name: "client negative history", mode: "client", args: []string{"-name", "a", "-history", "-1s"}, wantErr: "-history -1s"},
		{name: "client stray argument", mode: "client", args: []string{"-name", "a", "extra"}, wantErr: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s siloOptions
			var c clientOptions
			var err error
			if tt.mode == "silo" {
				if s, err = parseSiloFlags(tt.args, io.Discard); err == nil {
					_, err = siloConfig(s)
				}
			} else {
				c, err = parseClientFlags(tt.args, io.Discard)
			}
			var fe *flagError
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			case tt.wantErr != "" && !errors.As(err, &fe):
				t.Fatalf("error %v is not a flagError: the program would not exit with status 2", err)
			case tt.check != nil:
				if err := tt.check(s, c); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if _, err := parseSiloFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("silo -h: %v, want flag.ErrHelp", err)
	}
	if _, err := parseClientFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("client -h: %v, want flag.ErrHelp", err)
	}
}
