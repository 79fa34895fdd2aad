package pgstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/granaryio/granary/silo/storage/storagetest"
)

// BenchmarkStateWrite: grains' writes, each with the last ETag, of their own 100-byte
// states through the store, one writer and 64 sharing the store's pool
// (pgxpool's default size).
func BenchmarkStateWrite(b *testing.B) {
	storagetest.BenchmarkStateWrite(b, openStore(b, Config{}))
}

// BenchmarkStateWriteRaw is the baseline: the same writes as a bare
// UPDATE of the row, through the same pool, without the version check.
func BenchmarkStateWriteRaw(b *testing.B) {
	s := openStore(b, Config{})
	ctx := context.Background()
	storagetest.BenchmarkWrites(b, func(b *testing.B, w int) func([]byte) error {
		id := fmt.Sprintf("raw/%d", w)
		if _, err := s.pool.Exec(ctx, `INSERT INTO granary_state (service_id, grain_id, state_name, version, data) VALUES ($1, $2, 's', 1, '') ON CONFLICT DO NOTHING`, s.service, id); err != nil {
			b.Fatal(err)
		}
		return func(data []byte) error {
			_, err := s.pool.Exec(ctx, `UPDATE granary_state SET data = $3, version = version + 1 WHERE service_id = $1 AND grain_id = $2 AND state_name = 's'`, s.service, id, data)
			return err
		}
	})
}
