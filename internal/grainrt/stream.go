package grainrt

import "context"

// StreamEvent is what the runtime tells a stream handler of the event it
// hands over, besides the message: the stream's name, the event's place in
// it and the subscription that delivers it.
type StreamEvent struct {
	Provider, Namespace, Key string
	Subscription             string
	Epoch, Sequence          uint64
}

// StreamHandler is a stream handler a grain type registers
// (grain/streams.Handler): a named function of the grain that takes the
// events of one message type.
type StreamHandler interface {
	// HandlerName names the handler within its grain type; subscriptions
	// are stored with it.
	HandlerName() string
	// MessageType is the full name of the handler's message type.
	MessageType() string
	// HandleStreamEvent decodes payload and runs the handler on the
	// activation impl. ctx is the turn's grain.Context.
	HandleStreamEvent(impl any, ctx context.Context, ev StreamEvent, payload []byte) error
}

// ImplicitStream is a grain type's implicit subscription: every stream of
// Namespace, of any provider, delivers to the grain whose key is the
// stream's key, through Handler.
type ImplicitStream struct {
	Namespace string
	Handler   StreamHandler
}
