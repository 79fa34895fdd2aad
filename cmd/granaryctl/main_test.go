package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/silo/admin/adminapi"
	"go.uber.org/goleak"
)

// defaultTestTimeout bounds every wait in these tests: a test that needs
// it has failed.
const defaultTestTimeout = 10 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// An answerFunc makes the fake admin server's answer to a request with
// query q: a status and a value it sends as JSON.
type answerFunc func(q url.Values) (int, any)

// fakeAdmin is an httptest server that answers the admin API's paths with
// canned documents and records the requests it received.
type fakeAdmin struct {
	srv     *httptest.Server
	answers map[string]answerFunc // by "METHOD PATH"

	mu       sync.Mutex
	requests []string // "METHOD PATH?QUERY", in arrival order
}

// newFakeAdmin starts a fake admin server answering as answers say (any
// other request gets 404 with an Error body); it is closed when the test
// ends.
func newFakeAdmin(t *testing.T, answers map[string]answerFunc) *fakeAdmin {
	f := &fakeAdmin{answers: answers}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAdmin) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
	f.mu.Unlock()
	status, body := http.StatusNotFound, any(adminapi.Error{Code: "NotFound", Message: "no route " + r.Method + " " + r.URL.Path})
	if answer, ok := f.answers[r.Method+" "+r.URL.Path]; ok {
		status, body = answer(r.URL.Query())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// addr is the server's host:port, as --admin takes it.
func (f *fakeAdmin) addr() string { return strings.TrimPrefix(f.srv.URL, "http://") }

// received returns the requests the server has had.
func (f *fakeAdmin) received() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// fixed answers every request with status and body.
func fixed(status int, body any) answerFunc {
	return func(url.Values) (int, any) { return status, body }
}

// result is what one run of granaryctl did.
type result struct {
	code           int
	stdout, stderr string
}

// runCtl runs granaryctl with args and the environment env.
func runCtl(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr, func(k string) string { return env[k] })
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

var (
	started = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	cannedCluster = adminapi.ClusterReport{
		Asked: "silo-a-17",
		Silos: []adminapi.SiloReport{
			{
				Name: "silo-a", Member: "silo-a-17", Status: "active", Started: started,
				UptimeSeconds: 3*86400 + 4*3600 + 5,
				Addresses:     adminapi.Addresses{Gateway: "10.0.0.1:30000", Admin: "10.0.0.1:8080"},
				Activations:   120, QueuedTurns: 3,
				Overload: adminapi.Overload{ConcurrencyLimit: 48, Concurrency: 48, LimitRefusals: 9},
				Types:    []adminapi.TypeReport{{Type: "bank.Account", Activations: 120, Calls: 5000, CallRate: 30}},
			},
			{
				Name: "silo-b", Member: "silo-b-4", Status: "joining", Started: started,
				UptimeSeconds: 42.7,
				Addresses:     adminapi.Addresses{Admin: "10.0.0.2:8080"},
				Activations:   7,
			},
			{
				Name: "silo-c", Member: "silo-c-9", Status: "active", Started: started,
				UptimeSeconds: 2*3600 + 5*60,
				Addresses:     adminapi.Addresses{Gateway: "10.0.0.3:30000", Admin: "10.0.0.3:8080"},
				Overload:      adminapi.Overload{Shedding: true, ShedRequests: 40, QueueRefusals: 2},
			},
		},
		Unreachable: []adminapi.Unreachable{{Member: "silo-d-2", Admin: "10.0.0.4:8080", Error: "connection refused"}},
		Types: []adminapi.TypeReport{
			{Type: "bank.Account", Activations: 120, Calls: 5000, Errors: 12, CallRate: 30.5, ErrorRate: 0.25},
			{Type: "chat.Room", Activations: 7, Calls: 80, CallRate: 1.126},
		},
	}
	cannedDrain = adminapi.DrainReply{Member: "silo-b-4", Name: "silo-b"}
)

// cannedAnswers serves cannedCluster, a lookup and deactivation that find
// bank.Account/alice only, and a drain of silo-b (by name or member).
func cannedAnswers() map[string]answerFunc {
	return map[string]answerFunc{
		"GET " + adminapi.PathCluster: fixed(http.StatusOK, cannedCluster),
		"GET " + adminapi.PathLookup: func(q url.Values) (int, any) {
			g := q.Get("grain")
			if g == "bank.Account/alice" {
				return http.StatusOK, adminapi.Location{Grain: g, Active: true, Member: "silo-a-17", Name: "silo-a"}
			}
			return http.StatusOK, adminapi.Location{Grain: g}
		},
		"POST " + adminapi.PathDeactivate: func(q url.Values) (int, any) {
			g := q.Get("grain")
			if g == "bank.Account/alice" {
				return http.StatusOK, adminapi.Deactivation{Grain: g, Deactivated: true, Member: "silo-a-17"}
			}
			return http.StatusOK, adminapi.Deactivation{Grain: g}
		},
		"POST " + adminapi.PathDrain: func(q url.Values) (int, any) {
			if s := q.Get("silo"); s == "silo-b" || s == "silo-b-4" {
				return http.StatusOK, cannedDrain
			}
			return http.StatusNotFound, adminapi.Error{Code: "NotFound", Message: "no silo " + q.Get("silo") + " in the cluster"}
		},
	}
}

func TestTables(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		stdout    string
		stderrHas string // "" means stderr must be empty
		wantRecvd string
	}{
		{
			name: "status",
			args: []string{"status"},
			stdout: `asked:        {ADDR} (silo-a-17)
silos:        3 (2 active, 1 joining)
activations:  127
calls/s:      31.63
errors/s:     0.25
shedding:     silo-c (silo-c-9)
limited:      silo-a (silo-a-17) to 48 new requests at once
unreachable:  silo-d-2 at 10.0.0.4:8080: connection refused
`,
			wantRecvd: "GET /api/v1/cluster",
		},
		{
			name: "silos",
			args: []string{"silos"},
			stdout: `NAME    MEMBER     STATUS           ACTIVATIONS  QUEUED  UPTIME  GATEWAY         ADMIN
silo-a  silo-a-17  active,limited   120          3       3d04h   10.0.0.1:30000  10.0.0.1:8080
silo-b  silo-b-4   joining          7            0       42s     -               10.0.0.2:8080
silo-c  silo-c-9   active,shedding  0            0       2h05m   10.0.0.3:30000  10.0.0.3:8080
-       silo-d-2   unreachable      -            -       -       -               10.0.0.4:8080
`,
			stderrHas: "warning: no report from silo-d-2 at 10.0.0.4:8080: connection refused",
			wantRecvd: "GET /api/v1/cluster",
		},
		{
			name: "grains",
			args: []string{"grains"},
			stdout: `TYPE          ACTIVATIONS  CALLS  CALLS/S  ERRORS  ERRORS/S
bank.Account  120          5000   30.50    12      0.25
chat.Room     7            80     1.13     0       0.00
`,
			stderrHas: "warning: no report from silo-d-2",
			wantRecvd: "GET /api/v1/cluster",
		},
		{
			name:      "lookup active",
			args:      []string{"lookup", "bank.Account/alice"},
			stdout:    "bank.Account/alice is active on silo-a (silo-a-17)\n",
			wantRecvd: "GET /api/v1/lookup?grain=bank.Account%2Falice",
		},
		{
			name:      "lookup not active, key with a slash",
			args:      []string{"lookup", "bank.Account/bob/savings"},
			stdout:    "bank.Account/bob/savings is not active\n",
			wantRecvd: "GET /api/v1/lookup?grain=bank.Account%2Fbob%2Fsavings",
		},
		{
			name:      "deactivate",
			args:      []string{"deactivate", "bank.Account/alice"},
			stdout:    "deactivated bank.Account/alice on silo-a-17\n",
			wantRecvd: "POST /api/v1/deactivate?grain=bank.Account%2Falice",
		},
		{
			name:      "deactivate not active",
			args:      []string{"deactivate", "chat.Room/lobby"},
			stdout:    "chat.Room/lobby was not active\n",
			wantRecvd: "POST /api/v1/deactivate?grain=chat.Room%2Flobby",
		},
		{
			name:      "drain",
			args:      []string{"drain", "silo-b-4"},
			stdout:    "silo-b (silo-b-4) is draining: it hands its grains over and leaves the cluster\n",
			wantRecvd: "POST /api/v1/drain?silo=silo-b-4",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAdmin(t, cannedAnswers())
			r := runCtl(t, nil, append([]string{"--admin", f.addr()}, tc.args...)...)
			if r.code != exitOK {
				t.Fatalf("exit %d, want 0; stderr:\n%s", r.code, r.stderr)
			}
			want := strings.ReplaceAll(tc.stdout, "{ADDR}", f.addr())
			if r.stdout != want {
				t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
			}
			if tc.stderrHas == "" && r.stderr != "" {
				t.Errorf("stderr %q, want none", r.stderr)
			}
			if !strings.Contains(r.stderr, tc.stderrHas) {
				t.Errorf("stderr %q does not say %q", r.stderr, tc.stderrHas)
			}
			if got := f.received(); !reflect.DeepEqual(got, []string{tc.wantRecvd}) {
				t.Errorf("server received %q, want [%q]", got, tc.wantRecvd)
			}
		})
	}
}

