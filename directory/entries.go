package directory

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/hashmix"
	"github.com/jonboulle/clockwork"
)

// This file holds the entries and the two places they are kept: the
// owner's Partition, authoritative, and the caller's Cache, a hint.

// Entry says where a grain's activation lives.
type Entry struct {
	Silo       string // member ID of the silo holding the activation
	Activation uint64 // the activation's ID on that silo
}

// IsZero reports whether e is the zero Entry, which names no activation.
func (e Entry) IsZero() bool { return e == Entry{} }

// String returns "silo:activation".
func (e Entry) String() string {
	if e.IsZero() {
		return "none"
	}
	return e.Silo + ":" + strconv.FormatUint(e.Activation, 10)
}

// Item is one grain's entry.
type Item struct {
	ID    grain.ID
	Entry Entry
}

func (it Item) String() string { return it.ID.String() + "=" + it.Entry.String() }

// Partition holds the entries of the grains one silo owns. Registration is
// first-wins: an entry, once recorded, stays until it is unregistered by
// itself, purged with its silo, or extracted to move to another owner.
//
// Not safe for concurrent use: the Directory's mutex guards it.
type Partition struct {
	m map[grain.ID]Entry
}

// NewPartition returns an empty partition.
func NewPartition() *Partition { return &Partition{m: make(map[grain.ID]Entry)} }

// Lookup returns id's entry, if it has one.
func (p *Partition) Lookup(id grain.ID) (Entry, bool) {
	e, ok := p.m[id]
	return e, ok
}

// Register records e for id unless id has an entry already, and returns
// the entry that holds: e, or the one recorded first. Registering the
// recorded entry again returns it. e must name a silo.
func (p *Partition) Register(id grain.ID, e Entry) (winner Entry) {
	if e.Silo == "" {
		panic(fmt.Sprintf("directory: Partition.Register(%v, %v): the entry names no silo", id, e))
	}
	if old, ok := p.m[id]; ok {
		return old
	}
	p.m[id] = e
	return e
}

// Unregister removes id's entry if it is e, and reports whether it did. An
// entry that differs (a newer activation, or another silo's) stays.
func (p *Partition) Unregister(id grain.ID, e Entry) bool {
	if old, ok := p.m[id]; !ok || old != e {
		return false
	}
	delete(p.m, id)
	return true
}

// PurgeSilo removes every entry naming silo, and returns how many it
// removed.
func (p *Partition) PurgeSilo(silo string) int {
	n := 0
	for id, e := range p.m {
		if e.Silo == silo {
			delete(p.m, id)
			n++
		}
	}
	return n
}

// Extract removes the entries of the grains for which keep returns false,
// and returns them sorted by ID.
func (p *Partition) Extract(keep func(grain.ID) bool) []Item {
	var out []Item
	for id, e := range p.m {
		if !keep(id) {
			out = append(out, Item{ID: id, Entry: e})
			delete(p.m, id)
		}
	}
	sortItems(out)
	return out
}

// Items returns a copy of every entry, sorted by ID.
func (p *Partition) Items() []Item {
	out := make([]Item, 0, len(p.m))
	for id, e := range p.m {
		out = append(out, Item{ID: id, Entry: e})
	}
	sortItems(out)
	return out
}

// Len returns how many entries the partition holds.
func (p *Partition) Len() int { return len(p.m) }

func sortItems(items []Item) {
	slices.SortFunc(items, func(a, b Item) int {
		if c := cmp.Compare(a.ID.Type, b.ID.Type); c != 0 {
			return c
		}
		return cmp.Compare(a.ID.Key, b.ID.Key)
	})
}

// evictionSample is how many entries a full Cache samples to choose the
// one to evict: the one that expires first. Sampling a few at random
// approximates evicting the least recently written entry at O(1) cost and
// no per-entry list links; an expired entry in the sample goes first.
const evictionSample = 3

// MaxCacheSize bounds a Cache's capacity: slots are indexed by int32.
const MaxCacheSize = 1 << 30

