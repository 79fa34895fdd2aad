package storage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/storagetest"
)

func TestMemoryStreamLogContract(t *testing.T) {
	storagetest.RunStreamLog(t, storagetest.StreamLogFactory{
		Open: func(t *testing.T, clock storage.Clock, maxSize int) storage.StreamLog {
			m := storage.NewMemory(maxSize)
			m.SetClock(clock)
			return m
		},
	})
}

// TestMemoryStreamLogFaults: the stream log's operations go through the
// fault hook and fail while the store is down, as the state operations do.
func TestMemoryStreamLogFaults(t *testing.T) {
	m := storage.NewMemory(0)
	ctx := context.Background()
	p := storage.StreamPartition{Provider: "durable", N: 1}
	boom := errors.New("boom")
	var ops []storage.Op
	m.SetFault(func(_ context.Context, op storage.Op, id grain.ID) error {
		ops = append(ops, op)
		if id != (grain.ID{}) {
			t.Errorf("%s: the hook saw grain %s, want the zero ID", op, id)
		}
		if op == storage.OpAppend {
			return boom
		}
		return nil
	})
	if err := m.Append(ctx, p, []storage.StreamRecord{{Stream: "s", Payload: []byte("x")}}); !errors.Is(err, boom) {
		t.Fatalf("faulted Append: %v", err)
	}
	if _, _, err := m.Bounds(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Read(ctx, p, 1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.OffsetAt(ctx, p, storage.SystemClock{}.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Trim(ctx, p, storage.SystemClock{}.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if err := m.SaveCursor(ctx, p, "sub", 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Cursor(ctx, p, "sub"); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteCursor(ctx, p, "sub"); err != nil {
		t.Fatal(err)
	}
	want := []storage.Op{storage.OpAppend, storage.OpBounds, storage.OpRead, storage.OpOffsetAt, storage.OpTrim,
		storage.OpSaveCursor, storage.OpCursor, storage.OpDeleteCursor}
	if len(ops) != len(want) {
		t.Fatalf("the hook saw %v, want %v", ops, want)
	}
	for i := range want {
		if ops[i] != want[i] {
			t.Fatalf("the hook saw %v, want %v", ops, want)
		}
	}
	// The faulted append changed nothing.
	if oldest, next, _ := m.Bounds(ctx, p); oldest != 0 || next != 1 {
		t.Fatalf("after a faulted append, Bounds = %d, %d; want 0, 1", oldest, next)
	}

	m.SetFault(nil)
	m.SetDown(true)
	if err := m.Append(ctx, p, []storage.StreamRecord{{Stream: "s"}}); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Append while down: %v, want ErrUnavailable", err)
	}
	if _, _, err := m.Cursor(ctx, p, "sub"); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Cursor while down: %v, want ErrUnavailable", err)
	}
	m.SetDown(false)
	if err := m.Append(ctx, p, []storage.StreamRecord{{Stream: "s"}}); err != nil {
		t.Fatalf("Append after coming back: %v", err)
	}
}

func BenchmarkStreamLogAppend(b *testing.B) {
	storagetest.BenchmarkStreamLogAppend(b, func(*testing.B) storage.StreamLog { return storage.NewMemory(0) })
}
