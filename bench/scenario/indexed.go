package scenario

import (
	"sync"
	"sync/atomic"
)

// Indexed hands out a value per index, made once by a function of the
// index: the references or identities that caller i uses, built before
// the harness times the calls. Reads take no lock; an index past those
// made so far makes more under a lock.
type Indexed[T any] struct {
	make  func(i int) T
	mu    sync.Mutex
	built []T
	ready atomic.Pointer[[]T]
}

// NewIndexed returns an Indexed whose first n values are made already.
func NewIndexed[T any](n int, make func(i int) T) *Indexed[T] {
	x := &Indexed[T]{make: make}
	x.grow(n)
	return x
}

// Get returns the value of index i, making it if need be.
func (x *Indexed[T]) Get(i int) T {
	if all := *x.ready.Load(); i < len(all) {
		return all[i]
	}
	x.grow(2 * (i + 1))
	return (*x.ready.Load())[i]
}

func (x *Indexed[T]) grow(n int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for len(x.built) < n {
		x.built = append(x.built, x.make(len(x.built)))
	}
	all := x.built[:len(x.built):len(x.built)]
	x.ready.Store(&all)
}
