package grain_test

import (
	"errors"
	"hash/fnv"
	"math"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/granaryio/granary/grain"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIDStringParseRoundTrip(t *testing.T) {
	tests := []struct {
		id grain.ID
		s  string
	}{
		{grain.NewID("bank.Account", "alice"), "bank.Account/alice"},
		{grain.NewID("fs.File", "/usr/lib/x"), "fs.File//usr/lib/x"},
		{grain.NewID("fs.File", "a/b/c"), "fs.File/a/b/c"},
		{grain.NewID("fs.File", "a/"), "fs.File/a/"},
		{grain.NewID("t", "k"), "t/k"},
		{grain.NewID("chat.Room", "héllo wörld"), "chat.Room/héllo wörld"},
		{grain.NewID("counter.Counter", grain.IntKey(-3)), "counter.Counter/-3"},
	}
	for _, tt := range tests {
		if got := tt.id.String(); got != tt.s {
			t.Errorf("%#v.String() = %q, want %q", tt.id, got, tt.s)
		}
		got, err := grain.ParseID(tt.s)
		if err != nil {
			t.Errorf("ParseID(%q): %v", tt.s, err)
			continue
		}
		if got != tt.id {
			t.Errorf("ParseID(%q) = %#v, want %#v", tt.s, got, tt.id)
		}
		if got.IsZero() {
			t.Errorf("ParseID(%q).IsZero() = true", tt.s)
		}
	}
}

func TestParseIDErrors(t *testing.T) {
	tests := []struct {
		s    string
		want string // in the error text
	}{
		{"", "no '/'"},
		{"bank.Account", "no '/'"},
		{"/alice", "empty type"},
		{"/", "empty type"},
		{"//", "empty type"},
		{"bank.Account/", "empty key"},
	}
	for _, tt := range tests {
		id, err := grain.ParseID(tt.s)
		if err == nil {
			t.Errorf("ParseID(%q) = %#v, want an error", tt.s, id)
			continue
		}
		if !id.IsZero() {
			t.Errorf("ParseID(%q) returned %#v with its error, want the zero ID", tt.s, id)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "grain: ") || !strings.Contains(msg, tt.want) {
			t.Errorf("ParseID(%q) error %q, want one beginning with \"grain: \" that says %q", tt.s, msg, tt.want)
		}
	}
}

func TestIDIsZero(t *testing.T) {
	if !(grain.ID{}).IsZero() {
		t.Error("ID{}.IsZero() = false")
	}
	for _, id := range []grain.ID{{Type: "t"}, {Key: "k"}, grain.NewID("t", "k")} {
		if id.IsZero() {
			t.Errorf("%#v.IsZero() = true", id)
		}
	}
}

func TestIDHash(t *testing.T) {
	// Pinned: the directory's ring depends on these never changing.
	pinned := []struct {
		id   grain.ID
		hash uint64
	}{
		{grain.NewID("bank.Account", "alice"), 0x33302759827d7ff5},
		{grain.NewID("fs.File", "/usr/lib/x"), 0x9c293378e520ded5},
	}
	for _, p := range pinned {
		if got := p.id.Hash(); got != p.hash {
			t.Errorf("%v.Hash() = %#x, want %#x", p.id, got, p.hash)
		}
	}

	// The hash is FNV-1a of the "type/key" form.
	ids := []grain.ID{
		{}, grain.NewID("bank.Account", "alice"), grain.NewID("bank.Account", "bob"),
		grain.NewID("bank.Accoun", "talice"), grain.NewID("fs.File", "a/b/c"),
	}
	seen := map[uint64]grain.ID{}
	for _, id := range ids {
		h := fnv.New64a()
		h.Write([]byte(id.String()))
		if got, want := id.Hash(), h.Sum64(); got != want {
			t.Errorf("%v.Hash() = %#x, FNV-1a of %q is %#x", id, got, id.String(), want)
		}
		if other, ok := seen[id.Hash()]; ok {
			t.Errorf("%v and %v hash alike", id, other)
		}
		seen[id.Hash()] = id
	}

	// Equal IDs, built apart, hash alike.
	a := grain.NewID("bank.Account", "alice")
	b, err := grain.ParseID(strings.Join([]string{"bank.Account", "alice"}, "/"))
	if err != nil {
		t.Fatal(err)
	}
	if a != b || a.Hash() != b.Hash() {
		t.Errorf("equal IDs %v, %v: hashes %#x, %#x", a, b, a.Hash(), b.Hash())
	}
}

