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
