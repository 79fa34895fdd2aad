package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/silo/admin/adminapi"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.compose != "deploy/compose.yaml" || o.secrets != "deploy/secrets" || o.project != "granary-e2e" || o.out != "docs/resilience.md" ||
		o.screenshot != "docs/resilience-dashboard.png" || o.bound != 5*time.Second || o.chaos.Hold != 10*time.Second {
		t.Errorf("defaults: %+v", o)
	}
	if !strings.HasPrefix(o.load.Prefix, "e2e-") {
		t.Errorf("the counters' prefix %q is not new to the run", o.load.Prefix)
	}
	o, err = parseFlags([]string{"-out", "/tmp/r/report.md", "-hold", "3s", "-workers", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.screenshot != "/tmp/r/report-dashboard.png" || o.chaos.Hold != 3*time.Second || o.load.Workers != 2 {
		t.Errorf("flags not applied: %+v", o)
	}

	o, err = parseFlags([]string{"-overload-duration", "3m", "-overload-memory", "300MiB", "-overload-p99", "750ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c := o.overload; c.Duration != 3*time.Minute || c.RSSBound != 300<<20 || c.P99Bound != 750*time.Millisecond ||
		c.CallTimeout != o.load.CallTimeout || c.Prefix != o.load.Prefix+"-soak" || c.Factor != 2 {
		t.Errorf("soak flags not applied: %+v", c)
	}

	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-overload-memory", "lots"}, "invalid value"},
		{[]string{"-overload-p99", "2s"}, "p99 bound 2s"},
		{[]string{"-overload-watch", "10s"}, "recovery watch 10s must exceed"},
		{[]string{"-overload-factor", "0.5"}, "factor 0.5"},
		{[]string{"-hold", "0s"}, "-hold 0s: must be positive"},
		{[]string{"-settle", "4s"}, "-settle 4s must exceed -recovery 5s"},
		{[]string{"-workers", "0"}, "workers 0"},
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
		{[]string{"-hold", "soon"}, "invalid value"},
	}
	for _, tt := range tests {
		if _, err := parseFlags(tt.args, io.Discard); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("parseFlags(%q) = %v, want an error containing %q", tt.args, err, tt.wantErr)
		}
	}
	if _, err := parseFlags([]string{"-help"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-help: %v, want flag.ErrHelp", err)
	}
}

func TestCounterActivations(t *testing.T) {
	rep := adminapi.SiloReport{Types: []adminapi.TypeReport{
		{Type: "cluster.Counter", Activations: 20},
		{Type: "bank.Account", Activations: 5},
		{Type: "cluster.CounterFeed", Activations: 3},
	}}
	if got := counterActivations(rep); got != 20 {
		t.Errorf("counterActivations = %d, want 20", got)
	}
}
