package main

import (
	"fmt"
	"time"
	"unicode"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/keyfield"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
)

// emptyFullName is the only response type a one-way rpc may have.
const emptyFullName protoreflect.FullName = "google.protobuf.Empty"

// A grainType is one service as the generator emits it: the service, the
// file it is declared in, and its checked options. It is built by
// loadGrainType, which is the only place that reads the proto options, so
// the emitter works from plain Go values. A service with the grain option
// observer is a grainType too, with observer set and opts left zero: the
// generated code of the two kinds shares its shape (a type constant, an
// interface, a stub, a reference and a dispatch table).
type grainType struct {
	file     *protogen.File
	svc      *protogen.Service
	observer bool // the service is an observer interface, not a grain type
	opts     typeOptions
	methods  []*grainMethod
}

// typeOptions are a service's grain options, checked and converted to the
// values that grain.TypeOptions holds. Zero values mean "not set".
type typeOptions struct {
	placement       granaryv1.Placement
	siloRole        string // non-empty only with PLACEMENT_SILO_ROLE
	reentrant       bool
	collectionAge   time.Duration
	keepAlive       bool
	statelessWorker bool
	maxLocalWorkers int
	keyKind         granaryv1.KeyKind // never KEY_KIND_UNSPECIFIED in a grain type
}

// A grainMethod is one rpc with its checked method options.
type grainMethod struct {
	m                *protogen.Method
	index            int
	oneWay           bool
	alwaysInterleave bool
	readOnly         bool
	timeout          time.Duration
}

// placementIdents maps each placement to the name of its grain.Placement
// constant; PLACEMENT_UNSPECIFIED is grain.PlacementDefault, the zero value,
// which the emitter leaves out.
var placementIdents = map[granaryv1.Placement]string{
	granaryv1.Placement_PLACEMENT_UNSPECIFIED:      "PlacementDefault",
	granaryv1.Placement_PLACEMENT_RANDOM:           "PlacementRandom",
	granaryv1.Placement_PLACEMENT_PREFER_LOCAL:     "PlacementPreferLocal",
	granaryv1.Placement_PLACEMENT_HASH:             "PlacementHash",
	granaryv1.Placement_PLACEMENT_ACTIVATION_COUNT: "PlacementActivationCount",
	granaryv1.Placement_PLACEMENT_SILO_ROLE:        "PlacementSiloRole",
}

// keyKindIdents maps each key kind to the name of its grain.KeyKind
// constant. KEY_KIND_UNSPECIFIED is read as KEY_KIND_STRING before this map
// is consulted.
var keyKindIdents = map[granaryv1.KeyKind]string{
	granaryv1.KeyKind_KEY_KIND_STRING: "KeyString",
	granaryv1.KeyKind_KEY_KIND_INT64:  "KeyInt64",
	granaryv1.KeyKind_KEY_KIND_UUID:   "KeyUUID",

	granaryv1.KeyKind_KEY_KIND_INT64_COMPOUND: "KeyInt64Compound",
	granaryv1.KeyKind_KEY_KIND_UUID_COMPOUND:  "KeyUUIDCompound",
}

// grainKeyKinds maps each key kind to its grain.KeyKind, whose Form
// spells its keys' form in the problems of a key field as grain's own
// errors do.
var grainKeyKinds = map[granaryv1.KeyKind]grain.KeyKind{
	granaryv1.KeyKind_KEY_KIND_STRING:         grain.KeyString,
	granaryv1.KeyKind_KEY_KIND_INT64:          grain.KeyInt64,
	granaryv1.KeyKind_KEY_KIND_UUID:           grain.KeyUUID,
	granaryv1.KeyKind_KEY_KIND_INT64_COMPOUND: grain.KeyInt64Compound,
	granaryv1.KeyKind_KEY_KIND_UUID_COMPOUND:  grain.KeyUUIDCompound,
}

