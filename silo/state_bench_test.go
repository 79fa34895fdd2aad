package silo

import (
	"context"
	"testing"

	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/storage"
)

// BenchmarkGrainStateWrite: a grain call that changes the Register probe's
// persistent state and writes it, on the memory provider, so that what is
// measured is the runtime's part (the hand-off around the store, the ETag,
// the encoding) rather than a disk. BenchmarkGrainStateRead, the same
// grain's Get, which touches no store, is its baseline.
func BenchmarkGrainStateWrite(b *testing.B) {
	s := newStateBenchSilo(b)
	ref := reg(s, "bench")
	ctx := context.Background()
	req := &probe.RegisterOp{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		req.Value = int64(i)
		if _, err := ref.Set(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGrainStateRead(b *testing.B) {
	s := newStateBenchSilo(b)
	ref := reg(s, "bench")
	ctx := context.Background()
	req := &probe.RegisterOp{}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := ref.Get(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func newStateBenchSilo(b *testing.B) *Silo {
	b.Helper()
	s, err := startStateSilo(b, newRegisterWorld(), memoryStore(storage.NewMemory(0)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stopSilo(b, s) })
	if _, err := reg(s, "bench").Get(context.Background(), &probe.RegisterOp{}); err != nil {
		b.Fatal(err)
	}
	return s
}
