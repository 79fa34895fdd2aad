package local

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
)

// StreamDeliverMethodName is the name of the runtime's method that hands a
// subscriber grain events of a stream; every grain type has it, and only
// silos call it.
const StreamDeliverMethodName = "granary.v1.Streams/Deliver"

// StreamDeliverMethod is the descriptor of that method. Like the reminder
// method, its Index is outside every dispatch table.
var StreamDeliverMethod = grain.MethodDesc{
	Name:        StreamDeliverMethodName,
	FullName:    "/" + StreamDeliverMethodName,
	Index:       -1,
	Handler:     deliverStream,
	NewRequest:  func() proto.Message { return new(granaryv1.StreamDelivery) },
	NewResponse: func() proto.Message { return new(granaryv1.StreamDelivered) },
}

// RuntimeMethod returns the runtime's method called name, which every
// grain type has beside its own, or nil.
func RuntimeMethod(name string) *grain.MethodDesc {
	switch name {
	case ReminderMethodName:
		return &ReminderMethod
	case StreamDeliverMethodName:
		return &StreamDeliverMethod
	}
	return nil
}

// isRuntimeMethod reports whether m is one of the runtime's methods.
func isRuntimeMethod(m *grain.MethodDesc) bool {
	return m == &ReminderMethod || m == &StreamDeliverMethod
}

// deliverStream runs a delivery's events through the subscriber's handler,
// one after another in this turn, and stops at the first that fails. A
// handler's failure is the reply's, not the call's: the stream learns how
// far the subscriber got and delivers the rest again.
func deliverStream(impl any, ctx grain.Context, req proto.Message) (proto.Message, error) {
	d := req.(*granaryv1.StreamDelivery)
	tc, ok := ctx.(*turnCtx)
	if !ok {
		return nil, status.Error(codes.Internal, "granary: a stream delivery outside a turn")
	}
	var h grain.StreamHandlerDecl
	for _, x := range tc.C.act.typ.Opts.StreamHandlers {
		if x.HandlerName() == d.Handler {
			h = x
			break
		}
	}
	switch {
	case h == nil:
		return &granaryv1.StreamDelivered{Code: uint32(codes.FailedPrecondition),
			Message: "granary: grain type " + ctx.ID().Type + " registers no stream handler " + d.Handler}, nil
	case h.MessageType() != d.Type:
		return &granaryv1.StreamDelivered{Code: uint32(codes.FailedPrecondition),
			Message: "granary: stream handler " + d.Handler + " of " + ctx.ID().Type + " takes " + h.MessageType() + ", not " + d.Type}, nil
	}
	// A delivery runs its batch to the end, or to a failure: asking the
	// turn's context whether the call was given up would make it, a
	// quarter of a small delivery's cost, and a batch is short.
	ev := grainrt.StreamEvent{Provider: d.Provider, Namespace: d.Namespace, Key: d.Key, Subscription: d.Subscription}
	for i, e := range d.Events {
		ev.Epoch, ev.Sequence = e.GetToken().GetEpoch(), e.GetToken().GetSequence()
		if err := h.HandleStreamEvent(impl, ctx, ev, e.Payload); err != nil {
			st := status.Convert(err)
			c := st.Code()
			if c == codes.OK {
				c = codes.Unknown
			}
			return &granaryv1.StreamDelivered{Handled: uint32(i), Code: uint32(c), Message: st.Message()}, nil
		}
	}
	return &granaryv1.StreamDelivered{Handled: uint32(len(d.Events))}, nil
}
