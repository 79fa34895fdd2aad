package grpcapi

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/granaryio/granary/grain"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// keyFieldKinds are the kinds of field that may carry a grain key, each
// with whether it is an integer, written in decimal as the key.
// protoc-gen-go-granary allows the same kinds.
var keyFieldKinds = map[protoreflect.Kind]bool{
	protoreflect.StringKind: false,
	protoreflect.Int64Kind:  true,
	protoreflect.Int32Kind:  true,
	protoreflect.Uint64Kind: true,
	protoreflect.Uint32Kind: true,
}

// keyFieldRule ends the errors about a key field of the wrong shape.
const keyFieldRule = "the key option needs a singular string, int64, int32, uint64 or uint32 field"

// findKeyField returns the field of the request message md marked with
// the key option, or nil when none is. It fails when the marked field
// cannot carry a key of kind, or when more than one field is marked; the
// error names the message and the field.
func findKeyField(md protoreflect.MessageDescriptor, kind grain.KeyKind) (protoreflect.FieldDescriptor, error) {
	var found protoreflect.FieldDescriptor
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		on, err := keyOption(fd)
		if err != nil {
			return nil, fmt.Errorf("request %s: field %s: reading the key option: %v", md.FullName(), fd.Name(), err)
		}
		if !on {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("request %s: fields %s and %s both have the key option; at most one may carry the grain key", md.FullName(), found.Name(), fd.Name())
		}
		if err := checkKeyField(fd, kind); err != nil {
			return nil, fmt.Errorf("request %s: key field %s %v", md.FullName(), fd.Name(), err)
		}
		found = fd
	}
	return found, nil
}

// checkKeyField checks that fd, a field marked with the key option, can
// carry keys of kind. The error completes a sentence that begins with the
// field's name.
func checkKeyField(fd protoreflect.FieldDescriptor, kind grain.KeyKind) error {
	integer, ok := keyFieldKinds[fd.Kind()]
	switch {
	case fd.IsMap():
		return fmt.Errorf("is a map; %s", keyFieldRule)
	case fd.IsList():
		return fmt.Errorf("is repeated; %s", keyFieldRule)
	case !ok:
		return fmt.Errorf("is of type %v; %s", fd.Kind(), keyFieldRule)
	case integer && kind != grain.KeyInt64:
		return fmt.Errorf("is of type %v, but the grain type's keys are %v keys: the key field must be a string", fd.Kind(), kind)
	case !integer && kind == grain.KeyInt64:
		return fmt.Errorf("is of type string, but the grain type's keys are int64 keys: the key field must be an int64, int32, uint64 or uint32")
	}
	return nil
}

// keyOption reports whether fd has the option (granary.v1.key) = true.
// Descriptors parsed against a registry that lacked the option hold it as
// unknown bytes, which are decoded again against the types linked into
// this program.
func keyOption(fd protoreflect.FieldDescriptor) (bool, error) {
	opts := fd.Options()
	if opts == nil {
		return false, nil
	}
	if proto.HasExtension(opts, granaryv1.E_Key) {
		on, _ := proto.GetExtension(opts, granaryv1.E_Key).(bool)
		return on, nil
	}
	if len(opts.ProtoReflect().GetUnknown()) == 0 {
		return false, nil
	}
	b, err := proto.Marshal(opts)
	if err != nil {
		return false, err
	}
	parsed := &descriptorpb.FieldOptions{}
	if err := (proto.UnmarshalOptions{Resolver: protoregistry.GlobalTypes}).Unmarshal(b, parsed); err != nil {
		return false, err
	}
	on, _ := proto.GetExtension(parsed, granaryv1.E_Key).(bool)
	return on, nil
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
