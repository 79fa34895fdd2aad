// Package streams is the grain author's side of Granary's streams: named
// sequences of proto messages that grains and clients publish to, and that
// grains receive as turns.
//
// A stream is named by a provider (configured on the silos: Config.Streams),
// a namespace and a key, and carries one proto message type: the type of
// its first event or subscription. Get returns a typed handle:
//
//	posts := streams.Get[*chatpb.Post](ctx.Caller(), "chat", "rooms", room)
//	tok, err := posts.Publish(ctx, &chatpb.Post{Text: "hi"})
//
// # Receiving
//
// A grain type registers its stream handlers by name (WithHandlers), and a
// grain subscribes one of them to a stream:
//
//	var onPost = streams.NewHandler("on-post", func(m *member, ctx grain.Context, ev streams.Event[*chatpb.Post]) error { ... })
//	sub, err := posts.Subscribe(ctx, onPost)
//
// The subscription is kept by the stream, not by the activation: it
// survives the grain's deactivation, and each event activates the grain
// where it belongs, as a call would. It lasts until Unsubscribe.
//
// A type may instead subscribe implicitly (Implicit): every stream of a
// namespace then delivers to the grain whose key is the stream's key, with
// no Subscribe call, as Orleans' implicit subscriptions do.
//
// # Delivery
//
// Each event reaches a subscriber as a turn of the subscriber grain, under
// the type's usual admission rules; a burst may run as one turn, one
// handler call after another. A subscriber gets a stream's events in the
// order the stream numbered them. Every event carries a Token. A handler that returns an error gets
// the event again, after a back-off, and the events after it wait; past the
// provider's retries the subscription is parked: delivery to it stops until
// it is unparked, and it is listed, logged and counted as parked.
//
// Each subscriber has a bounded buffer of its own, so a slow one does not
// slow the publisher or the other subscribers.
//
// A memory provider keeps events in the stream's activation only: an
// event that finds a subscriber's buffer full is dropped for that
// subscriber (the gap shows in the tokens), and so are the events queued
// when the stream's silo dies.
//
// A durable provider logs each event before Publish returns, and keeps a
// cursor per subscription, saved once its subscriber handled the events:
// every event whose publish returned reaches every subscriber at least
// once, whatever silo dies, in order. A subscriber behind its buffer reads
// from the log instead, and a subscription may start at an earlier event
// (FromToken, FromTime).
//
// With either provider a handler may get an event again: after a delivery
// whose outcome the stream cannot know (it timed out, or the subscriber's
// silo died), and for a durable stream, after a restart, the events since
// its cursor was last saved. Compare the Token with the last one handled.
//
// This package imports grain, internal/grainrt and the wire types only.
package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
)

// GrainType is the type of the runtime's stream grains, one per stream.
const GrainType = "granary.v1.Stream"

// ID names a stream.
type ID struct {
	Provider, Namespace, Key string
}

// String is "provider/namespace/key", the key of the stream's grain.
func (id ID) String() string { return id.Provider + "/" + id.Namespace + "/" + id.Key }

// Check says what is wrong with id, if anything: provider and namespace
// must be non-empty and free of '/', and the key non-empty.
func (id ID) Check() error {
	switch {
	case id.Provider == "" || strings.Contains(id.Provider, "/"):
		return fmt.Errorf("stream provider %q: must be non-empty, without '/'", id.Provider)
	case id.Namespace == "" || strings.Contains(id.Namespace, "/"):
		return fmt.Errorf("stream namespace %q: must be non-empty, without '/'", id.Namespace)
	case id.Key == "":
		return errors.New("stream key: must be non-empty")
	}
	return nil
}

// ParseID reads "provider/namespace/key".
func ParseID(s string) (ID, error) {
	p, rest, ok1 := strings.Cut(s, "/")
	ns, key, ok2 := strings.Cut(rest, "/")
	id := ID{Provider: p, Namespace: ns, Key: key}
	if !ok1 || !ok2 {
		return id, fmt.Errorf("stream %q: not provider/namespace/key", s)
	}
	return id, id.Check()
}

// Token is an event's place in its stream: of two events of one stream, the
// later has the greater token. A subscriber that keeps the last token it
// handled can drop an event it gets again.
type Token struct {
	// Epoch tells the activations of a memory stream apart (the time the
	// activation started); a durable stream's is 0.
	Epoch uint64
	// Sequence numbers the stream's events within the epoch, from 1.
	Sequence uint64
}

