package activation

import (
	"math/rand/v2"
	"testing"
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
			// Remove a run of turns, as a worker does after a batch: peekN
			// must see the model's order, and popN must drop exactly m,
			// across the inline slot and segment edges.
			m := 1 + rng.IntN(min(len(model), 40))
			buf := make([]Turn, m)
			if k := q.peekN(buf); k != m {
				t.Fatalf("step %d: peekN copied %d; want %d", i, k, m)
			}
			for j := range m {
				if buf[j].Name != model[j] {
					t.Fatalf("step %d: peekN[%d] = %q; want %q", i, j, buf[j].Name, model[j])
				}
			}
			q.popN(m)
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
		q.popN(1)
		model = model[1:]
	}
	if _, ok := q.peek(); ok || q.head != nil {
		t.Fatal("drained queue is not empty")
	}
}
