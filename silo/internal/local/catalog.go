package local

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// catalogShards is how many locks divide a grain type's catalog: enough
// that two processors rarely take the same one.
const catalogShards = 64

// catalogSeed hashes keys to shards and to slots.
var catalogSeed = maphash.MakeSeed()

// catalog maps grain keys to a type's activations.
//
// Every call looks its activation up, from any goroutine, so a lookup
// takes no lock and writes nothing: a read lock's count is a word that
// every lookup of its shard writes, and senders on different processors
// handed that cache line back and forth on each call. Each shard is an
// open-addressed table of activation pointers, probed linearly from the
// key's hash and compared by the activation's own key; changes are made
// under the shard's lock, and a table that fills up, or empties out, is
// replaced by a rebuilt one. A lookup on a table just replaced may miss
// an activation stored meanwhile, or find one removed meanwhile, as it
// could had it run a moment earlier.
//
// A slot costs 8 bytes, at most twice over: less than a Go map's entry
// of a string key and a pointer, and no object of its own, which the
// collector would trace on every cycle (a sync.Map has two per entry).
type catalog struct {
	shards [catalogShards]catalogShard
}

type catalogShard struct {
	mu    sync.Mutex
	table atomic.Pointer[catalogTable]
	// Under mu: activations stored, and slots not nil (those and the
	// removed ones).
	live, used int
	_          [24]byte // one shard per 64-byte cache line
}

// catalogTable is a shard's slots: nil (never used), catalogRemoved, or
// an activation. At least a quarter of them are nil, so a probe ends.
type catalogTable struct {
	mask  uint64
	slots []atomic.Pointer[Activation]
}

// catalogRemoved marks a slot whose activation was removed: a probe
// passes over it, and a store may reuse it.
var catalogRemoved = new(Activation)

// minCatalogTable is the size of a shard's first table.
const minCatalogTable = 8

func catalogHash(key string) uint64 { return maphash.String(catalogSeed, key) }

func (c *catalog) shard(h uint64) *catalogShard { return &c.shards[h%catalogShards] }

// slotOf is where the probe for hash h starts: the bits above those
// that chose the shard.
func (t *catalogTable) slotOf(h uint64) uint64 { return (h / catalogShards) & t.mask }

// Load returns the activation of key, if any. Any goroutine; no lock.
func (c *catalog) Load(key string) (*Activation, bool) {
	h := catalogHash(key)
	t := c.shard(h).table.Load()
	if t == nil {
		return nil, false
	}
	for i := t.slotOf(h); ; i = (i + 1) & t.mask {
		switch a := t.slots[i].Load(); {
		case a == nil:
			return nil, false
		case a != catalogRemoved && a.ID.Key == key:
			return a, true
		}
	}
}

// loadOrStore returns the activation of key if there is one (loaded), else
// stores a, whose key is key, and returns it.
func (c *catalog) loadOrStore(key string, a *Activation) (actual *Activation, loaded bool) {
	h := catalogHash(key)
	sh := c.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.table.Load()
	if t == nil || 4*(sh.used+1) > 3*len(t.slots) {
		t = sh.rebuildLocked(sh.live + 1)
	}
	free := -1
	for i := t.slotOf(h); ; i = (i + 1) & t.mask {
		switch old := t.slots[i].Load(); {
		case old == nil:
			if free < 0 {
				free = int(i)
				sh.used++
			}
			t.slots[free].Store(a)
			sh.live++
			return a, false
		case old == catalogRemoved:
			if free < 0 {
				free = int(i)
			}
		case old.ID.Key == key:
			return old, true
		}
	}
}

// compareAndDelete removes key if it maps to a, and reports whether it did.
func (c *catalog) compareAndDelete(key string, a *Activation) bool {
	h := catalogHash(key)
	sh := c.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.table.Load()
	if t == nil {
		return false
	}
	for i := t.slotOf(h); ; i = (i + 1) & t.mask {
		switch old := t.slots[i].Load(); {
		case old == nil:
			return false
		case old == a:
			t.slots[i].Store(catalogRemoved)
			sh.live--
			if len(t.slots) > minCatalogTable && 8*sh.live < len(t.slots) {
				sh.rebuildLocked(sh.live) // give the memory back
			}
			return true
		}
	}
}

// rebuildLocked replaces the shard's table with one sized for n
// activations, holding those stored and no removed slots, and returns it.
// mu held.
func (sh *catalogShard) rebuildLocked(n int) *catalogTable {
	size := minCatalogTable
	for 2*n > size { // at most half full when built
		size *= 2
	}
	t := &catalogTable{mask: uint64(size - 1), slots: make([]atomic.Pointer[Activation], size)}
	if old := sh.table.Load(); old != nil {
		for i := range old.slots {
			a := old.slots[i].Load()
			if a == nil || a == catalogRemoved {
				continue
			}
			j := t.slotOf(catalogHash(a.ID.Key))
			for t.slots[j].Load() != nil {
				j = (j + 1) & t.mask
			}
			t.slots[j].Store(a)
		}
	}
	sh.used = sh.live
	sh.table.Store(t)
	return t
}

// each calls fn for the activations of one shard after another, until fn
// returns false. A shard is copied under its lock and visited without it,
// so fn may add and remove activations; it sees each activation that was
// in the catalog throughout, and may or may not see the others.
func (c *catalog) each(fn func(*Activation) bool) {
	var batch []*Activation
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		batch = batch[:0]
		if t := sh.table.Load(); t != nil {
			for j := range t.slots {
				if a := t.slots[j].Load(); a != nil && a != catalogRemoved {
					batch = append(batch, a)
				}
			}
		}
		sh.mu.Unlock()
		for _, a := range batch {
			if !fn(a) {
				return
			}
		}
	}
}
