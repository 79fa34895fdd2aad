// Package hashmix holds the hash functions grain IDs, the directory ring
// and hash placement share: FNV-1a over bytes (grain.ID.Hash is FNV-1a of
// "type/key") and the SplitMix64 finaliser that spreads its output.
package hashmix

// FNV offset basis and prime, 64 bits.
const (
	offset64 = 14695981039346656037
	prime64  = 1099511628211
)

// FNV1a returns the 64-bit FNV-1a hash of s.
func FNV1a(s string) uint64 { return AddString(offset64, s) }

// AddString continues an FNV-1a hash h with the bytes of s.
func AddString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime64
	}
	return h
}

// AddByte continues an FNV-1a hash h with b.
func AddByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * prime64 }

// Mix64 is the SplitMix64 finaliser: a bijection on uint64 in which every
// input bit flips each output bit with probability about 1/2. FNV-1a
// alone leaves keys that differ in their last characters close together.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
