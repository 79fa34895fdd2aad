package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/silo/admin/adminapi"
)

var (
	parkedAt = time.Date(2026, 3, 1, 12, 30, 0, 0, time.UTC)

	cannedStreams = adminapi.StreamsReport{
		Asked: "silo-a-17",
		Total: 3,
		Streams: []adminapi.StreamReport{
			{
				Stream: "default/orders/eu", Silo: "silo-b-4", Type: "shop.Order", Last: "1772366400000000000.42",
				Lag: 7, Parked: 1, SubscriptionCount: 3,
				Subscriptions: []adminapi.SubscriptionReport{
					{
						ID: "5b1e0f4c", Grain: "shop.Mailer/eu", Handler: "on-order", Parked: true,
						ParkedReason: "rpc error: code = Unavailable desc = smtp\nis down", ParkedAt: &parkedAt,
					},
					{ID: "9c2f7a10", Grain: "shop.Stock/eu", Handler: "on-order", Lag: 7, Handled: "1772366400000000000.35"},
					{ID: "implicit:shop.Audit/eu:on-order", Grain: "shop.Audit/eu", Handler: "on-order", Implicit: true, Handled: "1772366400000000000.42"},
				},
			},
			{
				Stream: "default/chat/lobby", Silo: "silo-a-17", Type: "chat.Post", Last: "1772366400000000000.3", SubscriptionCount: 1,
				Subscriptions: []adminapi.SubscriptionReport{{ID: "77aa01bc", Grain: "chat.Member/bob", Handler: "on-post", Handled: "1772366400000000000.3"}},
			},
		},
		Unreachable: []adminapi.Unreachable{{Member: "silo-d-2", Admin: "10.0.0.4:8080", Error: "connection refused"}},
	}
	cannedUnparked = adminapi.Unparked{Stream: "default/orders/eu", Subscription: "5b1e0f4c", Grain: "shop.Mailer/eu", Handler: "on-order"}
)

// streamsAnswers serves cannedStreams whatever the query, and unparks
// 5b1e0f4c of default/orders/eu only.
func streamsAnswers() map[string]answerFunc {
	return map[string]answerFunc{
		"GET " + adminapi.PathStreams: fixed(http.StatusOK, cannedStreams),
		"POST " + adminapi.PathUnpark: func(q url.Values) (int, any) {
			if q.Get("stream") == "default/orders/eu" && q.Get("subscription") == "5b1e0f4c" {
				return http.StatusOK, cannedUnparked
			}
			return http.StatusNotFound, adminapi.Error{Code: "NotFound", Message: "granary: stream " + q.Get("stream") + " has no subscription \"" + q.Get("subscription") + "\""}
		},
	}
}

