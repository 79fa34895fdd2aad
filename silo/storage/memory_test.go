package storage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/storagetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryContract(t *testing.T) {
	storagetest.RunProvider(t, storagetest.Factory{
		Open: func(t *testing.T, max int) storage.Provider { return storage.NewMemory(max) },
	})
	storagetest.RunReminderTable(t, func(t *testing.T) storage.ReminderTable { return storage.NewMemory(0) })
}

func TestMemoryDown(t *testing.T) {
	m := storage.NewMemory(0)
	ctx := context.Background()
	id := grain.NewID("t.G", "k")
	m.SetDown(true)
	if _, err := m.WriteState(ctx, id, "s", []byte("x"), ""); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("write while down: %v, want ErrUnavailable", err)
	}
	if _, err := m.GrainReminders(ctx, id); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("reminders while down: %v, want ErrUnavailable", err)
	}
	m.SetDown(false)
	e, err := m.WriteState(ctx, id, "s", []byte("x"), "")
	if err != nil {
		t.Fatalf("write after coming back: %v", err)
	}
	r, err := m.ReadState(ctx, id, "s")
	if err != nil || r.ETag != e || string(r.Data) != "x" {
		t.Fatalf("read after coming back = %+v, %v", r, err)
	}
}

func TestMemoryFault(t *testing.T) {
	m := storage.NewMemory(0)
	ctx := context.Background()
	hit, other := grain.NewID("t.G", "hit"), grain.NewID("t.G", "other")
	boom := errors.New("boom")
	var ops []storage.Op
	m.SetFault(func(_ context.Context, op storage.Op, id grain.ID) error {
		ops = append(ops, op)
		if id == hit {
			return boom
		}
		return nil
	})
	if _, err := m.WriteState(ctx, hit, "s", nil, ""); !errors.Is(err, boom) {
		t.Fatalf("faulted write: %v", err)
	}
	if _, err := m.WriteState(ctx, other, "s", nil, ""); err != nil {
		t.Fatalf("write of another grain: %v", err)
	}
	if len(ops) != 2 || ops[0] != storage.OpWriteState {
		t.Fatalf("hook saw %v", ops)
	}
	m.SetFault(nil)
	if _, err := m.WriteState(ctx, hit, "s", nil, ""); err != nil {
		t.Fatalf("write after the hook was removed: %v", err)
	}
}

func BenchmarkStateWrite(b *testing.B) {
	storagetest.BenchmarkStateWrite(b, storage.NewMemory(0))
}
