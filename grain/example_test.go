package grain_test

import (
	"context"
	"fmt"

	"github.com/granaryio/granary/grain"
)

// An ID's string form is "type/key"; the type ends at the first '/', so a
// key may contain '/'.
func ExampleParseID() {
	id, err := grain.ParseID("fs.File/home/alice/notes.txt")
	if err != nil {
		panic(err)
	}
	fmt.Printf("type %q key %q\n", id.Type, id.Key)

	_, err = grain.ParseID("fs.File")
	fmt.Println(err)
	// Output:
	// type "fs.File" key "home/alice/notes.txt"
	// grain: ID "fs.File" has no '/' between type and key
}

func ExampleID_String() {
	id := grain.NewID("counter.Counter", grain.IntKey(-3))
	fmt.Println(id)

	back, _ := grain.ParseID(id.String())
	fmt.Println(back == id)
	// Output:
	// counter.Counter/-3
	// true
}

// A compound key is a primary key and an extension, written
// "<primary>+<extension>". A grain reads both back from its ID.
func ExampleID_Int64Compound() {
	id := grain.NewID("shop.Cart", grain.Int64CompoundKey(42, "eu-west"))
	fmt.Println(id)

	n, ext, err := id.Int64Compound()
	fmt.Println(n, ext, err)

	// The extension may be empty, but the '+' is always written.
	fmt.Println(grain.Int64CompoundKey(7, ""))
	_, _, err = grain.NewID("shop.Cart", "7").Int64Compound()
	fmt.Println(err)
	// Output:
	// shop.Cart/42+eu-west
	// 42 eu-west <nil>
	// 7+
	// grain: bad key: "7" is not of the form <decimal int64>+<extension>: it has no '+'
}

// Typed constructors and accessors spare a grain the key's string form.
func ExampleID_UUID() {
	u := [16]byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}
	id := grain.UUIDID("device.Sensor", u)
	fmt.Println(id)

	back, err := id.UUID()
	fmt.Println(back == u, err)
	// Output:
	// device.Sensor/123e4567-e89b-12d3-a456-426614174000
	// true <nil>
}

// An outgoing filter adds headers with WithHeader; the callee reads them
// with Header. A later value for the same key wins.
func ExampleWithHeader() {
	ctx := grain.WithHeader(context.Background(), "trace-id", "t-1")
	ctx = grain.WithHeader(ctx, "auth", "token")
	ctx = grain.WithHeader(ctx, "trace-id", "t-2")

	fmt.Printf("trace-id=%s auth=%s tenant=%q\n",
		grain.Header(ctx, "trace-id"), grain.Header(ctx, "auth"), grain.Header(ctx, "tenant"))
	// Output: trace-id=t-2 auth=token tenant=""
}
