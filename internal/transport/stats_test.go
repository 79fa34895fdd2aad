package transport

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/testwait"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestBatchBucket(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, want int }{
		{0, 0}, {1, 0}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {8, 3}, {9, 4},
		{512, 9}, {513, 10}, {1024, 10}, {1025, batchBounds}, {1 << 20, batchBounds},
	} {
		if got := batchBucket(tc.n); got != tc.want {
			t.Errorf("batchBucket(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// waitStats polls until cond holds for the two transports' stats. A
// frame's counters are added after the frame is written or its envelopes
// delivered, so the counters lag the traffic they count; cond should test
// the ones added last (batches sent, envelopes received), which Stats
// reads first, so that the rest of the snapshot holds the same frames.
func waitStats(t *testing.T, p *pair, cond func(a, b Stats) bool) (a, b Stats) {
	t.Helper()
	settled := false
	defer func() {
		if !settled {
			t.Logf("the last stats:\na: %+v\nb: %+v", a, b)
		}
	}()
	testwait.For(t, defaultTestTimeout, "the stats to settle", func() bool {
		a, b = p.a.Stats(), p.b.Stats()
		return cond(a, b)
	})
	settled = true
	return a, b
}

func sum(xs []uint64) (n uint64) {
	for _, x := range xs {
		n += x
	}
	return n
}

func TestStatsCountCalls(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	const n = 20
	for i := range n {
		if r := wait(t, call(p.a, "b", fmt.Sprint(i), time.Time{})); r.err != nil {
			t.Fatal(r.err)
		}
	}
	// The counters lag the traffic they count: the last request may be
	// answered before b counts its frame, or before a counts it sent.
	// It waits for at least the counts wanted, so that a count too high
	// fails below, and one too low as "never settled".
	a, b := waitStats(t, p, func(a, b Stats) bool {
		return a.BatchesSent >= n+1 && b.EnvelopesReceived >= n+1 &&
			b.BatchesSent >= n && a.EnvelopesReceived >= n
	})
	// a dialled b: a sent the hello and the requests, one frame each, as
	// each call waited for its answer; b sent the responses.
	for _, c := range []struct {
		what      string
		got, want uint64
	}{
		{"a's envelopes sent", a.EnvelopesSent, n + 1},
		{"b's envelopes received", b.EnvelopesReceived, n + 1},
		{"b's envelopes sent", b.EnvelopesSent, n},
		{"a's batches sent", a.BatchesSent, n + 1},
		{"a's one-envelope batches", a.BatchSizes[0], n + 1},
		{"b's batches received", b.BatchesReceived, n + 1},
		{"b's batches sent", b.BatchesSent, n},
		{"a's batches received", a.BatchesReceived, n},
		{"b's bytes received", b.BytesReceived, a.BytesSent},
		{"a's bytes received", a.BytesReceived, b.BytesSent},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
	if a.BytesSent <= n || b.BytesSent <= n {
		t.Errorf("bytes sent: a %d, b %d; want more than one a frame", a.BytesSent, b.BytesSent)
	}
	if len(a.BatchBounds) != batchBounds || len(a.BatchSizes) != batchBounds+1 || a.BatchBounds[batchBounds-1] != 1024 {
		t.Errorf("batch histogram shape: bounds %v, %d counts", a.BatchBounds, len(a.BatchSizes))
	}
}

func TestStatsCountBatches(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	if r := wait(t, call(p.a, "b", "warm", time.Time{})); r.err != nil {
		t.Fatal(r.err)
	}
	// With b's reader held, the in-memory stream fills and a's writer
	// coalesces what is queued behind it.
	release := p.holdB()
	const n = 2000
	for i := range n {
		env := &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY, Payload: []byte(fmt.Sprint(i))}
		if err := p.a.Send("b", env, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	const total = n + 2 // the hello and the warm-up call
	// Each envelope is either written or still unsent (one just written
	// may be both, until the writer looks for more), never neither.
	if st := p.a.Stats(); st.EnvelopesSent+st.EnvelopesUnsent < total {
		t.Errorf("with b's reader held: %d envelopes sent and %d unsent, want at least %d in all", st.EnvelopesSent, st.EnvelopesUnsent, total)
	}
	release()
	a, b := waitStats(t, p, func(a, b Stats) bool {
		return b.EnvelopesReceived == total && a.BatchesSent == b.BatchesReceived && a.EnvelopesUnsent == 0
	})
	if a.EnvelopesSent != total {
		t.Errorf("a sent %d envelopes, want %d", a.EnvelopesSent, total)
	}
	// Batches sent and received are equal by the wait; bytes need not be.
	if a.BytesSent != b.BytesReceived {
		t.Errorf("a sent %d batches of %d bytes; b received %d of %d", a.BatchesSent, a.BytesSent, b.BatchesReceived, b.BytesReceived)
	}
	if sum(a.BatchSizes) != a.BatchesSent {
		t.Errorf("batch sizes %v add up to %d, want %d", a.BatchSizes, sum(a.BatchSizes), a.BatchesSent)
	}
	if a.BatchesSent >= total {
		t.Errorf("%d batches for %d envelopes: none coalesced", a.BatchesSent, total)
	}
	if sum(a.BatchSizes[1:]) == 0 {
		t.Errorf("no batch of more than one envelope: %v", a.BatchSizes)
	}
}

// TestStatusThroughEnvelope: an error sent in a response envelope comes
// back with its code and its message once, not wrapped in a second
// "rpc error" prefix.
func TestStatusThroughEnvelope(t *testing.T) {
	t.Parallel()
	err := status.Errorf(codes.NotFound, "granary: grain type x has no method %q", "Y")
	got := StatusOf(SetStatus(&granaryv1.Envelope{}, err))
	if status.Code(got) != codes.NotFound || got.Error() != err.Error() || strings.Count(got.Error(), "rpc error") != 1 {
		t.Fatalf("round trip of %v = %v", err, got)
	}
	if StatusOf(&granaryv1.Envelope{}) != nil {
		t.Fatal("an envelope with code 0 should carry no error")
	}
}