func TestKeyKindStringAndForm(t *testing.T) {
	tests := []struct {
		k          grain.KeyKind
		want, form string
	}{
		{grain.KeyString, "string", "<non-empty string>"},
		{grain.KeyInt64, "int64", "<decimal int64>"},
		{grain.KeyUUID, "uuid", "<canonical UUID>"},
		{grain.KeyInt64Compound, "int64_compound", "<decimal int64>+<extension>"},
		{grain.KeyUUIDCompound, "uuid_compound", "<canonical UUID>+<extension>"},
		{grain.KeyKind(7), "KeyKind(7)", "<unknown key kind 7>"},
		{grain.KeyKind(-1), "KeyKind(-1)", "<unknown key kind -1>"},
	}
	for _, tt := range tests {
		if got := tt.k.String(); got != tt.want {
			t.Errorf("KeyKind(%d).String() = %q, want %q", int(tt.k), got, tt.want)
		}
		if got := tt.k.Form(); got != tt.form {
			t.Errorf("KeyKind(%d).Form() = %q, want %q", int(tt.k), got, tt.form)
		}
	}
}

func TestCheckKey(t *testing.T) {
	tests := []struct {
		kind grain.KeyKind
		key  string
		ok   bool
	}{
		{grain.KeyString, "alice", true},
		{grain.KeyString, "a/b", true},
		{grain.KeyString, " ", true},
		{grain.KeyString, "", false},

		{grain.KeyInt64, "12", true},
		{grain.KeyInt64, "-3", true},
		{grain.KeyInt64, "0", true},
		{grain.KeyInt64, grain.IntKey(math.MaxInt64), true},
		{grain.KeyInt64, grain.IntKey(math.MinInt64), true},
		{grain.KeyInt64, "012", false},
		{grain.KeyInt64, "+3", false},
		{grain.KeyInt64, "-0", false},
		{grain.KeyInt64, "1.5", false},
		{grain.KeyInt64, "", false},
		{grain.KeyInt64, " 1", false},
		{grain.KeyInt64, "0x10", false},
		{grain.KeyInt64, "1_000", false},
		{grain.KeyInt64, "99999999999999999999", false},
		{grain.KeyInt64, "9223372036854775808", false},
		{grain.KeyInt64, "alice", false},

		{grain.KeyUUID, "123e4567-e89b-12d3-a456-426614174000", true},
		{grain.KeyUUID, "00000000-0000-0000-0000-000000000000", true},
		{grain.KeyUUID, "ffffffff-ffff-ffff-ffff-ffffffffffff", true},
		{grain.KeyUUID, "123E4567-E89B-12D3-A456-426614174000", false},
		{grain.KeyUUID, "123e4567-e89b-12d3-a456-42661417400", false},   // short
		{grain.KeyUUID, "123e4567-e89b-12d3-a456-4266141740000", false}, // long
		{grain.KeyUUID, "123e4567e89b-12d3-a456-4266141740000", false},  // dash missing
		{grain.KeyUUID, "123e456-7e89b-12d3-a456-426614174000", false},  // dash moved
		{grain.KeyUUID, "123e4567-e89b-12d3-a456-42661417400g", false},
		{grain.KeyUUID, "{23e4567-e89b-12d3-a456-426614174000", false},
		{grain.KeyUUID, "123e4567e89b12d3a456426614174000", false},
		{grain.KeyUUID, "", false},

		{grain.KeyInt64Compound, "42+eu", true},
		{grain.KeyInt64Compound, "42+", true},
		{grain.KeyInt64Compound, "-7+a+b", true},
		{grain.KeyInt64Compound, "0+ ", true},
		{grain.KeyInt64Compound, "0+a/b", true},
		{grain.KeyInt64Compound, grain.IntKey(math.MinInt64) + "+x", true},
		{grain.KeyInt64Compound, "42", false},
		{grain.KeyInt64Compound, "", false},
		{grain.KeyInt64Compound, "+", false},
		{grain.KeyInt64Compound, "+42+x", false},
		{grain.KeyInt64Compound, "042+x", false},
		{grain.KeyInt64Compound, "x+42", false},
		{grain.KeyInt64Compound, "9223372036854775808+x", false},

		{grain.KeyUUIDCompound, "123e4567-e89b-12d3-a456-426614174000+eu", true},
		{grain.KeyUUIDCompound, "123e4567-e89b-12d3-a456-426614174000+", true},
		{grain.KeyUUIDCompound, "123e4567-e89b-12d3-a456-426614174000++", true},
		{grain.KeyUUIDCompound, "123e4567-e89b-12d3-a456-426614174000", false},
		{grain.KeyUUIDCompound, "123E4567-E89B-12D3-A456-426614174000+eu", false},
		{grain.KeyUUIDCompound, "42+eu", false},
		{grain.KeyUUIDCompound, "+eu", false},
		{grain.KeyUUIDCompound, "", false},

		{grain.KeyKind(7), "alice", false},
	}
	for _, tt := range tests {
		err := tt.kind.CheckKey(tt.key)
		switch {
		case tt.ok && err != nil:
			t.Errorf("%v.CheckKey(%q) = %v, want nil", tt.kind, tt.key, err)
		case !tt.ok && err == nil:
			t.Errorf("%v.CheckKey(%q) = nil, want an error", tt.kind, tt.key)
		case !tt.ok && !errors.Is(err, grain.ErrBadKey):
			t.Errorf("%v.CheckKey(%q) = %v, want one wrapping ErrBadKey", tt.kind, tt.key, err)
		}
	}
}

