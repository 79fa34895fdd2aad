package directory_test

import (
	"fmt"
	"testing"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
)

// ownedBy returns a grain ID, its key beginning with prefix, that d's ring
// gives to silo.
func ownedBy(t *testing.T, d *directory.Directory, silo, prefix string) grain.ID {
	t.Helper()
	for i := range 10_000 {
		if id := grain.NewID("t", fmt.Sprint(prefix, i)); d.Owner(id) == silo {
			return id
		}
	}
	t.Fatalf("no grain ID owned by %s", silo)
	return grain.ID{}
}

func TestLookupStats(t *testing.T) {
	dirs := map[string]*directory.Directory{}
	// A synchronous network: each request is handled at once.
	send := func(from string) directory.Sender {
		return senderFunc(func(to string, req *directory.Request, done func(*directory.Response, error)) {
			dirs[to].Handle(from, req, done)
		})
	}
	for _, s := range []string{"a", "b"} {
		d, err := directory.New(testConfig(), s, send(s))
		if err != nil {
			t.Fatal(err)
		}
		dirs[s] = d
	}
	for _, d := range dirs {
		d.SetMembers([]string{"a", "b"}, nil)
	}
	a := dirs["a"]
	remote, own := ownedBy(t, a, "b", ""), ownedBy(t, a, "a", "")
	dirs["b"].Register(remote, ent("b", 1), func(directory.Entry, error) {})

	lookup := func(id grain.ID) {
		t.Helper()
		a.Lookup(id, func(_ directory.Entry, _ bool, err error) {
			if err != nil {
				t.Fatalf("Lookup(%v): %v", id, err)
			}
		})
	}
	want := func(step string, lookups, hits, remotes uint64) {
		t.Helper()
		st := a.Stats()
		if st.Lookups != lookups || st.LookupCacheHits != hits || st.RemoteLookups != remotes {
			t.Fatalf("after %s: lookups %d, cache hits %d, remote %d; want %d, %d, %d",
				step, st.Lookups, st.LookupCacheHits, st.RemoteLookups, lookups, hits, remotes)
		}
	}

	want("nothing", 0, 0, 0)
	if _, ok := a.CachedLookup(remote); ok {
		t.Fatal("CachedLookup of an uncached grain found it")
	}
	want("a CachedLookup that missed", 0, 0, 0)
	lookup(remote)
	want("a Lookup sent to the owner", 1, 0, 1)
	if _, ok := a.CachedLookup(remote); !ok {
		t.Fatal("CachedLookup missed a grain just looked up")
	}
	want("a CachedLookup from the cache", 2, 1, 1)
	lookup(remote)
	want("a Lookup from the cache", 3, 2, 1)
	if _, ok := a.CachedLookup(own); ok {
		t.Fatal("CachedLookup found an unregistered grain")
	}
	lookup(own)
	want("a Lookup in the own partition", 4, 2, 1)
	a.Register(own, ent("b", 2), func(directory.Entry, error) {})
	if _, ok := a.CachedLookup(own); !ok {
		t.Fatal("CachedLookup missed a grain registered here")
	}
	want("a CachedLookup in the own partition", 5, 2, 1)

	// An entry naming this silo is one its caller confirms with Lookup
	// (its catalog missed the activation): the two count once.
	mine := ownedBy(t, a, "a", "mine")
	a.Register(mine, ent("a", 3), func(directory.Entry, error) {})
	if e, ok := a.CachedLookup(mine); !ok || e.Silo != "a" {
		t.Fatalf("CachedLookup(%v) = %v, %v", mine, e, ok)
	}
	lookup(mine)
	want("a CachedLookup naming this silo, then its Lookup", 6, 2, 1)

	// LookupOwner asks the owner past the cache, and counts nothing.
	var got directory.Entry
	a.LookupOwner(remote, func(e directory.Entry, found bool, err error) {
		if err != nil || !found {
			t.Fatalf("LookupOwner(%v) = %v, %v", remote, found, err)
		}
		got = e
	})
	if got != ent("b", 1) {
		t.Errorf("LookupOwner(%v) = %v, want b's activation 1", remote, got)
	}
	want("a LookupOwner", 6, 2, 1)
}
