package scenario

import (
	"context"
	"errors"
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

// Parallel calls fn for every index from 0 to n-1, from workers
// goroutines, and returns when all are done: the setup of many grains at
// once (the timers of Timers, say). A failing call stops its goroutine;
// the others go on until ctx ends or the indexes run out. It returns the
// errors joined.
func Parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := ctx.Err(); err != nil {
					errs[w] = err
					return
				}
				if err := fn(int(i)); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
