package local

import (
	"hash/maphash"
	"sync"
)

// catalogShards is how many locks divide a grain type's catalog: enough
// that two processors rarely take the same one.
const catalogShards = 64

// catalogSeed hashes keys to shards.
var catalogSeed = maphash.MakeSeed()

// catalog maps grain keys to a type's activations. It is a map per shard
// under a read-write lock, where a sync.Map was before: a sync.Map entry
// is two objects of its own (the node and the key boxed in an interface)
// and a lookup walks several nodes, where a Go map keeps its entries in
// its own arrays. With a million activations the collector traced those
// objects on every cycle, and the lookups missed the cache at each node.
type catalog struct {
	shards [catalogShards]catalogShard
}

type catalogShard struct {
	mu sync.RWMutex
	m  map[string]*Activation
	_  [32]byte // one shard per 64-byte cache line
}

func (c *catalog) shard(key string) *catalogShard {
	return &c.shards[maphash.String(catalogSeed, key)%catalogShards]
}

// Load returns the activation of key, if any.
func (c *catalog) Load(key string) (*Activation, bool) {
	sh := c.shard(key)
	sh.mu.RLock()
	a, ok := sh.m[key]
	sh.mu.RUnlock()
	return a, ok
}

// loadOrStore returns the activation of key if there is one (loaded), else
// stores a and returns it.
func (c *catalog) loadOrStore(key string, a *Activation) (actual *Activation, loaded bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old, ok := sh.m[key]; ok {
		return old, true
	}
	if sh.m == nil {
		sh.m = make(map[string]*Activation)
	}
	sh.m[key] = a
	return a, false
}

// compareAndDelete removes key if it maps to a, and reports whether it did.
func (c *catalog) compareAndDelete(key string, a *Activation) bool {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m[key] != a {
		return false
	}
	delete(sh.m, key)
	return true
}

// each calls fn for the activations of one shard after another, until fn
// returns false. A shard is copied under its lock and visited without it,
// so fn may add and remove activations; it sees each activation that was
// in the catalog throughout, and may or may not see the others.
func (c *catalog) each(fn func(*Activation) bool) {
	var batch []*Activation
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		batch = batch[:0]
		for _, a := range sh.m {
			batch = append(batch, a)
		}
		sh.mu.RUnlock()
		for _, a := range batch {
			if !fn(a) {
				return
			}
		}
	}
}
