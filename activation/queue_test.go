package activation

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestTurnQueueModel checks the segmented queue against a slice, over
// random pushes and pops that cross the inline slot and segment edges.
func TestTurnQueueModel(t *testing.T) {
	var q turnQueue
	var model []string
	names := []string{"a", "b", "c", "d", "e", "f", "g"}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 100000 {
		if rng.IntN(100) < 90 || len(model) == 0 {
			n := names[i%len(names)] + string(rune('0'+i%10))
			q.push(Turn{Name: n})
			model = append(model, n)
		} else {
			got, ok := q.peek()
			if !ok || got.Name != model[0] {
				t.Fatalf("step %d: peek = %q, %v; want %q", i, got.Name, ok, model[0])
			}
			// Remove a run of turns, as a worker does after a batch: a copy
			// from the front must see the model's order, and popN must drop exactly m,
			// across the inline slot and segment edges.
			m := 1 + rng.IntN(min(len(model), 40))
			buf := make([]Turn, m)
			q.front().copy(buf)
			for j := range m {
				if buf[j].Name != model[j] {
					t.Fatalf("step %d: copy[%d] = %q; want %q", i, j, buf[j].Name, model[j])
				}
			}
			releaseSegments(q.popN(m, nil))
			model = model[m:]
		}
		if q.n != len(model) {
			t.Fatalf("step %d: n = %d; want %d", i, q.n, len(model))
		}
		if len(model) == 0 && (q.head != nil || q.tail != nil || q.oneFull) {
			t.Fatalf("step %d: empty queue still holds storage", i)
		}
	}
	for len(model) > 0 {
		got, _ := q.peek()
		if got.Name != model[0] {
			t.Fatalf("drain: peek = %q; want %q", got.Name, model[0])
		}
		releaseSegments(q.popN(1, nil))
		model = model[1:]
	}
	if _, ok := q.peek(); ok || q.head != nil {
		t.Fatal("drained queue is not empty")
	}
}

// TestGroupLayout keeps the Group's cache-line layout (see Group): the lock,
// the state and the application queue's header on the first line, the
// inline slot on the second, and the worker's per-turn fields off both,
// in 256 bytes so that every Group starts on a line.
func TestGroupLayout(t *testing.T) {
	var g Group
	checks := []struct {
		what       string
		off        uintptr
		line       uintptr
		sizeInLine uintptr
	}{
		{"mu", unsafe.Offsetof(g.mu), 0, unsafe.Sizeof(g.mu)},
		{"state", unsafe.Offsetof(g.state), 0, unsafe.Sizeof(g.state)},
		{"app header", unsafe.Offsetof(g.app), 0, unsafe.Offsetof(g.app.oneFull) + 1},
		{"app.one", unsafe.Offsetof(g.app) + unsafe.Offsetof(g.app.one), 1, unsafe.Sizeof(g.app.one)},
		{"sysPending", unsafe.Offsetof(g.sysPending), 3, 1},
		{"batchPos", unsafe.Offsetof(g.batchPos), 3, 4},
		{"turns", unsafe.Offsetof(g.turns), 3, 8},
		{"busy", unsafe.Offsetof(g.busy), 3, 8},
	}
	for _, c := range checks {
		first, last := c.off/cacheLine, (c.off+c.sizeInLine-1)/cacheLine
		if first != c.line || last != c.line {
			t.Errorf("%s spans bytes %d-%d, lines %d-%d; want all on line %d", c.what, c.off, c.off+c.sizeInLine-1, first, last, c.line)
		}
	}
	if size := unsafe.Sizeof(g); size != 4*cacheLine {
		t.Errorf("Group is %d bytes; want %d", size, 4*cacheLine)
	}
}
