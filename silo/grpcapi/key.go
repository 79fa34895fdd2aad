package grpcapi

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/keyfield"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// findKeyField returns the field of the request message md marked with
// the key option, or nil when none is. It fails, naming the message and
// the field, when a marked field cannot carry keys of kind or more than
// one is marked: the rule the generator checks too.
func findKeyField(md protoreflect.MessageDescriptor, kind grain.KeyKind) (protoreflect.FieldDescriptor, error) {
	keys := fmt.Sprintf("the grain type's keys are %v keys", kind)
	if kind != grain.KeyInt64 { // int64 keys need an integer field, which the problem says
		keys += ", of the form " + kind.Form()
	}
	f, problems := keyfield.Check(md, kind == grain.KeyInt64, keys)
	if len(problems) > 0 {
		return nil, fmt.Errorf("request %s: %s", md.FullName(), strings.Join(problems, "; "))
	}
	return f, nil
}

// key returns the grain key of a call to m with req: from the key field
// when it is set, otherwise from the metadata. Errors are InvalidArgument
// statuses that say what was wrong and how to send the key. Any goroutine.
func (m *method) key(ctx context.Context, req proto.Message) (string, error) {
	var fromField string
	if m.keyField != nil {
		if r := req.ProtoReflect(); r.Has(m.keyField) {
			fromField = formatKey(m.keyField, r.Get(m.keyField))
		}
	}
	fromMD, err := m.metadataKey(ctx)
	if err != nil {
		return "", err
	}
	key := fromField
	switch {
	case fromField != "" && fromMD != "" && fromField != fromMD:
		return "", status.Errorf(codes.InvalidArgument, "granary: %s got two grain keys that differ: %q in the request field %s and %q in the request metadata %q; send one, or the same in both",
			m.name, fromField, m.keyField.Name(), fromMD, KeyHeader)
	case fromField == "":
		key = fromMD
	}
	if key == "" {
		return "", status.Error(codes.InvalidArgument, m.noKey)
	}
	if err := m.kind.CheckKey(key); err != nil {
		return "", status.Errorf(codes.InvalidArgument, "granary: %s takes %v keys: %v", m.typ, m.kind, err)
	}
	return key, nil
}

// metadataKey returns the key sent as request metadata, or "" when none
// was. Sending it more than once is an InvalidArgument error, as the
// values might differ.
func (m *method) metadataKey(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(KeyHeader)
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
		return vals[0], nil
	}
	return "", status.Errorf(codes.InvalidArgument, "granary: %s got the request metadata %q %d times (%s); send it once",
		m.name, KeyHeader, len(vals), strings.Join(vals, ", "))
}

// formatKey writes the value v of the key field fd as a key: a string as
// it is, a number in decimal.
func formatKey(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Int32Kind:
		return strconv.FormatInt(v.Int(), 10)
	case protoreflect.Uint64Kind, protoreflect.Uint32Kind:
		return strconv.FormatUint(v.Uint(), 10)
	}
	return v.String()
}