// TestCheckKeyUUIDRejectsDashesForDigits: a key with a pair of dashes in
// place of a pair of hex digits is refused. Dashes are allowed only at
// offsets 8, 13, 18 and 23; a parser that skipped dashes anywhere would
// read such a key as a UUID whose canonical form is another key, so that
// several keys named one grain.
func TestCheckKeyUUIDRejectsDashesForDigits(t *testing.T) {
	for _, key := range []string{
		"--aabbcc-dddd-eeee-ffff-001122334455",
		"aabbccdd---dd-eeee-ffff-001122334455",
		"aabbccdd-dddd-eeee-ffff-0011223344--",
	} {
		if u, err := grain.ParseUUIDKey(key); err == nil {
			t.Errorf("ParseUUIDKey(%q) = %s, nil; want an error", key, grain.UUIDKey(u))
		}
		if err := grain.KeyUUID.CheckKey(key); err == nil {
			t.Errorf("KeyUUID.CheckKey(%q) = nil, want an error", key)
		}
	}
}

func TestUUIDKeyRoundTrip(t *testing.T) {
	var seq [16]byte
	for i := range seq {
		seq[i] = byte(i)
	}
	var ones [16]byte
	for i := range ones {
		ones[i] = 0xff
	}
	tests := []struct {
		u   [16]byte
		key string
	}{
		{[16]byte{}, "00000000-0000-0000-0000-000000000000"},
		{seq, "00010203-0405-0607-0809-0a0b0c0d0e0f"},
		{ones, "ffffffff-ffff-ffff-ffff-ffffffffffff"},
		{[16]byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00},
			"123e4567-e89b-12d3-a456-426614174000"},
	}
	for _, tt := range tests {
		if got := grain.UUIDKey(tt.u); got != tt.key {
			t.Errorf("UUIDKey(%x) = %q, want %q", tt.u, got, tt.key)
		}
		u, err := grain.ParseUUIDKey(tt.key)
		if err != nil || u != tt.u {
			t.Errorf("ParseUUIDKey(%q) = %x, %v; want %x, nil", tt.key, u, err, tt.u)
		}
		if err := grain.KeyUUID.CheckKey(tt.key); err != nil {
			t.Errorf("KeyUUID.CheckKey(%q) = %v", tt.key, err)
		}
	}

	// Every byte value survives the round trip.
	for b := range 256 {
		var u [16]byte
		for i := range u {
			u[i] = byte(b + i)
		}
		got, err := grain.ParseUUIDKey(grain.UUIDKey(u))
		if err != nil || got != u {
			t.Fatalf("ParseUUIDKey(UUIDKey(%x)) = %x, %v", u, got, err)
		}
	}

	if _, err := grain.ParseUUIDKey("123E4567-E89B-12D3-A456-426614174000"); !errors.Is(err, grain.ErrBadKey) {
		t.Errorf("ParseUUIDKey of upper case = %v, want ErrBadKey", err)
	}
}