// Less reports whether t comes before u.
func (t Token) Less(u Token) bool {
	return t.Epoch < u.Epoch || t.Epoch == u.Epoch && t.Sequence < u.Sequence
}

// IsZero reports whether t is no event's token.
func (t Token) IsZero() bool { return t == Token{} }

func (t Token) String() string { return fmt.Sprintf("%d.%d", t.Epoch, t.Sequence) }

func tokenOf(t *granaryv1.StreamToken) Token {
	return Token{Epoch: t.GetEpoch(), Sequence: t.GetSequence()}
}

// Event is one event as a handler gets it.
type Event[T proto.Message] struct {
	Stream ID
	Token  Token
	// Subscription is the ID of the subscription that delivers it.
	Subscription string
	Message      T
}

// Handler is a stream handler of a grain type, for events of type T. Make
// one with NewHandler, register it with the type (WithHandlers or
// Implicit), and subscribe it to streams.
type Handler[T proto.Message] struct {
	name string
	typ  string
	fn   func(impl any, ctx grain.Context, ev Event[T]) error
}

// NewHandler declares the handler name of grains implemented by G, which
// take events of type T. name identifies it within the grain type, and is
// what subscriptions store: keep it stable across versions.
func NewHandler[G any, T proto.Message](name string, fn func(g G, ctx grain.Context, ev Event[T]) error) *Handler[T] {
	var zero T
	return &Handler[T]{
		name: name,
		typ:  string(zero.ProtoReflect().Descriptor().FullName()),
		fn: func(impl any, ctx grain.Context, ev Event[T]) error {
			g, ok := impl.(G)
			if !ok {
				return status.Errorf(codes.Internal, "granary: stream handler %q is for %T, not %T", name, *new(G), impl)
			}
			return fn(g, ctx, ev)
		},
	}
}

// HandlerName is the handler's name.
func (h *Handler[T]) HandlerName() string { return h.name }

// MessageType is the full name of T.
func (h *Handler[T]) MessageType() string { return h.typ }

// HandleStreamEvent decodes the event and runs the handler. Runtimes only.
func (h *Handler[T]) HandleStreamEvent(impl any, ctx context.Context, ev grainrt.StreamEvent, payload []byte) error {
	gctx, ok := grain.FromContext(ctx)
	if !ok {
		return status.Error(codes.Internal, "granary: a stream event outside a grain turn")
	}
	var zero T
	msg := zero.ProtoReflect().New().Interface().(T)
	if err := proto.Unmarshal(payload, msg); err != nil {
		return status.Errorf(codes.InvalidArgument, "granary: stream %s/%s/%s: event %d.%d does not decode as %s: %v",
			ev.Provider, ev.Namespace, ev.Key, ev.Epoch, ev.Sequence, h.typ, err)
	}
	return h.fn(impl, gctx, Event[T]{
		Stream:       ID{Provider: ev.Provider, Namespace: ev.Namespace, Key: ev.Key},
		Token:        Token{Epoch: ev.Epoch, Sequence: ev.Sequence},
		Subscription: ev.Subscription,
		Message:      msg,
	})
}

// WithHandlers registers stream handlers with a grain type, so that its
// grains can subscribe them.
func WithHandlers(hs ...grain.StreamHandlerDecl) grain.RegisterOption {
	return func(o *grain.TypeOptions) { o.StreamHandlers = append(o.StreamHandlers, hs...) }
}

// Implicit subscribes the grain type to every stream of namespace, of any
// provider: each event of the stream with key K goes to the grain with key
// K, through h, activating it if need be. It registers h as WithHandlers
// does.
func Implicit[T proto.Message](namespace string, h *Handler[T]) grain.RegisterOption {
	return func(o *grain.TypeOptions) {
		o.StreamHandlers = append(o.StreamHandlers, h)
		o.ImplicitStreams = append(o.ImplicitStreams, grain.ImplicitStreamDecl{Namespace: namespace, Handler: h})
	}
}

// Stream is a typed handle on one stream. It is a value; copies are the
// same handle.
type Stream[T proto.Message] struct {
	id  ID
	ref granaryv1.StreamRef
	typ protoreflect.FullName
}

// Get returns the handle of stream provider/namespace/key, whose events
// are Ts, reached through c: a grain's Context.Caller, a silo or a client.
// Nothing is checked or sent until the handle is used.
func Get[T proto.Message](c grain.Caller, provider, namespace, key string) Stream[T] {
	id := ID{Provider: provider, Namespace: namespace, Key: key}
	var zero T
	return Stream[T]{id: id, ref: granaryv1.NewStreamRef(c, id.String()), typ: zero.ProtoReflect().Descriptor().FullName()}
}