// Cache is a caller-side cache of directory lookups: grain ID to the entry
// last learned for it. It holds at most its capacity, evicting an entry
// chosen from a small random sample when full, and forgets an entry TTL
// after it was put, by its clock. A cached entry may be stale: a caller
// that finds no activation where the cache said invalidates it.
//
// Safe for concurrent use: any goroutine.
type Cache struct {
	capacity int
	ttl      time.Duration
	clock    clockwork.Clock

	mu    sync.Mutex
	index map[grain.ID]int32 // mu; position in slots
	slots []cacheSlot        // mu; dense, in no order
	rnd   uint64             // mu; splitmix64 state for eviction samples
}

type cacheSlot struct {
	id      grain.ID
	entry   Entry
	expires time.Time
}

// NewCache returns a cache of at most capacity entries (0 caches nothing;
// more than MaxCacheSize is MaxCacheSize) that live for ttl on clock.
func NewCache(capacity int, ttl time.Duration, clock clockwork.Clock) *Cache {
	capacity = min(max(capacity, 0), MaxCacheSize)
	return &Cache{
		capacity: capacity,
		ttl:      ttl,
		clock:    clock,
		index:    make(map[grain.ID]int32, min(capacity, 1024)),
	}
}

// Get returns id's cached entry unless it expired. Any goroutine.
func (c *Cache) Get(id grain.ID) (Entry, bool) {
	if c.capacity == 0 {
		return Entry{}, false
	}
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.index[id]
	if !ok {
		return Entry{}, false
	}
	if !now.Before(c.slots[i].expires) {
		c.removeLocked(i)
		return Entry{}, false
	}
	return c.slots[i].entry, true
}

// Put caches e for id, replacing what was cached and restarting its TTL.
// A zero e is not cached. Any goroutine.
func (c *Cache) Put(id grain.ID, e Entry) {
	if c.capacity == 0 || e.IsZero() {
		return
	}
	expires := c.clock.Now().Add(c.ttl)
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, ok := c.index[id]; ok {
		c.slots[i].entry, c.slots[i].expires = e, expires
		return
	}
	if len(c.slots) >= c.capacity {
		c.evictLocked()
	}
	c.index[id] = int32(len(c.slots))
	c.slots = append(c.slots, cacheSlot{id: id, entry: e, expires: expires})
}

// Invalidate drops id's cached entry if it is e; a zero e drops whatever
// is cached for id. Any goroutine.
func (c *Cache) Invalidate(id grain.ID, e Entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, ok := c.index[id]; ok && (e.IsZero() || c.slots[i].entry == e) {
		c.removeLocked(i)
	}
}

// InvalidateSilo drops every cached entry naming silo. It takes time in
// proportion to the cache's size. Any goroutine.
func (c *Cache) InvalidateSilo(silo string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 0; i < len(c.slots); {
		if c.slots[i].entry.Silo == silo {
			c.removeLocked(int32(i)) // moves the last slot to i: look at i again
			continue
		}
		i++
	}
}

// Len returns how many entries are cached, expired ones included until
// they are found or evicted. Any goroutine.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.slots)
}

// evictLocked drops the entry that expires first among a few sampled at
// random. c.mu held; the cache is not empty.
func (c *Cache) evictLocked() {
	victim := c.randLocked(len(c.slots))
	for range evictionSample - 1 {
		if i := c.randLocked(len(c.slots)); c.slots[i].expires.Before(c.slots[victim].expires) {
			victim = i
		}
	}
	c.removeLocked(victim)
}

// removeLocked drops slot i, moving the last slot into its place. c.mu
// held.
func (c *Cache) removeLocked(i int32) {
	last := int32(len(c.slots) - 1)
	delete(c.index, c.slots[i].id)
	if i != last {
		c.slots[i] = c.slots[last]
		c.index[c.slots[i].id] = i
	}
	c.slots[last] = cacheSlot{}
	c.slots = c.slots[:last]
}

// randLocked returns a pseudo-random index below n. c.mu held.
func (c *Cache) randLocked(n int) int32 {
	c.rnd += 0x9e3779b97f4a7c15
	return int32(hashmix.Mix64(c.rnd) % uint64(n))
}