func TestIntKey(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0"},
		{12, "12"},
		{-3, "-3"},
		{math.MaxInt64, "9223372036854775807"},
		{math.MinInt64, "-9223372036854775808"},
	}
	for _, tt := range tests {
		got := grain.IntKey(tt.n)
		if got != tt.want {
			t.Errorf("IntKey(%d) = %q, want %q", tt.n, got, tt.want)
		}
		if err := grain.KeyInt64.CheckKey(got); err != nil {
			t.Errorf("KeyInt64.CheckKey(IntKey(%d)) = %v", tt.n, err)
		}
	}
}

// TestCompoundKeyMessagesNameTheForm: a key refused for a compound kind is
// refused with the form the kind expects, and with what is wrong with it.
func TestCompoundKeyMessagesNameTheForm(t *testing.T) {
	tests := []struct {
		kind grain.KeyKind
		key  string
		want string
	}{
		{grain.KeyInt64Compound, "42", `grain: bad key: "42" is not of the form <decimal int64>+<extension>: it has no '+'`},
		{grain.KeyInt64Compound, "042+x", `grain: bad key: "042+x" is not of the form <decimal int64>+<extension>: "042" is not a decimal int64`},
		{grain.KeyUUIDCompound, "x", `grain: bad key: "x" is not of the form <canonical UUID>+<extension>: it has no '+'`},
		{grain.KeyUUIDCompound, "42+x", `grain: bad key: "42+x" is not of the form <canonical UUID>+<extension>: "42" is not a canonical UUID`},
	}
	for _, tt := range tests {
		err := tt.kind.CheckKey(tt.key)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%v.CheckKey(%q) = %v, want %s", tt.kind, tt.key, err, tt.want)
		}
	}
}

// TestTypedIDsRoundTrip: an ID made by a typed constructor gives its key
// back through the matching accessor, and the key passes CheckKey of its
// kind.
func TestTypedIDsRoundTrip(t *testing.T) {
	u := [16]byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}
	for _, n := range []int64{0, 1, -1, math.MaxInt64, math.MinInt64} {
		id := grain.Int64ID("t.Int", n)
		if id != grain.NewID("t.Int", grain.IntKey(n)) {
			t.Errorf("Int64ID(%d) = %#v", n, id)
		}
		if got, err := id.Int64(); err != nil || got != n {
			t.Errorf("Int64ID(%d).Int64() = %d, %v", n, got, err)
		}
		for _, ext := range []string{"", "eu", "a+b", "+", " ", "héllo/wörld"} {
			key := grain.Int64CompoundKey(n, ext)
			if err := grain.KeyInt64Compound.CheckKey(key); err != nil {
				t.Errorf("KeyInt64Compound.CheckKey(Int64CompoundKey(%d, %q)) = %v", n, ext, err)
			}
			cid := grain.Int64CompoundID("t.IntC", n, ext)
			if cid != grain.NewID("t.IntC", key) {
				t.Errorf("Int64CompoundID(%d, %q) = %#v, want the key %q", n, ext, cid, key)
			}
			gn, gext, err := cid.Int64Compound()
			if err != nil || gn != n || gext != ext {
				t.Errorf("Int64Compound of %q = %d, %q, %v; want %d, %q, nil", key, gn, gext, err, n, ext)
			}
		}
	}

	id := grain.UUIDID("t.UUID", u)
	if id.Key != "123e4567-e89b-12d3-a456-426614174000" {
		t.Errorf("UUIDID key %q", id.Key)
	}
	if got, err := id.UUID(); err != nil || got != u {
		t.Errorf("UUIDID(%x).UUID() = %x, %v", u, got, err)
	}
	for _, ext := range []string{"", "eu", "a+b", "+"} {
		key := grain.UUIDCompoundKey(u, ext)
		if want := "123e4567-e89b-12d3-a456-426614174000+" + ext; key != want {
			t.Errorf("UUIDCompoundKey(%x, %q) = %q, want %q", u, ext, key, want)
		}
		if err := grain.KeyUUIDCompound.CheckKey(key); err != nil {
			t.Errorf("KeyUUIDCompound.CheckKey(%q) = %v", key, err)
		}
		cid := grain.UUIDCompoundID("t.UUIDC", u, ext)
		if cid != grain.NewID("t.UUIDC", key) {
			t.Errorf("UUIDCompoundID(%x, %q) = %#v, want the key %q", u, ext, cid, key)
		}
		gu, gext, err := cid.UUIDCompound()
		if err != nil || gu != u || gext != ext {
			t.Errorf("UUIDCompound of %q = %x, %q, %v; want %x, %q, nil", key, gu, gext, err, u, ext)
		}
	}
}

