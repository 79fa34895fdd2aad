package grain_test

import (
	"context"
	"testing"

	"github.com/granaryio/granary/grain"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fakeStore is a StateStore over one record, with version ETags.
type fakeStore struct {
	data    []byte
	version int
	exists  bool
	fail    error
}

func (f *fakeStore) etag() string {
	if f.version == 0 {
		return ""
	}
	return string(rune('0' + f.version))
}

func (f *fakeStore) Read(context.Context) ([]byte, string, bool, error) {
	return f.data, f.etag(), f.exists, f.fail
}

func (f *fakeStore) Write(_ context.Context, data []byte, etag string) (string, error) {
	if f.fail != nil {
		return "", f.fail
	}
	if etag != f.etag() {
		return "", status.Error(codes.FailedPrecondition, "stale")
	}
	f.data, f.exists = data, true
	f.version++
	return f.etag(), nil
}

func (f *fakeStore) Clear(_ context.Context, etag string) (string, error) {
	if etag != f.etag() {
		return "", status.Error(codes.FailedPrecondition, "stale")
	}
	f.data, f.exists = nil, false
	f.version++
	return f.etag(), nil
}

func TestStateReadWriteClear(t *testing.T) {
	ctx := context.Background()
	spec := grain.NewStateSpec[*wrapperspb.StringValue]("name", "")
	if spec.ProviderName() != grain.DefaultStorage || spec.StateName() != "name" {
		t.Fatalf("spec names %q in %q", spec.StateName(), spec.ProviderName())
	}
	store := &fakeStore{}
	st := spec.Bind(store).(*grain.State[*wrapperspb.StringValue])
	if err := st.Read(ctx); err != nil {
		t.Fatal(err)
	}
	if st.Value() == nil || st.Value().Value != "" || st.Exists() || st.ETag() != "" {
		t.Fatalf("fresh state: %v exists=%v etag=%q", st.Value(), st.Exists(), st.ETag())
	}
	st.Value().Value = "one"
	if err := st.Write(ctx); err != nil {
		t.Fatal(err)
	}
	if !st.Exists() || st.ETag() != "1" {
		t.Fatalf("after Write: exists=%v etag=%q", st.Exists(), st.ETag())
	}
	// Another writer moves the record on: this one's next write is refused
	// and keeps its value; a Read brings the stored one.
	store.version = 5
	st.Set(wrapperspb.String("two"))
	if err := st.Write(ctx); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale write: %v, want FailedPrecondition", err)
	}
	if st.Value().Value != "two" || st.ETag() != "1" {
		t.Fatalf("after a refused write: %q at %q", st.Value().Value, st.ETag())
	}
	if err := st.Read(ctx); err != nil || st.Value().Value != "one" || st.ETag() != "5" {
		t.Fatalf("Read: %q at %q, %v", st.Value().Value, st.ETag(), err)
	}
	if err := st.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if st.Exists() || st.Value().Value != "" || st.ETag() != "6" {
		t.Fatalf("after Clear: %v exists=%v etag=%q", st.Value(), st.Exists(), st.ETag())
	}
}

func TestStateReadCorrupt(t *testing.T) {
	spec := grain.NewStateSpec[*wrapperspb.StringValue]("name", "p")
	st := spec.Bind(&fakeStore{data: []byte{0xff, 0xff}, version: 1, exists: true})
	if err := st.Read(context.Background()); status.Code(err) != codes.DataLoss {
		t.Fatalf("reading bytes that do not decode: %v, want DataLoss", err)
	}
}

func TestStateOfOutsideGrain(t *testing.T) {
	spec := grain.NewStateSpec[*wrapperspb.StringValue]("name", "")
	defer func() {
		if recover() == nil {
			t.Fatal("Of with a plain context did not panic")
		}
	}()
	spec.Of(context.Background())
}
