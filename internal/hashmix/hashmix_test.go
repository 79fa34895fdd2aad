package hashmix

import (
	"hash/fnv"
	"testing"
)

func TestFNV1aMatchesTheStandardLibrary(t *testing.T) {
	for _, s := range []string{"", "a", "silo-1#7", "bank.Account/alice"} {
		h := fnv.New64a()
		h.Write([]byte(s))
		if got, want := FNV1a(s), h.Sum64(); got != want {
			t.Errorf("FNV1a(%q) = %#x, want %#x", s, got, want)
		}
		if got, want := AddByte(FNV1a(s), '#'), FNV1a(s+"#"); got != want {
			t.Errorf("AddByte after %q = %#x, want %#x", s, got, want)
		}
	}
}

func TestMix64IsABijectionOnASample(t *testing.T) {
	seen := map[uint64]uint64{}
	for x := uint64(0); x < 1<<16; x++ {
		y := Mix64(x)
		if prev, dup := seen[y]; dup {
			t.Fatalf("Mix64(%d) = Mix64(%d)", x, prev)
		}
		seen[y] = x
	}
	if Mix64(0) != 0 || Mix64(1) == 1 {
		t.Fatalf("Mix64(0) = %#x, Mix64(1) = %#x", Mix64(0), Mix64(1))
	}
}