// loadGrainType reads and checks the options of svc, declared in f. It
// returns every problem it finds, each naming the file, the service and,
// for method problems, the rpc, so that one run of the plugin reports them
// all.
func loadGrainType(f *protogen.File, svc *protogen.Service) (*grainType, []error) {
	t := &grainType{file: f, svc: svc}
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: service %s: %s", f.Desc.Path(), svc.Desc.FullName(), fmt.Sprintf(format, args...)))
	}

	o, err := extension[*granaryv1.GrainOptions](svc.Desc.Options(), &descriptorpb.ServiceOptions{}, granaryv1.E_Grain)
	if err != nil {
		fail("reading grain options: %v", err)
		return t, errs
	}
	if o == nil {
		o = &granaryv1.GrainOptions{}
	}
	if unknown := o.ProtoReflect().GetUnknown(); len(unknown) > 0 {
		fail("grain options hold fields that this protoc-gen-go-granary (%s) does not know; rebuild it from the same revision as granary/v1/options.proto", version)
	}

	if o.GetObserver() {
		t.observer = true
		checkObserverOptions(o, fail)
	} else {
		loadTypeOptions(o, &t.opts, fail)
	}

	for i, m := range svc.Methods {
		gm, merrs := loadGrainMethod(m, i, t.observer, t.opts.keyKind)
		t.methods = append(t.methods, gm)
		for _, e := range merrs {
			fail("rpc %s: %v", m.Desc.Name(), e)
		}
	}
	return t, errs
}

// loadTypeOptions checks the grain options o of a grain type and stores
// them into opts, calling fail with each problem.
func loadTypeOptions(o *granaryv1.GrainOptions, opts *typeOptions, fail func(format string, args ...any)) {
	opts.reentrant = o.GetReentrant()
	opts.statelessWorker = o.GetStatelessWorker()
	opts.keepAlive = o.GetKeepAlive()

	opts.placement = o.GetPlacement()
	if _, ok := placementIdents[opts.placement]; !ok {
		fail("grain option placement has the unknown value %d", int32(opts.placement))
	}
	opts.keyKind = o.GetKeyKind()
	if opts.keyKind == granaryv1.KeyKind_KEY_KIND_UNSPECIFIED {
		opts.keyKind = granaryv1.KeyKind_KEY_KIND_STRING
	}
	if _, ok := keyKindIdents[opts.keyKind]; !ok {
		fail("grain option key_kind has the unknown value %d", int32(opts.keyKind))
	}

	if d, err := checkDuration(o.GetCollectionAge()); err != nil {
		fail("grain option collection_age %v", err)
	} else {
		opts.collectionAge = d
	}
	if opts.keepAlive && o.GetCollectionAge() != nil {
		fail("grain option keep_alive cannot be combined with collection_age: a kept-alive activation is never collected for being idle, so a collection age would have no effect")
	}

	switch n := o.GetMaxLocalWorkers(); {
	case n < 0:
		fail("grain option max_local_workers is negative (%d)", n)
	case n > 0 && !opts.statelessWorker:
		fail("grain option max_local_workers (%d) requires stateless_worker: true", n)
	default:
		opts.maxLocalWorkers = int(n)
	}

	// A stateless worker refuses PLACEMENT_SILO_ROLE below, so it is not
	// also asked for a role.
	siloRole := opts.placement == granaryv1.Placement_PLACEMENT_SILO_ROLE
	switch role := o.GetSiloRole(); {
	case role == "" && siloRole && !opts.statelessWorker:
		fail("grain option placement PLACEMENT_SILO_ROLE requires silo_role: the role that a silo's configuration must list for the silo to host the type")
	case role != "" && !siloRole:
		fail("grain option silo_role (%q) requires placement: PLACEMENT_SILO_ROLE, not %v", role, opts.placement)
	case role != "":
		if err := checkRole(role); err != nil {
			fail("grain option silo_role %v", err)
		} else {
			opts.siloRole = role
		}
	}

	if opts.statelessWorker {
		switch opts.placement {
		case granaryv1.Placement_PLACEMENT_UNSPECIFIED, granaryv1.Placement_PLACEMENT_PREFER_LOCAL:
		default:
			fail("grain option stateless_worker does not allow placement %v: a stateless worker is always activated on the silo that receives the call, so only PLACEMENT_UNSPECIFIED and PLACEMENT_PREFER_LOCAL apply", opts.placement)
		}
	}
}

