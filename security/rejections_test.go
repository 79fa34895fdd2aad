package security_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/security"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestRejectionsWarnOncePerIntervalAndCountAll(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	clock := clockwork.NewFakeClock()
	r := security.NewRejectionsWithClock(zap.New(core), clock, 10*time.Second)
	for i := range 5 {
		r.Reject(security.ListenerGateway, security.ReasonUnknownCA, fmt.Sprintf("10.0.0.%d:5000", i), errors.New("x509: certificate signed by unknown authority"))
	}
	r.Reject(security.ListenerSilo, security.ReasonUnknownCA, "10.0.0.9:7947", nil)
	if got := logs.Len(); got != 2 {
		t.Fatalf("%d warnings for 5 refusals of one kind and 1 of another in one interval, want 2", got)
	}
	first := logs.All()[0]
	if first.ContextMap()["remote"] != "10.0.0.0:5000" || !strings.Contains(first.Message, "CA") {
		t.Errorf("the warning %q %v does not name the remote address and the reason", first.Message, first.ContextMap())
	}
	clock.Advance(10 * time.Second)
	r.Reject(security.ListenerGateway, security.ReasonUnknownCA, "10.0.0.7:5000", nil)
	if logs.Len() != 3 {
		t.Fatal("no warning after the interval passed")
	}
	if got := logs.All()[2].ContextMap()["unlogged_since_last"]; got != uint64(4) {
		t.Errorf("unlogged_since_last = %v, want 4", got)
	}
	if got := r.Count(security.ListenerGateway, security.ReasonUnknownCA); got != 6 {
		t.Errorf("Count = %d, want 6", got)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(r)
	want := `# HELP granary_rejected_total Connections, handshakes, messages and calls a listener refused, by listener and reason.
# TYPE granary_rejected_total counter
granary_rejected_total{listener="gateway",reason="unknown_ca"} 6
granary_rejected_total{listener="silo",reason="unknown_ca"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), security.MetricName); err != nil {
		t.Error(err)
	}
}

func TestNilRejectionsIsANoOp(t *testing.T) {
	var r *security.Rejections
	r.Reject("x", "y", "", nil)
	if r.Count("x", "y") != 0 {
		t.Fatal("a nil Rejections counted")
	}
}

func TestHandshakeReason(t *testing.T) {
	for want, err := range map[string]error{
		security.ReasonPlaintext:        tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"},
		security.ReasonUnknownCA:        &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}},
		security.ReasonNoClientCert:     errors.New("tls: client didn't provide a certificate"),
		security.ReasonBadCertificate:   errors.New("remote error: tls: bad certificate"),
		security.ReasonHandshakeTimeout: os.ErrDeadlineExceeded,
		security.ReasonTLSHandshake:     errors.New("EOF"),
	} {
		if got := security.HandshakeReason(err); got != want {
			t.Errorf("HandshakeReason(%v) = %s, want %s", err, got, want)
		}
	}
}

func TestFirstBytesJudges(t *testing.T) {
	for _, tc := range []struct {
		first      string
		grpc, http bool
	}{
		{"\x16\x03\x01\x02\x00", true, true},
		{"PRI * HT", true, true},
		{"PRI", true, true},
		{"GET / HT", false, true},
		{"POST /ap", false, true},
		{"\x00\x01\x02", false, false},
		{"get / ht", false, false},
		{" GET", false, false},
	} {
		if got := security.LooksLikeGRPC([]byte(tc.first)); got != tc.grpc {
			t.Errorf("LooksLikeGRPC(%q) = %v", tc.first, got)
		}
		if got := security.LooksLikeHTTP([]byte(tc.first)); got != tc.http {
			t.Errorf("LooksLikeHTTP(%q) = %v", tc.first, got)
		}
	}
}
