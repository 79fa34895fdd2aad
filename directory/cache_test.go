package directory_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
)

const testTTL = time.Minute

func TestCacheGetPut(t *testing.T) {
	c := directory.NewCache(10, testTTL, clockwork.NewFakeClock())
	if _, ok := c.Get(g1); ok {
		t.Fatal("empty cache found g1")
	}
	c.Put(g1, ent("a", 1))
	c.Put(g1, ent("b", 2)) // replaces
	c.Put(g2, directory.Entry{})
	if e, ok := c.Get(g1); !ok || e != ent("b", 2) {
		t.Errorf("Get(g1) = %v, %t, want b:2", e, ok)
	}
	if _, ok := c.Get(g2); ok || c.Len() != 1 {
		t.Errorf("the zero entry was cached: Len() = %d", c.Len())
	}
}

func TestCacheTTL(t *testing.T) {
	clock := clockwork.NewFakeClock()
	c := directory.NewCache(10, testTTL, clock)
	c.Put(g1, ent("a", 1))
	clock.Advance(testTTL / 2)
	c.Put(g2, ent("a", 2))
	clock.Advance(testTTL/2 - time.Nanosecond)
	if _, ok := c.Get(g1); !ok {
		t.Fatal("g1 expired before its TTL")
	}
	clock.Advance(time.Nanosecond)
	if _, ok := c.Get(g1); ok {
		t.Fatal("g1 outlived its TTL")
	}
	if _, ok := c.Get(g2); !ok {
		t.Fatal("g2 expired with g1")
	}
	c.Put(g2, ent("a", 3)) // a Put restarts the TTL
	clock.Advance(testTTL - time.Nanosecond)
	if e, ok := c.Get(g2); !ok || e != ent("a", 3) {
		t.Fatalf("Get(g2) = %v, %t after a refreshing Put", e, ok)
	}
	if c.Len() != 1 {
		t.Errorf("Len() = %d, want 1: an expired entry found by Get is removed", c.Len())
	}
}

func TestCacheCapacity(t *testing.T) {
	clock := clockwork.NewFakeClock()
	const capacity = 100
	c := directory.NewCache(capacity, testTTL, clock)
	for i := range 1000 {
		id := grain.NewID("t", fmt.Sprint(i))
		c.Put(id, ent("a", uint64(i)))
		if c.Len() > capacity {
			t.Fatalf("after %d puts Len() = %d, want at most %d", i+1, c.Len(), capacity)
		}
		if _, ok := c.Get(id); !ok {
			t.Fatalf("the entry just put, %v, was evicted", id)
		}
		clock.Advance(time.Millisecond)
	}
	if c.Len() != capacity {
		t.Errorf("Len() = %d, want %d", c.Len(), capacity)
	}
	// Eviction prefers the entries that expire first: most survivors are
	// recent.
	recent := 0
	for i := 800; i < 1000; i++ {
		if _, ok := c.Get(grain.NewID("t", fmt.Sprint(i))); ok {
			recent++
		}
	}
	if recent < capacity/2 {
		t.Errorf("only %d of %d survivors are among the last 200 put", recent, capacity)
	}

	off := directory.NewCache(0, testTTL, clock)
	off.Put(g1, ent("a", 1))
	if _, ok := off.Get(g1); ok || off.Len() != 0 {
		t.Error("a cache of capacity 0 cached")
	}
}

func TestCacheInvalidate(t *testing.T) {
	tests := []struct {
		name   string
		cached directory.Entry
		drop   directory.Entry
		gone   bool
	}{
		{"the cached entry", ent("a", 1), ent("a", 1), true},
		{"any entry, with the zero entry", ent("a", 1), directory.Entry{}, true},
		{"not another activation", ent("a", 2), ent("a", 1), false},
		{"not another silo's", ent("a", 1), ent("b", 1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := directory.NewCache(10, testTTL, clockwork.NewFakeClock())
			c.Put(g1, tt.cached)
			c.Put(g2, tt.cached)
			c.Invalidate(g1, tt.drop)
			if _, ok := c.Get(g1); ok == tt.gone {
				t.Errorf("after Invalidate(g1, %v) of %v, Get found it: %t", tt.drop, tt.cached, ok)
			}
			if _, ok := c.Get(g2); !ok {
				t.Error("Invalidate(g1) dropped g2")
			}
		})
	}
	c := directory.NewCache(10, testTTL, clockwork.NewFakeClock())
	c.Invalidate(g1, directory.Entry{}) // absent: nothing happens
}

func TestCacheInvalidateSilo(t *testing.T) {
	c := directory.NewCache(100, testTTL, clockwork.NewFakeClock())
	want := make(map[grain.ID]directory.Entry)
	for i := range 50 {
		id := grain.NewID("t", fmt.Sprint(i))
		e := ent([]string{"a", "b", "c"}[i%3], uint64(i))
		c.Put(id, e)
		if e.Silo != "b" {
			want[id] = e
		}
	}
	c.InvalidateSilo("b")
	c.InvalidateSilo("z")
	if c.Len() != len(want) {
		t.Errorf("Len() = %d, want %d", c.Len(), len(want))
	}
	for id, e := range want {
		if got, ok := c.Get(id); !ok || got != e {
			t.Errorf("Get(%v) = %v, %t, want %v", id, got, ok, e)
		}
	}
}

// TestCacheConcurrent lets the race detector watch concurrent use.
func TestCacheConcurrent(t *testing.T) {
	clock := clockwork.NewFakeClock()
	c := directory.NewCache(64, testTTL, clock)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				id := grain.NewID("t", fmt.Sprint(i%200))
				switch i % 5 {
				case 0, 1:
					c.Put(id, ent(fmt.Sprint(w%3), uint64(i)))
				case 2, 3:
					c.Get(id)
				default:
					if i%50 == 4 {
						c.InvalidateSilo(fmt.Sprint(w % 3))
					} else {
						c.Invalidate(id, directory.Entry{})
					}
				}
			}
		})
	}
	wg.Wait()
	if c.Len() > 64 {
		t.Errorf("Len() = %d past capacity 64", c.Len())
	}
}

func BenchmarkCacheGet(b *testing.B) {
	c := directory.NewCache(100_000, testTTL, clockwork.NewRealClock())
	ids := sampleIDs(1024)
	for _, id := range ids {
		c.Put(id, ent("a", 1))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Get(ids[i%len(ids)])
	}
}

// BenchmarkCacheMemory: the heap a full cache of 100,000 entries (the
// default CacheSize) holds, per entry, with its index. The grain IDs'
// strings are the caller's and not counted.
func BenchmarkCacheMemory(b *testing.B) {
	const n = 100_000
	ids := sampleIDs(n)
	var perEntry float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := directory.NewCache(n, testTTL, clockwork.NewRealClock())
		for i, id := range ids {
			c.Put(id, ent("silo-a", uint64(i+1)))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perEntry = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
		runtime.KeepAlive(c)
	}
	b.ReportMetric(perEntry, "B/entry")
}
