package probe_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"github.com/granaryio/granary/proto/probe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// loopbackHost is a grain.ObserverHost that keeps its observers in a map
// and delivers every call to one of them at once, on the caller's
// goroutine, through the method's Observe function: what a client does,
// without the cluster in between. It records the calls it made and, when
// fail is set, refuses to make observers.
type loopbackHost struct {
	fail      error
	observers map[grain.ID]observer
	next      int
	deleted   []grain.ID
}

// An observer is what loopbackHost keeps of one observer.
type observer struct {
	desc *grain.ServiceDesc
	impl any
}

var _ grain.ObserverHost = (*loopbackHost)(nil)

func newLoopbackHost() *loopbackHost {
	return &loopbackHost{observers: map[grain.ID]observer{}}
}

// CreateObserver gives impl the next ID of desc's type.
func (h *loopbackHost) CreateObserver(desc *grain.ServiceDesc, impl any) (grain.ID, error) {
	if h.fail != nil {
		return grain.ID{}, h.fail
	}
	h.next++
	id := grain.NewID(desc.Type, "client-1/"+strconv.Itoa(h.next))
	h.observers[id] = observer{desc: desc, impl: impl}
	return id, nil
}

// DeleteObserver forgets id.
func (h *loopbackHost) DeleteObserver(id grain.ID) {
	delete(h.observers, id)
	h.deleted = append(h.deleted, id)
}

// Invoke calls m on the observer id, which must be one of this host's and
// of m's type, and drops the reply of a one-way method.
func (h *loopbackHost) Invoke(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) (proto.Message, error) {
	o, ok := h.observers[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no observer %v", id)
	}
	if m.Index < 0 || m.Index >= len(o.desc.Methods) || &o.desc.Methods[m.Index] != m {
		return nil, status.Errorf(codes.Internal, "method %s is not in the dispatch table of %s", m.FullName, o.desc.Type)
	}
	if m.Observe == nil {
		return nil, status.Errorf(codes.Internal, "method %s has no Observe function", m.FullName)
	}
	resp, err := m.Observe(o.impl, ctx, req)
	if grainrt.ResolveCallOptions(m.Timeout, m.OneWay, opts).OneWay {
		return nil, nil
	}
	return resp, err
}

// InvokeAsync is Invoke, done before it returns.
func (h *loopbackHost) InvokeAsync(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) grain.Pending {
	resp, err := h.Invoke(ctx, id, m, req, opts...)
	return done{resp, err}
}

// done is a Pending whose call has finished.
type done struct {
	resp proto.Message
	err  error
}

func (d done) Await(context.Context) (proto.Message, error) { return d.resp, d.err }

// recorder is a ProbeObserver that records the tags of the requests it
// gets. Ask replies with the request's text and n, or, when n is
// negative, with a nil reply and no error.
type recorder struct {
	probe.UnimplementedProbeObserver
	tags []string
}

var _ probe.ProbeObserver = (*recorder)(nil)

func (r *recorder) Notify(ctx context.Context, req *probe.Request) (*emptypb.Empty, error) {
	r.tags = append(r.tags, "notify:"+req.GetTag())
	return &emptypb.Empty{}, nil
}

func (r *recorder) Ask(ctx context.Context, req *probe.Request) (*probe.Reply, error) {
	r.tags = append(r.tags, "ask:"+req.GetTag())
	if req.GetN() < 0 {
		return nil, nil
	}
	return &probe.Reply{Text: req.GetText(), N: req.GetN()}, nil
}

