package grain

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/granaryio/granary/internal/hashmix"
)

// ID identifies a grain: its type (the full name of its proto service, such
// as "bank.Account") and its key within the type. A grain always exists
// logically; its ID is the same on every silo and across restarts. IDs are
// comparable and can be map keys. The zero ID identifies no grain.
type ID struct {
	Type string
	Key  string
}

// NewID returns the ID of the grain of type typ with key.
func NewID(typ, key string) ID { return ID{Type: typ, Key: key} }

// String returns "type/key", the form ParseID reads.
func (id ID) String() string { return id.Type + "/" + id.Key }

// IsZero reports whether id is the zero ID.
func (id ID) IsZero() bool { return id.Type == "" && id.Key == "" }

// ParseID reads the "type/key" form of an ID. The type is everything before
// the first '/', so a key may itself contain '/'. Both parts must be
// non-empty.
func ParseID(s string) (ID, error) {
	typ, key, ok := strings.Cut(s, "/")
	switch {
	case !ok:
		return ID{}, fmt.Errorf("grain: ID %q has no '/' between type and key", s)
	case typ == "":
		return ID{}, fmt.Errorf("grain: ID %q has an empty type", s)
	case key == "":
		return ID{}, fmt.Errorf("grain: ID %q has an empty key", s)
	}
	return ID{Type: typ, Key: key}, nil
}

// Hash returns a 64-bit FNV-1a hash of the ID, the same in every process
// and on every platform: the directory places grains on its ring by it.
func (id ID) Hash() uint64 {
	return hashmix.AddString(hashmix.AddByte(hashmix.FNV1a(id.Type), '/'), id.Key)
}

// KeyKind is the kind of key a grain type uses, from the key_kind grain
// option. Keys are always carried as strings; the kind fixes their form.
type KeyKind int

const (
	// KeyString: any non-empty string.
	KeyString KeyKind = iota
	// KeyInt64: a signed decimal integer, as IntKey formats it.
	KeyInt64
	// KeyUUID: a UUID in its canonical lower-case 8-4-4-4-12 hex form, as
	// UUIDKey formats it.
	KeyUUID
)

func (k KeyKind) String() string {
	switch k {
	case KeyString:
		return "string"
	case KeyInt64:
		return "int64"
	case KeyUUID:
		return "uuid"
	}
	return "KeyKind(" + strconv.Itoa(int(k)) + ")"
}

// ErrBadKey is wrapped by the errors CheckKey returns.
var ErrBadKey = errors.New("grain: bad key")

// CheckKey reports whether key has the form of kind.
func (k KeyKind) CheckKey(key string) error {
	switch k {
	case KeyString:
		if key == "" {
			return fmt.Errorf("%w: empty", ErrBadKey)
		}
	case KeyInt64:
		if _, err := strconv.ParseInt(key, 10, 64); err != nil || IntKey(mustInt(key)) != key {
			return fmt.Errorf("%w: %q is not a decimal int64", ErrBadKey, key)
		}
	case KeyUUID:
		if _, err := ParseUUIDKey(key); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: unknown key kind %d", ErrBadKey, int(k))
	}
	return nil
}

func mustInt(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }

// IntKey formats an int64 key.
func IntKey(n int64) string { return strconv.FormatInt(n, 10) }

// UUIDKey formats a UUID key in canonical form.
func UUIDKey(u [16]byte) string {
	const hex = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hex[c>>4], hex[c&15]
		j += 2
	}
	return string(b[:])
}

// ParseUUIDKey reads a key that UUIDKey formatted: 32 lower-case hex
// digits with dashes at offsets 8, 13, 18 and 23, and nowhere else.
func ParseUUIDKey(key string) ([16]byte, error) {
	var u [16]byte
	bad := func() ([16]byte, error) {
		return [16]byte{}, fmt.Errorf("%w: %q is not a canonical UUID", ErrBadKey, key)
	}
	if len(key) != 36 {
		return bad()
	}
	i := 0
	for j := range u {
		if j == 4 || j == 6 || j == 8 || j == 10 {
			if key[i] != '-' {
				return bad()
			}
			i++
		}
		hi, ok1 := unhex(key[i])
		lo, ok2 := unhex(key[i+1])
		if !ok1 || !ok2 {
			return bad()
		}
		u[j] = hi<<4 | lo
		i += 2
	}
	return u, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