// ID is the stream's name.
func (s Stream[T]) ID() ID { return s.id }

func (s Stream[T]) check() error {
	if err := s.id.Check(); err != nil {
		return status.Errorf(codes.InvalidArgument, "granary: %v", err)
	}
	return nil
}

// Publish sends msg to the stream's subscribers and returns its token once
// the stream has it: queued for every subscriber by a memory provider,
// logged by a durable one. From then on the provider's guarantee holds.
func (s Stream[T]) Publish(ctx context.Context, msg T) (Token, error) {
	if err := s.check(); err != nil {
		return Token{}, err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return Token{}, status.Errorf(codes.InvalidArgument, "granary: stream %s: the event does not encode: %v", s.id, err)
	}
	r, err := s.ref.Publish(ctx, &granaryv1.StreamPublish{Type: string(s.typ), Payload: b})
	if err != nil {
		return Token{}, err
	}
	return tokenOf(r.GetToken()), nil
}

// PublishBatch publishes msgs together, in order, and returns their
// tokens once the stream has them all: one call, and for a durable
// stream one append, where Publish would take one each. The batch is
// published whole or, if it fails, not at all as far as the caller is
// told (a durable stream's batch whose outcome is unknown may have been
// appended).
func (s Stream[T]) PublishBatch(ctx context.Context, msgs []T) ([]Token, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	req := &granaryv1.StreamPublish{Type: string(s.typ), Batch: make([][]byte, len(msgs))}
	for i, m := range msgs {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "granary: stream %s: event %d of the batch does not encode: %v", s.id, i, err)
		}
		req.Batch[i] = b
	}
	r, err := s.ref.Publish(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(r.GetTokens()) != len(msgs) {
		return nil, status.Errorf(codes.Internal, "granary: stream %s answered a batch of %d with %d tokens", s.id, len(msgs), len(r.GetTokens()))
	}
	out := make([]Token, len(msgs))
	for i, t := range r.GetTokens() {
		out[i] = tokenOf(t)
	}
	return out, nil
}

// Subscription is one subscription of a grain to a stream.
type Subscription struct {
	// ID is unique in the cluster.
	ID     string
	Stream ID
	// Grain is the subscriber.
	Grain grain.ID
	// Handler names the subscriber type's handler that takes the events.
	Handler string
	// Implicit subscriptions come from the type's registration
	// (Implicit), and cannot be unsubscribed.
	Implicit bool
	// Parked: delivery failed past the provider's retries and stopped
	// until the subscription is unparked; ParkedReason says why.
	Parked       bool
	ParkedReason string
	// Handled is the token of the last event the subscriber handled.
	Handled Token
}

func subscriptionOf(id ID, s *granaryv1.StreamSubscriptionInfo) Subscription {
	g, _ := grain.ParseID(s.GetGrain())
	return Subscription{
		ID: s.GetId(), Stream: id, Grain: g, Handler: s.GetHandler(),
		Implicit: s.GetImplicit(), Parked: s.GetParked(), ParkedReason: s.GetParkedReason(),
		Handled: tokenOf(s.GetHandled()),
	}
}

// A SubscribeOption changes where a subscription (or a Watch) starts:
// FromToken, FromTime.
type SubscribeOption func(*start)

type start struct {
	from      *granaryv1.StreamToken
	fromNanos int64
}

func starting(opts []SubscribeOption) start {
	var st start
	for _, o := range opts {
		o(&st)
	}
	return st
}

// FromToken starts the subscription at the event with token t, rather
// than with the next event published: a rewind, which only a durable
// provider can do. Events no longer kept are skipped.
func FromToken(t Token) SubscribeOption {
	return func(s *start) { s.from = &granaryv1.StreamToken{Epoch: t.Epoch, Sequence: t.Sequence} }
}

// FromTime starts the subscription at the first event published at or
// after t: a rewind, which only a durable provider can do.
func FromTime(t time.Time) SubscribeOption {
	return func(s *start) { s.fromNanos = t.UnixNano() }
}

