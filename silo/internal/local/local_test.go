package local

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/silo/storage"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCallChainWithRemoteLinks: a call that came from another silo has
// links with no local activation; its Context's CallChain names them
// instead of dereferencing a nil activation.
func TestCallChainWithRemoteLinks(t *testing.T) {
	t.Parallel()
	c := &Call{}
	c.Ctx.C = c
	c.Chain = &ChainLink{Remote: &granaryv1.ChainLink{Silo: "s-1", Grain: "bank.Account/alice"}}
	c.Depth = 1
	if got := c.Ctx.CallChain(); len(got) != 1 || got[0].String() != "bank.Account/alice" {
		t.Fatalf("CallChain = %v, want [bank.Account/alice]", got)
	}
}

// TestCountingProviderClears: the counting wrapper counts each operation
// it passes on, and a clear refused for a stale ETag as a failure and a
// conflict.
func TestCountingProviderClears(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cp := &CountingProvider{Provider: storage.NewMemory(0)}
	id := grain.NewID("t", "k")
	etag, err := cp.WriteState(ctx, id, "s", []byte("x"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.ClearState(ctx, id, "s", "stale"); err == nil {
		t.Fatal("a clear with a stale ETag succeeded")
	}
	if _, err := cp.ClearState(ctx, id, "s", etag); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.ReadState(ctx, id, "s"); err != nil {
		t.Fatal(err)
	}
	want := StateOps{Reads: 1, Writes: 1, Clears: 2, ClearFailures: 1, Conflicts: 1}
	if got := cp.Snapshot(); got != want {
		t.Fatalf("counts = %+v, want %+v", got, want)
	}
}

// TestCollectScheduleStaysOnGrid: the collector's look at a type moves
// one interval on when it comes on time or a little late, and to the next
// point of the same grid when it comes later than a whole interval, so
// looks never drift and never come more than an interval apart.
func TestCollectScheduleStaysOnGrid(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	iv := 500 * time.Millisecond
	typ := &GrainType{Interval: iv}
	for _, tc := range []struct {
		look, want time.Duration // since t0: the look, due at 500ms, and the next
	}{
		{500 * time.Millisecond, time.Second},
		{501 * time.Millisecond, time.Second},
		{999 * time.Millisecond, time.Second},
		{time.Second, 1500 * time.Millisecond},
		{3200 * time.Millisecond, 3500 * time.Millisecond},
	} {
		sc := collectSchedule{typ: typ, next: t0.Add(iv)}
		sc.advance(t0.Add(tc.look))
		if got := sc.next.Sub(t0); got != tc.want {
			t.Errorf("look at %v: next at %v, want %v", tc.look, got, tc.want)
		}
	}
	sched := []collectSchedule{{typ: typ, next: t0.Add(time.Second)}, {typ: typ, next: t0.Add(iv)}}
	if got := earliest(sched).Sub(t0); got != iv {
		t.Errorf("earliest = %v, want %v", got, iv)
	}
}

// TestChainLinkStaysIn32Bytes: every grain-to-grain call allocates
// a link, so it stays in the 32-byte size class, its seq and scope
// sharing a word, and both read back as written.
func TestChainLinkStaysIn32Bytes(t *testing.T) {
	if size := unsafe.Sizeof(ChainLink{}); size > 32 {
		t.Errorf("ChainLink is %d bytes, want at most 32", size)
	}
	for _, r := range []grainrt.ChainReentry{grainrt.ChainReentryDefault, grainrt.ChainReentryAllow, grainrt.ChainReentrySuppress} {
		for _, seq := range []uint64{0, 1, 1<<62 - 1} {
			l := NewChainLink(nil, seq, nil, r)
			if l.Seq() != seq || l.Reentry() != r {
				t.Errorf("NewChainLink(seq %d, scope %d) reads back seq %d, scope %d", seq, r, l.Seq(), l.Reentry())
			}
		}
	}
}

// TestActivationStaysIn320Bytes: what an activation costs in memory is
// mostly what the collector traces, and its record is the largest part;
// it stays within the 320-byte size class.
func TestActivationStaysIn320Bytes(t *testing.T) {
	if size := unsafe.Sizeof(Activation{}); size > 320 {
		t.Errorf("Activation is %d bytes, want at most 320", size)
	}
}

// TestPostStaysIn128Bytes: every posted one-way request takes a post, so
// it stays within the 128-byte size class, two cache lines.
func TestPostStaysIn128Bytes(t *testing.T) {
	if size := unsafe.Sizeof(post{}); size > 128 {
		t.Errorf("post is %d bytes, want at most 128", size)
	}
}
