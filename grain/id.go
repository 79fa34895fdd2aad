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
// option. Keys are always carried as strings, in ID.Key; the kind fixes
// their form, and each form is canonical, so one grain never answers to
// two spellings of its key.
//
// A compound key, as in Orleans, is a primary key (an int64 or a UUID) and
// a key extension (a string), written "<primary>+<extension>": the
// primary's form never contains '+', so the first '+' ends it, and the
// extension is everything after it. The '+' is always written. The
// extension may be any string, including the empty one ("42+" is the key
// 42 with an empty extension, and "42" is not a compound key), so every
// pair of a primary key and an extension has exactly one key. Orleans
// refuses null, empty and whitespace extensions when it makes a reference;
// Granary takes any, since a reference constructor cannot fail.
type KeyKind int

const (
	// KeyString: any non-empty string.
	KeyString KeyKind = iota
	// KeyInt64: a signed decimal integer, as IntKey formats it.
	KeyInt64
	// KeyUUID: a UUID in its canonical lower-case 8-4-4-4-12 hex form, as
	// UUIDKey formats it.
	KeyUUID
	// KeyInt64Compound: "<int64>+<extension>", as Int64CompoundKey formats
	// it; the int64 is written as IntKey writes it.
	KeyInt64Compound
	// KeyUUIDCompound: "<uuid>+<extension>", as UUIDCompoundKey formats
	// it; the UUID is written as UUIDKey writes it.
	KeyUUIDCompound
)

// keyKindNames are the names String gives the key kinds, by value.
var keyKindNames = [...]string{"string", "int64", "uuid", "int64_compound", "uuid_compound"}

func (k KeyKind) String() string {
	if k >= 0 && int(k) < len(keyKindNames) {
		return keyKindNames[k]
	}
	return "KeyKind(" + strconv.Itoa(int(k)) + ")"
}

// keyForms are the forms Form gives the key kinds, by value.
var keyForms = [...]string{
	KeyString:        "<non-empty string>",
	KeyInt64:         "<decimal int64>",
	KeyUUID:          "<canonical UUID>",
	KeyInt64Compound: "<decimal int64>+<extension>",
	KeyUUIDCompound:  "<canonical UUID>+<extension>",
}

// Form describes the form of k's keys, such as
// "<decimal int64>+<extension>" for KeyInt64Compound, for messages that
// say what key was expected. The errors of CheckKey, the generator's
// problems and a silo's gRPC service all spell forms this way. An unknown
// kind has the form "<unknown key kind N>".
func (k KeyKind) Form() string {
	if k >= 0 && int(k) < len(keyForms) {
		return keyForms[k]
	}
	return "<unknown key kind " + strconv.Itoa(int(k)) + ">"
}

// ErrBadKey is wrapped by the errors CheckKey, ParseUUIDKey and the typed
// accessors of ID return for a key not of the form asked for.
var ErrBadKey = errors.New("grain: bad key")

// compoundSep separates the primary key of a compound key from its
// extension.
const compoundSep = "+"

// CheckKey reports whether key has the form of kind. Its errors wrap
// ErrBadKey and name the form expected.
func (k KeyKind) CheckKey(key string) error {
	var err error
	switch k {
	case KeyString:
		if key == "" {
			err = fmt.Errorf("%w: empty", ErrBadKey)
		}
	case KeyInt64:
		_, err = parseInt64Key(key)
	case KeyUUID:
		_, err = ParseUUIDKey(key)
	case KeyInt64Compound:
		_, _, err = parseInt64Compound(key)
	case KeyUUIDCompound:
		_, _, err = parseUUIDCompound(key)
	default:
		err = fmt.Errorf("%w: unknown key kind %d", ErrBadKey, int(k))
	}
	return err
}

// parseInt64Key reads a key that IntKey formatted.
func parseInt64Key(key string) (int64, error) {
	n, ok := parseInt64(key)
	if !ok {
		return 0, fmt.Errorf("%w: %q is not a decimal int64", ErrBadKey, key)
	}
	return n, nil
}

// parseInt64 reads s as IntKey writes an int64: decimal, with no '+', no
// leading zeros and no "-0". It does not allocate: every call checks its
// key.
func parseInt64(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	var b [20]byte
	if string(strconv.AppendInt(b[:0], n, 10)) != s {
		return 0, false
	}
	return n, true
}

// splitCompound splits a compound key of kind at its first '+'.
func splitCompound(key string, kind KeyKind) (primary, ext string, err error) {
	primary, ext, ok := strings.Cut(key, compoundSep)
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not of the form %s: it has no '+'", ErrBadKey, key, kind.Form())
	}
	return primary, ext, nil
}