// TestObserverServiceDesc checks the dispatch table generated for the
// observer service ProbeObserver.
func TestObserverServiceDesc(t *testing.T) {
	d := &probe.ProbeObserver_ServiceDesc
	if probe.ProbeObserverObserverType != "probe.ProbeObserver" {
		t.Errorf("ProbeObserverObserverType %q, want probe.ProbeObserver", probe.ProbeObserverObserverType)
	}
	if d.Type != probe.ProbeObserverObserverType {
		t.Errorf("Type %q, want ProbeObserverObserverType", d.Type)
	}
	if !d.Observer {
		t.Error("Observer is false")
	}
	if !reflect.DeepEqual(d.Options, grain.TypeOptions{}) {
		t.Errorf("Options %+v, want none", d.Options)
	}
	if d.File != "probe/observer.proto" {
		t.Errorf("File %q, want probe/observer.proto", d.File)
	}
	tests := []struct {
		name   string
		oneWay bool
		req    proto.Message
		resp   proto.Message
	}{
		{"Notify", true, &probe.Request{}, &emptypb.Empty{}},
		{"Ask", false, &probe.Request{}, &probe.Reply{}},
	}
	if len(d.Methods) != len(tests) {
		t.Fatalf("%d methods, want %d", len(d.Methods), len(tests))
	}
	for i, tt := range tests {
		m := &d.Methods[i]
		if m.Name != tt.name || m.FullName != "/probe.ProbeObserver/"+tt.name || m.Index != i {
			t.Errorf("method %d is %s (%s, index %d), want %s", i, m.Name, m.FullName, m.Index, tt.name)
		}
		if d.Method(tt.name) != m {
			t.Errorf("Method(%q) does not find method %d", tt.name, i)
		}
		if m.Handler != nil {
			t.Errorf("%s has a grain Handler", m.Name)
		}
		if m.Observe == nil {
			t.Errorf("%s has no Observe function", m.Name)
		}
		if m.OneWay != tt.oneWay || m.AlwaysInterleave || m.ReadOnly || m.Timeout != 0 {
			t.Errorf("%s has options one_way %v, always_interleave %v, read_only %v, timeout %v; want one_way %v only", m.Name, m.OneWay, m.AlwaysInterleave, m.ReadOnly, m.Timeout, tt.oneWay)
		}
		if got := m.NewRequest(); got.ProtoReflect().Descriptor() != tt.req.ProtoReflect().Descriptor() {
			t.Errorf("%s: NewRequest makes a %T, want a %T", m.Name, got, tt.req)
		}
		if got := m.NewResponse(); got.ProtoReflect().Descriptor() != tt.resp.ProtoReflect().Descriptor() {
			t.Errorf("%s: NewResponse makes a %T, want a %T", m.Name, got, tt.resp)
		}
	}
}

// TestCreateObserver checks that CreateProbeObserver hands the service's
// descriptor and the implementation to the host, and that the reference it
// returns carries the host's ID and reaches the implementation through the
// Observe functions, blocking and async, one way and with a reply.
func TestCreateObserver(t *testing.T) {
	ctx := t.Context()
	h := newLoopbackHost()
	impl := &recorder{}
	ref, err := probe.CreateProbeObserver(h, impl)
	if err != nil {
		t.Fatalf("CreateProbeObserver: %v", err)
	}
	want := grain.NewID(probe.ProbeObserverObserverType, "client-1/1")
	if ref.ID() != want {
		t.Fatalf("reference to %v, want the host's ID %v", ref.ID(), want)
	}
	o := h.observers[want]
	if o.desc != &probe.ProbeObserver_ServiceDesc || o.impl != impl {
		t.Fatalf("host got desc %p and impl %v, want %p and %p", o.desc, o.impl, &probe.ProbeObserver_ServiceDesc, impl)
	}

	if out, err := ref.Notify(ctx, &probe.Request{Tag: "a"}); out != nil || err != nil {
		t.Errorf("Notify = %v, %v; want nil, nil", out, err)
	}
	reply, err := ref.Ask(ctx, &probe.Request{Tag: "b", Text: "hello", N: 7})
	if err != nil || reply.GetText() != "hello" || reply.GetN() != 7 {
		t.Errorf("Ask = %v, %v; want text hello and n 7", reply, err)
	}
	if err := ref.NotifyAsync(ctx, &probe.Request{Tag: "c"}).Wait(ctx); err != nil {
		t.Errorf("NotifyAsync: %v", err)
	}
	reply, err = ref.AskAsync(ctx, &probe.Request{Tag: "d", N: 3}).Await(ctx)
	if err != nil || reply.GetN() != 3 {
		t.Errorf("AskAsync = %v, %v; want n 3", reply, err)
	}
	// A nil reply reaches the caller as a nil *Reply, not as an interface
	// holding one.
	reply, err = ref.Ask(ctx, &probe.Request{Tag: "e", N: -1})
	if reply != nil || err != nil {
		t.Errorf("Ask of a nil reply = %v, %v; want nil, nil", reply, err)
	}
	if got, want := strings.Join(impl.tags, " "), "notify:a ask:b notify:c ask:d ask:e"; got != want {
		t.Errorf("observer got %q, want %q", got, want)
	}

	// A grain makes its reference from the ID alone.
	again := probe.ProbeObserverRefFromID(h, ref.ID())
	if _, err := again.Ask(ctx, &probe.Request{Tag: "f"}); err != nil {
		t.Errorf("Ask through ProbeObserverRefFromID: %v", err)
	}
	h.DeleteObserver(ref.ID())
	if _, err := again.Ask(ctx, &probe.Request{Tag: "g"}); status.Code(err) != codes.NotFound {
		t.Errorf("Ask of a deleted observer: %v, want NotFound", err)
	}
}

