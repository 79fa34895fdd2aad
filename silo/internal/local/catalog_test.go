package local

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/granaryio/granary/grain"
)

func catalogAct(key string) *Activation {
	return &Activation{ID: grain.NewID("t", key)}
}

// TestCatalogKeepsEveryActivationThroughGrowthAndShrinking stores, finds
// and removes enough activations that every shard's table is rebuilt
// larger and then smaller, with removed slots among the live ones.
func TestCatalogKeepsEveryActivationThroughGrowthAndShrinking(t *testing.T) {
	var c catalog
	const n = 20000
	acts := make([]*Activation, n)
	for i := range acts {
		key := strconv.Itoa(i)
		acts[i] = catalogAct(key)
		if got, loaded := c.loadOrStore(key, acts[i]); loaded || got != acts[i] {
			t.Fatalf("store %s: loaded %v", key, loaded)
		}
	}
	for i, a := range acts {
		key := strconv.Itoa(i)
		if got, loaded := c.loadOrStore(key, catalogAct(key)); !loaded || got != a {
			t.Fatalf("second store of %s replaced the first", key)
		}
	}
	// Remove the odd ones, then all but every hundredth.
	for pass, keep := range []int{2, 100} {
		for i, a := range acts {
			if a == nil || i%keep == 0 {
				continue
			}
			if c.compareAndDelete(strconv.Itoa(i), catalogAct("other")) {
				t.Fatalf("pass %d: removed %d for another activation", pass, i)
			}
			if !c.compareAndDelete(strconv.Itoa(i), a) {
				t.Fatalf("pass %d: %d not removed", pass, i)
			}
			acts[i] = nil
		}
		for i, a := range acts {
			got, ok := c.Load(strconv.Itoa(i))
			if ok != (a != nil) || got != a {
				t.Fatalf("pass %d: Load(%d) = %p, %v; want %p", pass, i, got, ok, a)
			}
		}
	}
	seen := 0
	c.each(func(a *Activation) bool {
		i, _ := strconv.Atoi(a.ID.Key)
		if acts[i] != a {
			t.Fatalf("each visited %s, which was removed", a.ID.Key)
		}
		seen++
		return true
	})
	if seen != n/100 {
		t.Fatalf("each visited %d activations, want %d", seen, n/100)
	}
	small := 0
	for i := range c.shards {
		sh := &c.shards[i]
		if tb := sh.table.Load(); tb != nil && len(tb.slots) <= 8*max(sh.live, 1) {
			small++
		}
	}
	if small != catalogShards {
		t.Fatalf("%d of %d shards gave back the memory of removed activations", small, catalogShards)
	}
}

// TestCatalogLoadsWithoutLockWhileItChanges reads a fixed set of
// activations while others are stored and removed over and over, growing
// and shrinking the tables: every read finds its activation. Under -race
// it also checks that lookups and changes share nothing unsynchronised.
func TestCatalogLoadsWithoutLockWhileItChanges(t *testing.T) {
	var c catalog
	const fixed = 500
	acts := make([]*Activation, fixed)
	for i := range acts {
		acts[i] = catalogAct("fixed" + strconv.Itoa(i))
		c.loadOrStore(acts[i].ID.Key, acts[i])
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		defer stop.Store(true)
		for round := range 20 {
			churn := make([]*Activation, 2000)
			for i := range churn {
				churn[i] = catalogAct("churn" + strconv.Itoa(round) + "." + strconv.Itoa(i))
				c.loadOrStore(churn[i].ID.Key, churn[i])
			}
			for _, a := range churn {
				c.compareAndDelete(a.ID.Key, a)
			}
		}
	})
	var misses atomic.Int64
	for range 2 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				a := acts[i%fixed]
				if got, ok := c.Load(a.ID.Key); !ok || got != a {
					misses.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := misses.Load(); n != 0 {
		t.Fatalf("%d lookups of stored activations missed while the catalog changed", n)
	}
}