// checkObserverOptions checks the grain options o of an observer service:
// observer must be the only one set, since the others configure the
// activations of a grain, and an observer is an object of a client. Each
// field set besides it is one call of fail. The fields are read from the
// descriptor, so a grain option added later is refused too.
func checkObserverOptions(o *granaryv1.GrainOptions, fail func(format string, args ...any)) {
	m := o.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Name() == observerOption || !m.Has(fd) {
			continue
		}
		fail("grain option %s cannot be set with observer: true: an observer is an object of a client, not a grain, so only observer may be set", fd.Name())
	}
}

// observerOption is the name of the grain option that makes a service an
// observer interface.
const observerOption protoreflect.Name = "observer"

// loadGrainMethod reads and checks the method options of m, the index-th
// rpc of its service, and the key option of its request's fields against
// keyKind, the grain's key kind. For an rpc of an observer service
// (observer set) it refuses the options that schedule requests within an
// activation, and it skips the key option: observers are not served
// through a silo's plain gRPC service, and their IDs are made by the
// client. The errors it returns do not name the file, service or rpc;
// loadGrainType adds those.
func loadGrainMethod(m *protogen.Method, index int, observer bool, keyKind granaryv1.KeyKind) (*grainMethod, []error) {
	gm := &grainMethod{m: m, index: index}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	switch cs, ss := m.Desc.IsStreamingClient(), m.Desc.IsStreamingServer(); {
	case cs && ss:
		fail("streaming rpcs are not supported yet (this one streams in both directions)")
	case cs:
		fail("streaming rpcs are not supported yet (this one streams its requests)")
	case ss:
		fail("streaming rpcs are not supported yet (this one streams its responses)")
	}

	o, err := extension[*granaryv1.MethodOptions](m.Desc.Options(), &descriptorpb.MethodOptions{}, granaryv1.E_Method)
	if err != nil {
		fail("reading method options: %v", err)
		return gm, errs
	}
	if o == nil {
		o = &granaryv1.MethodOptions{}
	}
	if unknown := o.ProtoReflect().GetUnknown(); len(unknown) > 0 {
		fail("method options hold fields that this protoc-gen-go-granary (%s) does not know; rebuild it from the same revision as granary/v1/options.proto", version)
	}
	gm.oneWay = o.GetOneWay()
	gm.alwaysInterleave = o.GetAlwaysInterleave()
	gm.readOnly = o.GetReadOnly()
	if d, err := checkDuration(o.GetTimeout()); err != nil {
		fail("method option timeout %v", err)
	} else {
		gm.timeout = d
	}

	if gm.oneWay {
		if out := m.Output.Desc.FullName(); out != emptyFullName {
			fail("method option one_way requires the response type %s, not %s", emptyFullName, out)
		}
		if gm.readOnly {
			fail("method option one_way cannot be combined with read_only: a one-way call returns nothing, so a read-only one would have no effect")
		}
		if o.GetTimeout() != nil {
			fail("method option one_way cannot be combined with timeout: a one-way call has no reply to time out")
		}
	}
	if observer {
		// Calls to one observer run one at a time, in arrival order, with
		// no activation whose turns these options would arrange.
		if gm.alwaysInterleave {
			fail("method option always_interleave is not allowed on an observer: it lets requests of a grain activation interleave, and calls to an observer run one at a time")
		}
		if gm.readOnly {
			fail("method option read_only is not allowed on an observer: it lets read-only requests of a grain activation interleave, and calls to an observer run one at a time")
		}
		return gm, errs
	}
	errs = append(errs, checkKeyField(m.Input, keyKind)...)
	return gm, errs
}