func TestStreamsTables(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		stdout    string
		stderrHas []string // nil means stderr must be empty
		wantRecvd string
	}{
		{
			name: "list",
			args: []string{"streams", "list"},
			stdout: `STREAM              SILO       TYPE        SUBSCRIPTIONS  PARKED  LAG
default/orders/eu   silo-b-4   shop.Order  3              1       7
default/chat/lobby  silo-a-17  chat.Post   1              0       0
`,
			stderrHas: []string{"warning: no report from silo-d-2 at 10.0.0.4:8080: connection refused", "warning: listing 2 of 3 streams"},
			wantRecvd: "GET /api/v1/streams?limit=100",
		},
		{
			name: "lag, with the query's flags",
			args: []string{"streams", "lag", "--prefix", "default/orders/", "--parked", "--limit", "5"},
			stdout: `STREAM             SUBSCRIPTION  GRAIN           HANDLER   LAG  STATUS                             REASON
default/orders/eu  5b1e0f4c      shop.Mailer/eu  on-order  0    parked since 2026-03-01T12:30:00Z  rpc error: code = Unavailable desc = smtp is down
default/orders/eu  9c2f7a10      shop.Stock/eu   on-order  7    delivering                         -
`,
			stderrHas: []string{"warning: listing 2 of 3 streams; narrow with --prefix or --parked, or raise --limit"},
			wantRecvd: "GET /api/v1/streams?limit=5&parked=true&prefix=default%2Forders%2F",
		},
		{
			name: "lag --all",
			args: []string{"streams", "lag", "--all"},
			stdout: `STREAM              SUBSCRIPTION                     GRAIN            HANDLER              LAG  STATUS                             REASON
default/orders/eu   5b1e0f4c                         shop.Mailer/eu   on-order             0    parked since 2026-03-01T12:30:00Z  rpc error: code = Unavailable desc = smtp is down
default/orders/eu   9c2f7a10                         shop.Stock/eu    on-order             7    delivering                         -
default/orders/eu   implicit:shop.Audit/eu:on-order  shop.Audit/eu    on-order (implicit)  0    caught-up                          -
default/chat/lobby  77aa01bc                         chat.Member/bob  on-post              0    caught-up                          -
`,
			stderrHas: []string{"warning: listing 2 of 3 streams"},
			wantRecvd: "GET /api/v1/streams?limit=100",
		},
		{
			name:      "unpark",
			args:      []string{"streams", "unpark", "default/orders/eu", "5b1e0f4c"},
			stdout:    "unparked subscription 5b1e0f4c of default/orders/eu: shop.Mailer/eu gets its events again through handler on-order\n",
			wantRecvd: "POST /api/v1/streams/unpark?stream=default%2Forders%2Feu&subscription=5b1e0f4c",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAdmin(t, streamsAnswers())
			r := runCtl(t, nil, append([]string{"--admin", f.addr()}, tc.args...)...)
			if r.code != exitOK {
				t.Fatalf("exit %d, want 0; stderr:\n%s", r.code, r.stderr)
			}
			if r.stdout != tc.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, tc.stdout)
			}
			if tc.stderrHas == nil && r.stderr != "" {
				t.Errorf("stderr %q, want none", r.stderr)
			}
			for _, s := range tc.stderrHas {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr %q does not say %q", r.stderr, s)
				}
			}
			if got := f.received(); !reflect.DeepEqual(got, []string{tc.wantRecvd}) {
				t.Errorf("server received %q, want [%q]", got, tc.wantRecvd)
			}
		})
	}
}

// TestStreamsLagWhenAllCaughtUp: with no subscription parked or behind,
// lag says so rather than print an empty table, and warns of nothing
// when every stream was listed.
func TestStreamsLagWhenAllCaughtUp(t *testing.T) {
	calm := adminapi.StreamsReport{Asked: "solo", Total: 1, Streams: cannedStreams.Streams[1:]}
	f := newFakeAdmin(t, map[string]answerFunc{"GET " + adminapi.PathStreams: fixed(http.StatusOK, calm)})
	r := runCtl(t, nil, "--admin", f.addr(), "streams", "lag")
	want := "no subscription is parked or behind: the 1 subscription of the 1 stream listed are caught up\n"
	if r.code != exitOK || r.stdout != want || r.stderr != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0 and %q", r.code, r.stdout, r.stderr, want)
	}
}

