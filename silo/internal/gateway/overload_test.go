package gateway

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestShedderCountsEveryRefusalAndLogsOneWayOnesRateLimited: each
// refusal is counted; a refused one-way request, which nobody hears of
// otherwise, is logged at most once per interval, the line saying how
// many went unlogged since the last; a refused two-way request is not
// logged, since its caller is told.
func TestShedderCountsEveryRefusalAndLogsOneWayOnesRateLimited(t *testing.T) {
	t.Parallel()
	var refused atomic.Uint64
	core, logs := observer.New(zap.WarnLevel)
	clock := clockwork.NewFakeClock()
	sh := NewShedder(func() string { return "cpu 99% over limit 95%" }, time.Second, &refused, zap.New(core), clock)

	err := sh.Refuse("s1", "client-1", false)
	if got, want := status.Convert(err).Message(), "granary: silo s1 is overloaded (cpu 99% over limit 95%); retry in 1s"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if logs.Len() != 0 {
		t.Fatalf("a refused two-way request was logged: %v", logs.All())
	}
	for range 3 {
		sh.Refuse("s1", "client-1", true)
	}
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d log lines for three one-way refusals in one interval, want 1", n)
	}
	clock.Advance(shedLogInterval)
	sh.Refuse("s1", "client-2", true)
	all := logs.All()
	if len(all) != 2 || all[1].ContextMap()["unlogged_since_last"] != uint64(2) || all[1].ContextMap()["from"] != "client-2" {
		t.Fatalf("log lines %v; want a second one after the interval, from client-2, counting the 2 unlogged", all)
	}
	if n := refused.Load(); n != 5 {
		t.Fatalf("%d refusals counted, want 5", n)
	}
}

// TestOverloadErrorCarriesRetryInfoAndErrorInfo pins the refusal's wire
// form, which the Go client matches.
func TestOverloadErrorCarriesRetryInfoAndErrorInfo(t *testing.T) {
	t.Parallel()
	st := status.Convert(OverloadError("s1", "heap 2 GiB over limit 1 GiB", 1500*time.Millisecond))
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("code %v", st.Code())
	}
	var retry *errdetails.RetryInfo
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.ErrorInfo:
			info = d
		}
	}
	if retry.GetRetryDelay().AsDuration() != 1500*time.Millisecond {
		t.Fatalf("RetryInfo %v, want 1.5s", retry)
	}
	if info.GetReason() != "OVERLOADED" || info.GetDomain() != "granary.io" || info.GetMetadata()["silo"] != "s1" {
		t.Fatalf("ErrorInfo %v", info)
	}
}