// parseInt64Compound reads a key that Int64CompoundKey formatted.
func parseInt64Compound(key string) (int64, string, error) {
	primary, ext, err := splitCompound(key, KeyInt64Compound)
	if err != nil {
		return 0, "", err
	}
	n, ok := parseInt64(primary)
	if !ok {
		return 0, "", fmt.Errorf("%w: %q is not of the form %s: %q is not a decimal int64", ErrBadKey, key, KeyInt64Compound.Form(), primary)
	}
	return n, ext, nil
}

// parseUUIDCompound reads a key that UUIDCompoundKey formatted.
func parseUUIDCompound(key string) ([16]byte, string, error) {
	primary, ext, err := splitCompound(key, KeyUUIDCompound)
	if err != nil {
		return [16]byte{}, "", err
	}
	u, ok := parseUUID(primary)
	if !ok {
		return [16]byte{}, "", fmt.Errorf("%w: %q is not of the form %s: %q is not a canonical UUID", ErrBadKey, key, KeyUUIDCompound.Form(), primary)
	}
	return u, ext, nil
}

// IntKey formats an int64 key.
func IntKey(n int64) string { return strconv.FormatInt(n, 10) }

// Int64CompoundKey formats the compound key of the int64 primary key n and
// the extension ext: "<n>+<ext>". ext may be any string, empty included.
func Int64CompoundKey(n int64, ext string) string { return IntKey(n) + compoundSep + ext }

// UUIDCompoundKey formats the compound key of the UUID primary key u and
// the extension ext: "<uuid>+<ext>". ext may be any string, empty
// included.
func UUIDCompoundKey(u [16]byte, ext string) string { return UUIDKey(u) + compoundSep + ext }

// Int64ID returns the ID of the grain of type typ with the int64 key n,
// for a type with KeyInt64 keys.
func Int64ID(typ string, n int64) ID { return ID{Type: typ, Key: IntKey(n)} }

// UUIDID returns the ID of the grain of type typ with the UUID key u, for
// a type with KeyUUID keys.
func UUIDID(typ string, u [16]byte) ID { return ID{Type: typ, Key: UUIDKey(u)} }

// Int64CompoundID returns the ID of the grain of type typ with the
// compound key of the int64 primary key n and the extension ext, for a
// type with KeyInt64Compound keys.
func Int64CompoundID(typ string, n int64, ext string) ID {
	return ID{Type: typ, Key: Int64CompoundKey(n, ext)}
}

// UUIDCompoundID returns the ID of the grain of type typ with the compound
// key of the UUID primary key u and the extension ext, for a type with
// KeyUUIDCompound keys.
func UUIDCompoundID(typ string, u [16]byte, ext string) ID {
	return ID{Type: typ, Key: UUIDCompoundKey(u, ext)}
}

// Int64 returns the key of id as an int64. It fails, with an error that
// wraps ErrBadKey, unless the key has the KeyInt64 form.
//
// Inside a grain of a KeyInt64 type the error is always nil: the runtime
// refuses a call whose key is not of its type's form before it activates
// a grain. So a grain reads its own key as
//
//	key, _ := ctx.ID().Int64() // nil error: the type's keys are int64s
//
// The same holds for UUID, Int64Compound and UUIDCompound in grains of
// their key kinds.
func (id ID) Int64() (int64, error) { return parseInt64Key(id.Key) }

// UUID returns the key of id as a UUID. It fails, with an error that wraps
// ErrBadKey, unless the key has the KeyUUID form; in a grain of a KeyUUID
// type the error is always nil.
func (id ID) UUID() ([16]byte, error) { return ParseUUIDKey(id.Key) }

// Int64Compound returns the int64 primary key and the extension of id's
// key. It fails, with an error that wraps ErrBadKey, unless the key has
// the KeyInt64Compound form; in a grain of a KeyInt64Compound type the
// error is always nil.
func (id ID) Int64Compound() (int64, string, error) { return parseInt64Compound(id.Key) }

// UUIDCompound returns the UUID primary key and the extension of id's key.
// It fails, with an error that wraps ErrBadKey, unless the key has the
// KeyUUIDCompound form; in a grain of a KeyUUIDCompound type the error is
// always nil.
func (id ID) UUIDCompound() ([16]byte, string, error) { return parseUUIDCompound(id.Key) }

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
	u, ok := parseUUID(key)
	if !ok {
		return [16]byte{}, fmt.Errorf("%w: %q is not a canonical UUID", ErrBadKey, key)
	}
	return u, nil
}

// parseUUID is ParseUUIDKey without the error.
func parseUUID(key string) ([16]byte, bool) {
	var u [16]byte
	if len(key) != 36 {
		return u, false
	}
	i := 0
	for j := range u {
		if j == 4 || j == 6 || j == 8 || j == 10 {
			if key[i] != '-' {
				return [16]byte{}, false
			}
			i++
		}
		hi, ok1 := unhex(key[i])
		lo, ok2 := unhex(key[i+1])
		if !ok1 || !ok2 {
			return [16]byte{}, false
		}
		u[j] = hi<<4 | lo
		i += 2
	}
	return u, true
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