// checkKeyField checks the fields of msg, an rpc's request, that carry the
// key option, by the rule the gateway applies too (internal/keyfield).
// The errors name the message and the field but not the file, service or
// rpc.
func checkKeyField(msg *protogen.Message, keyKind granaryv1.KeyKind) []error {
	keys := fmt.Sprintf("the grain option key_kind is %v", keyKind)
	switch k, ok := grainKeyKinds[keyKind]; {
	case !ok, k == grain.KeyInt64:
		// An unknown kind was refused already; int64 keys need an
		// integer field, which the problem says.
	case k == grain.KeyString:
		keys += ", whose keys are strings"
	default:
		keys += ", whose keys are strings of the form " + k.Form()
	}
	_, problems := keyfield.Check(msg.Desc, keyKind == granaryv1.KeyKind_KEY_KIND_INT64, keys)
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = fmt.Errorf("request %s: %s", msg.Desc.FullName(), p)
	}
	return errs
}

// extension returns the value of the extension xt in opts, or the zero T
// when opts does not set it. T is the extension's Go type: a message
// pointer or a scalar. opts may hold the extension as a typed field,
// as a dynamic message or as unknown bytes, depending on which registry the
// descriptors were parsed with, so the options are encoded and decoded
// again into blank (an empty options message of opts's type) against the
// extension types linked into this program.
func extension[T any](opts, blank proto.Message, xt protoreflect.ExtensionType) (T, error) {
	var zero T
	b, err := proto.Marshal(opts)
	if err != nil {
		return zero, err
	}
	if err := (proto.UnmarshalOptions{Resolver: protoregistry.GlobalTypes}).Unmarshal(b, blank); err != nil {
		return zero, err
	}
	if !proto.HasExtension(blank, xt) {
		return zero, nil
	}
	v, ok := proto.GetExtension(blank, xt).(T)
	if !ok {
		return zero, fmt.Errorf("extension %s has the unexpected Go type %T", xt.TypeDescriptor().FullName(), proto.GetExtension(blank, xt))
	}
	return v, nil
}

// checkRole checks the name of a silo role. The error completes a
// sentence that begins with the option's name.
func checkRole(role string) error {
	for _, r := range role {
		switch {
		case unicode.IsSpace(r):
			return fmt.Errorf("%q contains whitespace (%U)", role, r)
		case !unicode.IsPrint(r):
			return fmt.Errorf("%q contains the unprintable character %U", role, r)
		}
	}
	return nil
}

// checkDuration converts a duration option to a time.Duration. An unset
// option is zero. The error completes a sentence that begins with the
// option's name.
func checkDuration(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	secs, nanos := d.GetSeconds(), d.GetNanos()
	if nanos <= -1e9 || nanos >= 1e9 || (secs > 0 && nanos < 0) || (secs < 0 && nanos > 0) {
		return 0, fmt.Errorf("is not normalised (seconds: %d, nanos: %d): seconds and nanos must not have opposite signs, and nanos must lie strictly between -1e9 and 1e9", secs, nanos)
	}
	if secs < 0 || nanos < 0 {
		return 0, fmt.Errorf("is negative (seconds: %d, nanos: %d)", secs, nanos)
	}
	if err := d.CheckValid(); err != nil {
		return 0, fmt.Errorf("is out of the range of google.protobuf.Duration (seconds: %d)", secs)
	}
	td := d.AsDuration()
	if back := durationpb.New(td); back.GetSeconds() != secs || back.GetNanos() != nanos {
		return 0, fmt.Errorf("is too long for a Go time.Duration (seconds: %d); the longest is %v", secs, time.Duration(1<<63-1))
	}
	return td, nil
}