// TestObserveDispatch calls the Observe functions directly: they reach
// the implementation's methods, return a nil proto.Message (not a typed
// nil) for a nil reply, and pass errors through.
func TestObserveDispatch(t *testing.T) {
	ctx := t.Context()
	notify := probe.ProbeObserver_ServiceDesc.Method("Notify").Observe
	ask := probe.ProbeObserver_ServiceDesc.Method("Ask").Observe
	impl := &recorder{}

	if out, err := notify(impl, ctx, &probe.Request{Tag: "x"}); err != nil || out == nil {
		t.Errorf("Notify = %v, %v; want an Empty", out, err)
	}
	out, err := ask(impl, ctx, &probe.Request{N: 5})
	if err != nil || out.(*probe.Reply).GetN() != 5 {
		t.Errorf("Ask = %v, %v; want n 5", out, err)
	}
	if out, err := ask(impl, ctx, &probe.Request{N: -1}); out != nil || err != nil {
		t.Errorf("Ask of a nil reply = %#v, %v; want a nil proto.Message", out, err)
	}

	var stub probe.UnimplementedProbeObserver
	for _, m := range probe.ProbeObserver_ServiceDesc.Methods {
		out, err := m.Observe(stub, ctx, m.NewRequest())
		if out != nil || status.Code(err) != codes.Unimplemented {
			t.Errorf("%s on UnimplementedProbeObserver = %v, %v; want codes.Unimplemented", m.Name, out, err)
		}
	}
}

// TestCreateObserverFails checks that a host's error reaches the caller
// of CreateProbeObserver with a zero reference.
func TestCreateObserverFails(t *testing.T) {
	h := newLoopbackHost()
	h.fail = errors.New("host closed")
	ref, err := probe.CreateProbeObserver(h, &recorder{})
	if !errors.Is(err, h.fail) {
		t.Errorf("error %v, want %v", err, h.fail)
	}
	if !ref.ID().IsZero() {
		t.Errorf("reference to %v along with the error, want the zero reference", ref.ID())
	}
}

// TestObserverRefFromIDOfAnotherType checks that ProbeObserverRefFromID
// refuses the ID of a grain, even one with the same key.
func TestObserverRefFromIDOfAnotherType(t *testing.T) {
	id := grain.NewID(probe.ProbeGrainType, "client-1/1")
	defer func() {
		r := recover()
		msg, _ := r.(string)
		if !strings.Contains(msg, "ProbeObserverRefFromID of observer probe.Probe/client-1/1") {
			t.Errorf("panic %v, want one naming the function and the ID", r)
		}
	}()
	probe.ProbeObserverRefFromID(newLoopbackHost(), id)
}
