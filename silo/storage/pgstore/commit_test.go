package pgstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
)

// Writes that queue behind busy connections go in batches: with many more
// writers than connections, every write lands, each checked against its
// own ETag, and a write the database would refuse fails alone instead of
// failing its batch.
func TestGroupCommit(t *testing.T) {
	s := openStore(t, Config{MaxConns: 2})
	ctx := testCtx(t)
	const writers, rounds = 32, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds+writers)
	for w := range writers {
		wg.Go(func() {
			id := grain.NewID("commit.G", fmt.Sprint(w))
			etag := ""
			for r := range rounds {
				e, err := s.WriteState(ctx, id, "s", []byte{byte(r)}, etag)
				if err != nil {
					errs <- fmt.Errorf("writer %d round %d: %w", w, r, err)
					return
				}
				etag = e
			}
			// A stale write in the crowd is refused, and only it.
			if _, err := s.WriteState(ctx, id, "s", []byte("stale"), "1"); !errors.Is(err, storage.ErrETagMismatch) {
				errs <- fmt.Errorf("writer %d stale write: %v, want a mismatch", w, err)
			}
			if w%8 == 0 {
				if _, err := s.WriteState(ctx, id, "bad\x00name", []byte("x"), ""); err == nil || !strings.Contains(err.Error(), "NUL") {
					errs <- fmt.Errorf("writer %d: a name with a NUL byte: %v, want it refused", w, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for w := range writers {
		r, err := s.ReadState(ctx, grain.NewID("commit.G", fmt.Sprint(w)), "s")
		if err != nil || !r.Exists || r.Data[0] != rounds-1 || r.ETag != storage.FormatVersion(rounds) {
			t.Fatalf("writer %d's record: %+v, %v; want its last write at version %d", w, r, err, rounds)
		}
	}
}