func TestStreamsJSON(t *testing.T) {
	tests := []struct {
		args []string
		into func() any
		want any
	}{
		{[]string{"streams", "list"}, func() any { return new(adminapi.StreamsReport) }, &cannedStreams},
		{[]string{"streams", "lag"}, func() any { return new(adminapi.StreamsReport) }, &cannedStreams},
		{[]string{"streams", "unpark", "default/orders/eu", "5b1e0f4c"}, func() any { return new(adminapi.Unparked) }, &cannedUnparked},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			f := newFakeAdmin(t, streamsAnswers())
			r := runCtl(t, nil, append([]string{"--admin", f.addr(), "-o", "json"}, tc.args...)...)
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

// TestStreamsFailures: an unpark the admin API refuses, or a list it
// cannot answer, exits 1 with the API's message, naming the admin.
func TestStreamsFailures(t *testing.T) {
	f := newFakeAdmin(t, map[string]answerFunc{
		"POST " + adminapi.PathUnpark: fixed(http.StatusForbidden, adminapi.Error{Code: "PermissionDenied", Message: "POST /api/v1/streams/unpark is off: set admin.token_file"}),
	})
	for _, tc := range []struct {
		args   []string
		errHas []string
	}{
		{[]string{"streams", "unpark", "default/orders/eu", "5b1e0f4c"}, []string{"403 Forbidden", "(PermissionDenied)", "admin.token_file"}},
		{[]string{"streams", "list"}, []string{"404", "no route GET /api/v1/streams"}},
	} {
		r := runCtl(t, nil, append([]string{"--admin", f.addr()}, tc.args...)...)
		if r.code != exitFailure || r.stdout != "" || !strings.HasPrefix(r.stderr, "granaryctl: admin http://"+f.addr()+": ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, nothing printed, and the admin named", tc.args, r.code, r.stdout, r.stderr, exitFailure)
		}
		for _, s := range tc.errHas {
			if !strings.Contains(r.stderr, s) {
				t.Errorf("%q: stderr %q does not say %q", tc.args, r.stderr, s)
			}
		}
	}
	unknown := newFakeAdmin(t, streamsAnswers())
	r := runCtl(t, nil, "--admin", unknown.addr(), "streams", "unpark", "default/orders/eu", "nope")
	if r.code != exitFailure || !strings.Contains(r.stderr, `(NotFound)`) || !strings.Contains(r.stderr, `has no subscription "nope"`) {
		t.Errorf("unparking an unknown subscription: exit %d, stderr %q; want %d and NotFound", r.code, r.stderr, exitFailure)
	}
}

func TestStreamsUsageErrors(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		errHas string
	}{
		{"unknown streams command", []string{"streams", "purge"}, `unknown command "purge" for "granaryctl streams"`},
		{"list with argument", []string{"streams", "list", "x"}, "list takes no arguments"},
		{"limit zero", []string{"streams", "list", "--limit", "0"}, "--limit 0: want 1 to 10000"},
		{"limit too large", []string{"streams", "lag", "--limit", "10001"}, "--limit 10001: want 1 to 10000"},
		{"unknown flag", []string{"streams", "lag", "--bogus"}, "unknown flag: --bogus"},
		{"unpark one argument", []string{"streams", "unpark", "default/orders/eu"}, "unpark takes two arguments"},
		{"unpark three arguments", []string{"streams", "unpark", "default/orders/eu", "a", "b"}, "got 3"},
		{"unpark bad stream", []string{"streams", "unpark", "default/orders", "a"}, "not provider/namespace/key"},
		{"unpark empty provider", []string{"streams", "unpark", "/orders/eu", "a"}, "must be non-empty"},
		{"unpark blank subscription", []string{"streams", "unpark", "default/orders/eu", " "}, "empty subscription ID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAdmin(t, streamsAnswers())
			r := runCtl(t, map[string]string{adminEnv: f.addr()}, tc.args...)
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
	// streams alone prints its help.
	r := runCtl(t, nil, "streams")
	if r.code != exitOK || !strings.Contains(r.stdout, "unpark") || !strings.Contains(r.stdout, "Usage:") {
		t.Errorf("granaryctl streams: exit %d, stdout %q; want 0 and its commands", r.code, r.stdout)
	}
}

// TestStatusShowsStreams: status sums up the streams when the cluster
// report has them.
func TestStatusShowsStreams(t *testing.T) {
	report := adminapi.ClusterReport{
		Asked:   "solo",
		Silos:   []adminapi.SiloReport{{Name: "solo", Status: "active", Activations: 2}},
		Streams: &adminapi.StreamsSummary{Active: 12, Subscriptions: 40, Parked: 2, Lag: 31, PublishRate: 120.5},
	}
	f := newFakeAdmin(t, map[string]answerFunc{"GET " + adminapi.PathCluster: fixed(http.StatusOK, report)})
	r := runCtl(t, nil, "--admin", f.addr(), "status")
	const line = "streams:      12 active, 40 subscriptions, 2 parked, 31 events waiting, 120.50 published/s\n"
	if r.code != exitOK || !strings.Contains(r.stdout, line) || !strings.HasSuffix(r.stdout, line+"unreachable:  none\n") {
		t.Errorf("exit %d, stdout:\n%s\nwant 0 and, before the unreachable line, %q", r.code, r.stdout, line)
	}
}
