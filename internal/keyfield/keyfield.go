// Package keyfield is the rule for the request field that carries a
// grain's key, marked with the field option (granary.v1.key) = true: the
// generator checks it when it generates, and the gateway when it serves a
// grain type over plain gRPC, with the same words.
package keyfield

import (
	"fmt"
	"strings"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Kinds are the kinds of field that may carry a grain key, each with
// whether it is an integer, written in decimal as the key.
var Kinds = map[protoreflect.Kind]bool{
	protoreflect.StringKind: false,
	protoreflect.Int64Kind:  true,
	protoreflect.Int32Kind:  true,
	protoreflect.Uint64Kind: true,
	protoreflect.Uint32Kind: true,
}

// rule ends the problems of a key field of the wrong shape.
const rule = "the key option needs a singular string, int64, int32, uint64 or uint32 field"

// Check returns the field of md, a request message, marked with the key
// option (nil when none is), and what is wrong with the marked fields:
// each must be a singular field of one of Kinds, an integer when the grain
// type's keys are (intKeys) and a string otherwise, and at most one may be
// marked. keys says what the grain type's keys are, for the problems,
// such as "the grain option key_kind is KEY_KIND_INT64". Each problem is a
// sentence about md's fields that does not name md.
func Check(md protoreflect.MessageDescriptor, intKeys bool, keys string) (protoreflect.FieldDescriptor, []string) {
	var (
		found    protoreflect.FieldDescriptor
		marked   []string
		problems []string
	)
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		on, err := Option(fd)
		if err != nil {
			problems = append(problems, fmt.Sprintf("field %s: reading the key option: %v", fd.Name(), err))
			continue
		}
		if !on {
			continue
		}
		marked = append(marked, string(fd.Name()))
		integer, ok := Kinds[fd.Kind()]
		switch {
		case fd.IsMap():
			problems = append(problems, fmt.Sprintf("key field %s is a map; %s", fd.Name(), rule))
		case fd.IsList():
			problems = append(problems, fmt.Sprintf("key field %s is repeated; %s", fd.Name(), rule))
		case !ok:
			problems = append(problems, fmt.Sprintf("key field %s is of type %v; %s", fd.Name(), fd.Kind(), rule))
		case integer && !intKeys:
			problems = append(problems, fmt.Sprintf("key field %s is of type %v, but %s: the key field must be a string", fd.Name(), fd.Kind(), keys))
		case !integer && intKeys:
			problems = append(problems, fmt.Sprintf("key field %s is of type string, but %s: the key field must be an int64, int32, uint64 or uint32", fd.Name(), keys))
		default:
			found = fd
		}
	}
	if len(marked) > 1 {
		problems = append(problems, fmt.Sprintf("%d fields have the key option (%s); at most one may carry the grain key", len(marked), strings.Join(marked, ", ")))
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return found, nil
}

// Option reports whether fd has the option (granary.v1.key) = true.
// Descriptors parsed against a registry that lacked the option hold it as
// unknown bytes, which are decoded again against the types linked into
// this program.
func Option(fd protoreflect.FieldDescriptor) (bool, error) {
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
