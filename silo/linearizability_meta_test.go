package silo

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
)

// Tests of the linearizability checks themselves: each runs a check once
// over a broken provider, and fails unless porcupine rejects the history,
// i.e. if the check could not tell the broken system from a correct one.

// requireRejected fails t unless porcupine found r's history not
// linearizable.
func requireRejected(t *testing.T, r linRun, why string) {
	t.Helper()
	if r.res != porcupine.Illegal {
		t.Fatalf("porcupine says %s over a broken provider: %s", r.res, why)
	}
}

// amnesiacProvider acknowledges, but never stores, the writes made after a
// grain's state was read a second time, that is, by every activation of a
// grain after its first. It returns the ETag the writer gave, so the
// activation goes on writing "successfully".
type amnesiacProvider struct {
	*storage.Memory
	mu    sync.Mutex
	reads map[grain.ID]int
}

func (p *amnesiacProvider) ReadState(ctx context.Context, id grain.ID, name string) (storage.Record, error) {
	p.mu.Lock()
	p.reads[id]++
	p.mu.Unlock()
	return p.Memory.ReadState(ctx, id, name)
}

func (p *amnesiacProvider) WriteState(ctx context.Context, id grain.ID, name string, data []byte, etag string) (string, error) {
	p.mu.Lock()
	reactivated := p.reads[id] >= 2
	p.mu.Unlock()
	if reactivated && etag != "" {
		return etag, nil // acknowledged, not stored
	}
	return p.Memory.WriteState(ctx, id, name, data, etag)
}

// TestLinearizabilityCatchesLostWrites: every write by a register's
// second or later activation is acknowledged and lost. The churn and the
// final deactivations make later activations read the store, and see
// an older value than the writes acknowledged before.
func TestLinearizabilityCatchesLostWrites(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a check of the check; -short")
	}
	r := runKillAndChurn(t, &amnesiacProvider{Memory: storage.NewMemory(0), reads: map[grain.ID]int{}})
	requireRejected(t, r, "every write by a register's second or later activation was acknowledged and never stored")
}

// etagBlindProvider ignores the ETag a write or clear names and overwrites
// whatever is stored (last writer wins): no fencing between two
// activations of a grain.
type etagBlindProvider struct{ *storage.Memory }

func (p etagBlindProvider) WriteState(ctx context.Context, id grain.ID, name string, data []byte, _ string) (string, error) {
	for {
		r, err := p.Memory.ReadState(ctx, id, name)
		if err != nil {
			return "", err
		}
		e, err := p.Memory.WriteState(ctx, id, name, data, r.ETag)
		if !errors.Is(err, storage.ErrETagMismatch) {
			return e, err
		}
	}
}

func (p etagBlindProvider) ClearState(ctx context.Context, id grain.ID, name string, _ string) (string, error) {
	for {
		r, err := p.Memory.ReadState(ctx, id, name)
		if err != nil {
			return "", err
		}
		e, err := p.Memory.ClearState(ctx, id, name, r.ETag)
		if !errors.Is(err, storage.ErrETagMismatch) {
			return e, err
		}
	}
}

// TestLinearizabilityCatchesETagBlindStore: the store lets every write
// through, so the duplicate activations of a register each go on
// serving, and writing back, a value of their own.
func TestLinearizabilityCatchesETagBlindStore(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a check of the check; -short")
	}
	r := runDuplicates(t, etagBlindProvider{storage.NewMemory(0)})
	requireRejected(t, r, "the store ignores ETags, so nothing fences the register's duplicate activations")
}