func TestStatusAllWell(t *testing.T) {
	report := adminapi.ClusterReport{
		Asked: "solo",
		Silos: []adminapi.SiloReport{{Name: "solo", Status: "active", Activations: 2}},
	}
	f := newFakeAdmin(t, map[string]answerFunc{"GET " + adminapi.PathCluster: fixed(http.StatusOK, report)})
	r := runCtl(t, nil, "--admin", f.addr(), "status")
	want := "asked:        " + f.addr() + ` (solo)
silos:        1 (1 active)
activations:  2
calls/s:      0.00
errors/s:     0.00
shedding:     none
unreachable:  none
`
	if r.code != exitOK || r.stdout != want || r.stderr != "" {
		t.Errorf("exit %d, stdout:\n%s\nstderr: %q\nwant exit 0, stdout:\n%s", r.code, r.stdout, r.stderr, want)
	}
}

func TestJSONOutput(t *testing.T) {
	tests := []struct {
		args []string
		into func() any // a pointer to decode the output into
		want any
	}{
		{[]string{"status"}, func() any { return new(adminapi.ClusterReport) }, &cannedCluster},
		{[]string{"silos"}, func() any { return new([]adminapi.SiloReport) }, &cannedCluster.Silos},
		{[]string{"grains"}, func() any { return new([]adminapi.TypeReport) }, &cannedCluster.Types},
		{
			[]string{"lookup", "bank.Account/alice"}, func() any { return new(adminapi.Location) },
			&adminapi.Location{Grain: "bank.Account/alice", Active: true, Member: "silo-a-17", Name: "silo-a"},
		},
		{
			[]string{"lookup", "bank.Account/zed"}, func() any { return new(adminapi.Location) },
			&adminapi.Location{Grain: "bank.Account/zed"},
		},
		{
			[]string{"deactivate", "bank.Account/alice"}, func() any { return new(adminapi.Deactivation) },
			&adminapi.Deactivation{Grain: "bank.Account/alice", Deactivated: true, Member: "silo-a-17"},
		},
		{[]string{"drain", "silo-b"}, func() any { return new(adminapi.DrainReply) }, &cannedDrain},
	}
	for _, tc := range tests {
		for _, flag := range []string{"-o", "--output"} {
			t.Run(strings.Join(tc.args, " ")+" "+flag, func(t *testing.T) {
				f := newFakeAdmin(t, cannedAnswers())
				args := append([]string{"--admin", f.addr(), flag, "json"}, tc.args...)
				r := runCtl(t, nil, args...)
				if r.code != exitOK {
					t.Fatalf("exit %d, want 0; stderr:\n%s", r.code, r.stderr)
				}
				got := tc.into()
				dec := json.NewDecoder(strings.NewReader(r.stdout))
				dec.DisallowUnknownFields()
				if err := dec.Decode(got); err != nil {
					t.Fatalf("stdout is not the JSON document: %v\n%s", err, r.stdout)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("printed %+v\nwant %+v", got, tc.want)
				}
			})
		}
	}
}