// TestTypedAccessorsRefuseOtherForms: each accessor refuses, with
// ErrBadKey, a key of another kind's form, so a grain cannot read its key
// in a form its type does not have.
func TestTypedAccessorsRefuseOtherForms(t *testing.T) {
	const uuid = "123e4567-e89b-12d3-a456-426614174000"
	accessors := []struct {
		name string
		get  func(grain.ID) error
		bad  []string
	}{
		{"Int64", func(id grain.ID) error { _, err := id.Int64(); return err },
			[]string{"", "alice", "042", "42+", "42+x", uuid}},
		{"UUID", func(id grain.ID) error { _, err := id.UUID(); return err },
			[]string{"", "alice", "42", uuid + "+", "123E4567-E89B-12D3-A456-426614174000"}},
		{"Int64Compound", func(id grain.ID) error { _, _, err := id.Int64Compound(); return err },
			[]string{"", "alice", "42", "+42", "042+x", uuid + "+x"}},
		{"UUIDCompound", func(id grain.ID) error { _, _, err := id.UUIDCompound(); return err },
			[]string{"", "alice", uuid, "42+x", "+" + uuid}},
	}
	for _, a := range accessors {
		for _, key := range a.bad {
			if err := a.get(grain.NewID("t", key)); !errors.Is(err, grain.ErrBadKey) {
				t.Errorf("ID{Key: %q}.%s() error = %v, want one wrapping ErrBadKey", key, a.name, err)
			}
		}
	}
}

// FuzzCompoundKeys: any string either parses as an int64 compound key that
// formats back to it exactly, or is refused by both the accessor and
// CheckKey; the same for UUID compound keys. Nothing panics.
func FuzzCompoundKeys(f *testing.F) {
	f.Add("42+x")
	f.Add("-0+")
	f.Add("123e4567-e89b-12d3-a456-426614174000+a+b")
	f.Fuzz(func(t *testing.T, key string) {
		id := grain.NewID("t", key)
		n, ext, err := id.Int64Compound()
		if (err == nil) != (grain.KeyInt64Compound.CheckKey(key) == nil) {
			t.Fatalf("Int64Compound and CheckKey disagree on %q", key)
		}
		if err == nil && grain.Int64CompoundKey(n, ext) != key {
			t.Fatalf("%q parsed to %d, %q, which formats as %q", key, n, ext, grain.Int64CompoundKey(n, ext))
		}
		u, ext, err := id.UUIDCompound()
		if (err == nil) != (grain.KeyUUIDCompound.CheckKey(key) == nil) {
			t.Fatalf("UUIDCompound and CheckKey disagree on %q", key)
		}
		if err == nil && grain.UUIDCompoundKey(u, ext) != key {
			t.Fatalf("%q parsed to %x, %q, which formats as %q", key, u, ext, grain.UUIDCompoundKey(u, ext))
		}
	})
}

// FuzzParseUUIDKey: any string either parses to a UUID that formats back
// to it exactly, or is refused; nothing panics.
func FuzzParseUUIDKey(f *testing.F) {
	f.Add("aabbccdd-dddd-eeee-ffff-001122334455")
	f.Add("aabbccdd-dddd-eeee-ffff-0011223344-5")
	f.Add("aabbccdd-dddd-eeee-ffff-00112233445-")
	f.Fuzz(func(t *testing.T, key string) {
		u, err := grain.ParseUUIDKey(key)
		if err == nil && grain.UUIDKey(u) != key {
			t.Fatalf("%q parsed to %x, which formats as %q", key, u, grain.UUIDKey(u))
		}
	})
}

// TestCheckKeyAllocatesNothing: every call checks its key, so a good key
// of any kind is checked without allocating.
func TestCheckKeyAllocatesNothing(t *testing.T) {
	keys := []struct {
		kind grain.KeyKind
		key  string
	}{
		{grain.KeyString, "alice"},
		{grain.KeyInt64, "-9223372036854775808"},
		{grain.KeyUUID, "123e4567-e89b-12d3-a456-426614174000"},
		{grain.KeyInt64Compound, "123456789+eu-west"},
		{grain.KeyUUIDCompound, "123e4567-e89b-12d3-a456-426614174000+eu-west"},
	}
	for _, k := range keys {
		if n := testing.AllocsPerRun(100, func() {
			if err := k.kind.CheckKey(k.key); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%v.CheckKey(%q) allocates %v times, want 0", k.kind, k.key, n)
		}
	}
}