// Subscribe subscribes the calling grain's handler h to the stream and
// returns the subscription. h must be registered with the grain's type
// (WithHandlers). A grain may subscribe more than once, even with one
// handler: each subscription gets every event. It starts with the next
// event published, unless an option rewinds it.
func (s Stream[T]) Subscribe(ctx grain.Context, h *Handler[T], opts ...SubscribeOption) (Subscription, error) {
	if err := s.check(); err != nil {
		return Subscription{}, err
	}
	if h == nil {
		return Subscription{}, status.Error(codes.InvalidArgument, "granary: Subscribe with a nil handler")
	}
	st := starting(opts)
	req := &granaryv1.StreamSubscribe{Grain: ctx.ID().String(), Handler: h.name, Type: h.typ, From: st.from, FromUnixNanos: st.fromNanos}
	r, err := s.ref.Subscribe(ctx, req)
	if err != nil {
		return Subscription{}, err
	}
	return subscriptionOf(s.id, r), nil
}

// Subscriptions lists the calling grain's subscriptions to the stream,
// implicit ones included.
func (s Stream[T]) Subscriptions(ctx grain.Context) ([]Subscription, error) {
	return s.list(ctx, ctx.ID().String())
}

// AllSubscriptions lists every subscription to the stream.
func (s Stream[T]) AllSubscriptions(ctx context.Context) ([]Subscription, error) {
	return s.list(ctx, "")
}

func (s Stream[T]) list(ctx context.Context, g string) ([]Subscription, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	r, err := s.ref.Subscriptions(ctx, &granaryv1.StreamSubscriptionsRequest{Grain: g})
	if err != nil {
		return nil, err
	}
	out := make([]Subscription, 0, len(r.GetSubscriptions()))
	for _, x := range r.GetSubscriptions() {
		out = append(out, subscriptionOf(s.id, x))
	}
	return out, nil
}

// Unsubscribe ends the calling grain's subscription sub; events already on
// their way may still arrive. It reports whether the subscription
// existed. An implicit subscription cannot be ended (FailedPrecondition).
func (s Stream[T]) Unsubscribe(ctx grain.Context, sub string) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	r, err := s.ref.Unsubscribe(ctx, &granaryv1.StreamSubscriptionRef{Id: sub, Grain: ctx.ID().String()})
	if err != nil {
		return false, err
	}
	return r.GetExisted(), nil
}

// Unpark resumes delivery to the parked subscription sub of grain g, from
// the next event published. It returns the subscription as it is now;
// unparking one that is not parked changes nothing.
func (s Stream[T]) Unpark(ctx context.Context, g grain.ID, sub string) (Subscription, error) {
	if err := s.check(); err != nil {
		return Subscription{}, err
	}
	r, err := s.ref.Unpark(ctx, &granaryv1.StreamSubscriptionRef{Id: sub, Grain: g.String()})
	if err != nil {
		return Subscription{}, err
	}
	return subscriptionOf(s.id, r), nil
}

// A Watcher follows durable streams for a program outside the cluster:
// the Go client is one (client.Client.WatchStream).
type Watcher interface {
	WatchStream(ctx context.Context, req *granaryv1.StreamTailRequest, fn func(*granaryv1.StreamItem) error) error
}

// Watch follows the durable stream from outside the cluster, through w's
// gateways: it calls fn with each event, in order, from the next one
// published (or where an option says), until ctx ends or fn fails, and
// returns why. It survives its gateway going away, resuming from the
// event after the last fn got. No subscription is stored: a program that
// restarts passes FromToken with the token after the last it handled.
func (s Stream[T]) Watch(ctx context.Context, w Watcher, fn func(Event[T]) error, opts ...SubscribeOption) error {
	if err := s.check(); err != nil {
		return err
	}
	st := starting(opts)
	req := &granaryv1.StreamTailRequest{Stream: s.id.String(), From: st.from, FromUnixNanos: st.fromNanos}
	return w.WatchStream(ctx, req, func(it *granaryv1.StreamItem) error {
		var zero T
		msg := zero.ProtoReflect().New().Interface().(T)
		if got := it.GetEvent().GetTypeUrl(); !strings.HasSuffix(got, "/"+string(s.typ)) {
			return status.Errorf(codes.FailedPrecondition, "granary: stream %s carries %s, not %s", s.id, got, s.typ)
		}
		if err := proto.Unmarshal(it.GetEvent().GetValue(), msg); err != nil {
			return status.Errorf(codes.DataLoss, "granary: stream %s: event %d does not decode as %s: %v", s.id, it.GetToken().GetSequence(), s.typ, err)
		}
		return fn(Event[T]{Stream: s.id, Token: tokenOf(it.GetToken()), Message: msg})
	})
}