func TestJSONEmptyLists(t *testing.T) {
	f := newFakeAdmin(t, map[string]answerFunc{
		"GET " + adminapi.PathCluster: fixed(http.StatusOK, adminapi.ClusterReport{Asked: "x"}),
	})
	for _, cmd := range []string{"silos", "grains"} {
		r := runCtl(t, nil, "--admin", f.addr(), "-o", "json", cmd)
		if r.code != exitOK || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("%s -o json of an empty report: exit %d, stdout %q; want 0 and []", cmd, r.code, r.stdout)
		}
	}
}

func TestAdminAddressSources(t *testing.T) {
	f := newFakeAdmin(t, cannedAnswers())
	other := newFakeAdmin(t, cannedAnswers())

	// The environment names the admin when the flag is not given.
	r := runCtl(t, map[string]string{adminEnv: f.addr()}, "lookup", "bank.Account/alice")
	if r.code != exitOK || len(f.received()) != 1 {
		t.Errorf("%s=%s: exit %d, server got %q; want 0 and one request (stderr %q)",
			adminEnv, f.addr(), r.code, f.received(), r.stderr)
	}
	// The flag wins over the environment, and takes a URL.
	r = runCtl(t, map[string]string{adminEnv: f.addr()}, "--admin", other.srv.URL+"/", "lookup", "bank.Account/alice")
	if r.code != exitOK || len(other.received()) != 1 || len(f.received()) != 1 {
		t.Errorf("--admin over %s: exit %d, flag's server got %q, env's %q; want 0 and one request to the flag's (stderr %q)",
			adminEnv, r.code, other.received(), f.received(), r.stderr)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestFailures(t *testing.T) {
	dead := closedAddr(t)
	tests := []struct {
		name    string
		answers map[string]answerFunc
		addr    string // "" means the fake server's
		args    []string
		errHas  []string
	}{
		{
			name:    "unknown silo",
			answers: cannedAnswers(),
			args:    []string{"drain", "silo-z"},
			errHas:  []string{"404 Not Found", "(NotFound)", "no silo silo-z in the cluster"},
		},
		{
			name:    "bad grain type",
			answers: map[string]answerFunc{"GET " + adminapi.PathLookup: fixed(http.StatusBadRequest, adminapi.Error{Code: "InvalidArgument", Message: `unknown grain type "nope"`})},
			args:    []string{"lookup", "nope/x"},
			errHas:  []string{"400 Bad Request", `unknown grain type "nope"`},
		},
		{
			name:    "not the admin API",
			answers: map[string]answerFunc{},
			args:    []string{"status"},
			errHas:  []string{"404", "no route GET /api/v1/cluster"},
		},
		{
			name:    "malformed answer",
			answers: map[string]answerFunc{"GET " + adminapi.PathCluster: fixed(http.StatusOK, "not a report")},
			args:    []string{"silos"},
			errHas:  []string{"decoding the answer"},
		},
		{
			name:   "unreachable admin",
			addr:   dead,
			args:   []string{"grains"},
			errHas: []string{"connection refused"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr
			if addr == "" {
				addr = newFakeAdmin(t, tc.answers).addr()
			}
			r := runCtl(t, nil, append([]string{"--admin", addr}, tc.args...)...)
			if r.code != exitFailure {
				t.Errorf("exit %d, want %d", r.code, exitFailure)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			if !strings.HasPrefix(r.stderr, "granaryctl: admin http://"+addr+": ") {
				t.Errorf("stderr %q does not begin by naming the admin %s", r.stderr, addr)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr %q does not say %q", r.stderr, s)
				}
			}
			if strings.Contains(r.stderr, "--help") {
				t.Errorf("stderr %q points to usage for a failure that is not one", r.stderr)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before Close, which waits for the handler
	r := runCtl(t, nil, "--admin", srv.URL, "--timeout", "50ms", "status")
	if r.code != exitFailure || !strings.Contains(r.stderr, "no answer within --timeout 50ms") ||
		!strings.Contains(r.stderr, srv.URL) {
		t.Errorf("exit %d, stderr %q; want %d and a message naming %s and the timeout",
			r.code, r.stderr, exitFailure, srv.URL)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		errHas string
	}{
		{"lookup without slash", nil, []string{"lookup", "alice"}, `"alice" has no '/'`},
		{"lookup empty type", nil, []string{"lookup", "/alice"}, "empty type"},
		{"lookup empty key", nil, []string{"lookup", "bank.Account/"}, "empty key"},
		{"lookup no argument", nil, []string{"lookup"}, "one argument, TYPE/KEY; got 0"},
		{"lookup two arguments", nil, []string{"lookup", "a/b", "c/d"}, "one argument, TYPE/KEY; got 2"},
		{"deactivate without slash", nil, []string{"deactivate", "bank.Account"}, "has no '/'"},
		{"deactivate empty", nil, []string{"deactivate", ""}, "has no '/'"},
		{"drain no argument", nil, []string{"drain"}, "drain takes one argument"},
		{"drain blank", nil, []string{"drain", " "}, "drain takes one argument"},
		{"status with argument", nil, []string{"status", "x"}, "status takes no arguments"},
		{"unknown command", nil, []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", nil, []string{"silos", "--bogus"}, "unknown flag: --bogus"},
		{"bad output", nil, []string{"-o", "yaml", "silos"}, `--output "yaml": want table or json`},
		{"zero timeout", nil, []string{"--timeout", "0s", "silos"}, "--timeout 0s: must be positive"},
		{"negative timeout", nil, []string{"--timeout", "-1s", "silos"}, "--timeout -1s: must be positive"},
		{"unparsable timeout", nil, []string{"--timeout", "soon", "silos"}, `"soon"`},
		{"bad admin flag", nil, []string{"--admin", "ftp://x:1", "silos"}, `--admin: adminapi: admin address "ftp://x:1"`},
		{"bad admin env", map[string]string{adminEnv: "nowhere"}, []string{"silos"}, adminEnv + `: adminapi: admin address "nowhere"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAdmin(t, cannedAnswers())
			env := map[string]string{adminEnv: f.addr()}
			for k, v := range tc.env {
				env[k] = v
			}
			r := runCtl(t, env, tc.args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, exitUsage, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.errHas) || !strings.Contains(r.stderr, "--help' for usage") {
				t.Errorf("stderr %q: want it to say %q and point to --help", r.stderr, tc.errHas)
			}
			if got := f.received(); len(got) != 0 {
				t.Errorf("a usage error sent requests %q", got)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{nil, {"--help"}, {"help"}, {"help", "drain"}, {"lookup", "-h"}} {
		r := runCtl(t, nil, args...)
		if r.code != exitOK || !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
			t.Errorf("granaryctl %q: exit %d, stdout %q, stderr %q; want 0 and usage on stdout",
				args, r.code, r.stdout, r.stderr)
		}
	}
}

// failingWriter fails every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestOutputWriteFailure(t *testing.T) {
	f := newFakeAdmin(t, cannedAnswers())
	for _, output := range []string{"table", "json"} {
		var stderr bytes.Buffer
		code := run(context.Background(), []string{"--admin", f.addr(), "-o", output, "lookup", "a/b"},
			failingWriter{}, &stderr, func(string) string { return "" })
		if code != exitFailure || !strings.Contains(stderr.String(), "disk full") {
			t.Errorf("-o %s to a failing writer: exit %d, stderr %q; want %d and the write error",
				output, code, stderr.String(), exitFailure)
		}
	}
}

func TestUptime(t *testing.T) {
	tests := []struct {
		seconds float64
		want    string
	}{
		{-1, "-"},
		{0, "0s"},
		{0.9, "0s"},
		{59.99, "59s"},
		{60, "1m00s"},
		{12*60 + 30, "12m30s"},
		{3600, "1h00m"},
		{5*3600 + 3*60 + 59, "5h03m"},
		{86400, "1d00h"},
		{400*86400 + 7*3600, "400d07h"},
	}
	for _, tc := range tests {
		if got := uptime(tc.seconds); got != tc.want {
			t.Errorf("uptime(%v) = %q, want %q", tc.seconds, got, tc.want)
		}
	}
}

func TestSiloName(t *testing.T) {
	tests := []struct{ name, member, want string }{
		{"a", "a-1", "a (a-1)"},
		{"a", "a", "a"},
		{"", "a-1", "a-1"},
		{"a", "", "a"},
		{"", "", "an unnamed silo"},
	}
	for _, tc := range tests {
		if got := siloName(tc.name, tc.member); got != tc.want {
			t.Errorf("siloName(%q, %q) = %q, want %q", tc.name, tc.member, got, tc.want)
		}
	}
}
