package scenario

import (
	"context"
	"errors"
	"sync"
	"testing"
)

func TestIndexedMakesEachValueOnce(t *testing.T) {
	var mu sync.Mutex
	made := map[int]int{}
	x := NewIndexed(4, func(i int) int {
		mu.Lock()
		made[i]++
		mu.Unlock()
		return i * 10
	})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				if got := x.Get((i*7 + w) % 50); got != ((i*7+w)%50)*10 {
					t.Errorf("Get(%d) = %d", (i*7+w)%50, got)
				}
			}
		})
	}
	wg.Wait()
	for i, n := range made {
		if n != 1 {
			t.Errorf("value %d made %d times, want once", i, n)
		}
	}
	if len(made) < 50 {
		t.Errorf("%d values made, want at least the 50 asked for", len(made))
	}
}

func TestParallelVisitsEveryIndexOnce(t *testing.T) {
	const n = 1000
	var mu sync.Mutex
	seen := make([]int, n)
	if err := Parallel(context.Background(), n, 8, func(i int) error {
		mu.Lock()
		seen[i]++
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("index %d visited %d times, want once", i, c)
		}
	}
}

func TestParallelReturnsErrors(t *testing.T) {
	boom := errors.New("boom")
	err := Parallel(context.Background(), 100, 4, func(i int) error {
		if i == 37 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err = Parallel(ctx, 100, 1, func(int) error { calls++; return nil })
	if !errors.Is(err, context.Canceled) || calls != 0 {
		t.Fatalf("after cancel: err %v, %d calls; want Canceled and none", err, calls)
	}
}
