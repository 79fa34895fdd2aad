package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/granaryio/granary/grain"
	chatpb "github.com/granaryio/granary/proto/examples/chat"
	"github.com/granaryio/granary/silo"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

const (
	// subscriptionExpiry is how long a membership lasts past its last
	// Join. Clients join again every rejoinInterval, well within it, so a
	// member is dropped only once its client stopped renewing.
	subscriptionExpiry = 30 * time.Second
	// recentPosts is how many posts a room keeps for Join to return.
	recentPosts = 20
	// maxNameBytes and maxTextBytes bound a display name and a message.
	maxNameBytes = 64
	maxTextBytes = 4096
)

// registerRoom registers the Room grain on s. now tells the rooms the
// time, for their subscriptions' expiry and their posts' timestamps; a
// test passes a clock it advances.
func registerRoom(s *silo.Silo, now func() time.Time) error {
	return chatpb.RegisterRoomGrain(s, func(id grain.ID) chatpb.RoomGrain { return newRoom(id.Key, now) })
}

// room implements the chat.Room grain. Its fields are touched only by its
// activation's turns, which never overlap, so it needs no lock. Nothing
// is stored: a new activation starts with no members and no posts, under
// a new epoch.
type room struct {
	chatpb.UnimplementedRoomGrain

	name    string
	epoch   uint64
	now     func() time.Time
	members *grain.ObserverManager[chatpb.RoomObserverRef]
	seq     uint64         // the seq of the newest post; 0 before the first
	recent  []*chatpb.Post // the last recentPosts posts, oldest first
}

var _ chatpb.RoomGrain = (*room)(nil)

func newRoom(name string, now func() time.Time) *room {
	epoch := rand.Uint64()
	for epoch == 0 { // 0 is the members' "no epoch yet"
		epoch = rand.Uint64()
	}
	return &room{
		name:    name,
		epoch:   epoch,
		now:     now,
		members: grain.NewObserverManager[chatpb.RoomObserverRef](subscriptionExpiry, now),
	}
}

// Join subscribes the observer, or renews its subscription, and returns
// the recent posts.
func (r *room) Join(ctx grain.Context, req *chatpb.JoinRequest) (*chatpb.JoinReply, error) {
	id, err := observerID(req.GetObserver())
	if err != nil {
		return nil, err
	}
	if err := checkName(req.GetName()); err != nil {
		return nil, err
	}
	// A reference kept for later calls: each Post calls it with its own
	// Context.
	before := r.members.Len()
	r.members.Subscribe(chatpb.RoomObserverRefFromID(ctx.Caller(), id))
	if r.members.Len() > before {
		ctx.Logger().Info("member joined", zap.String("room", r.name), zap.String("member_name", req.GetName()), zap.Stringer("observer", id))
	}
	// A copy: the reply may be encoded after this turn, while the next
	// changes the list.
	return &chatpb.JoinReply{Recent: slices.Clone(r.recent), Epoch: r.epoch}, nil
}

// Leave drops the observer from the members.
func (r *room) Leave(ctx grain.Context, req *chatpb.LeaveRequest) (*emptypb.Empty, error) {
	id, err := observerID(req.GetObserver())
	if err != nil {
		return nil, err
	}
	before := r.members.Len()
	r.members.Unsubscribe(id)
	if r.members.Len() < before {
		ctx.Logger().Info("member left", zap.String("room", r.name), zap.Stringer("observer", id))
	}
	return &emptypb.Empty{}, nil
}

// Post numbers the message, keeps it among the recent posts and sends it
// one way to every member, in the order they joined. A one-way call does
// not wait for the member, so a slow or dead client never holds the room
// up; but it reports no failure either, so a member whose client is gone
// without leaving stays until its subscription expires.
func (r *room) Post(ctx grain.Context, req *chatpb.PostRequest) (*chatpb.PostReply, error) {
	if err := checkName(req.GetName()); err != nil {
		return nil, err
	}
	switch text := req.GetText(); {
	case text == "":
		return nil, status.Error(codes.InvalidArgument, "chat: the text is empty")
	case len(text) > maxTextBytes:
		return nil, status.Errorf(codes.InvalidArgument, "chat: the text is %d bytes long, more than %d", len(text), maxTextBytes)
	}
	r.seq++
	// p is shared by the recent list and every member's call, so it is
	// never changed after this.
	p := &chatpb.Post{
		Room:       r.name,
		Seq:        r.seq,
		Name:       req.GetName(),
		Text:       req.GetText(),
		UnixMillis: r.now().UnixMilli(),
		Epoch:      r.epoch,
	}
	if len(r.recent) == recentPosts {
		r.recent = r.recent[1:]
	}
	r.recent = append(r.recent, p)

	var sent uint32
	err := r.members.Notify(ctx, func(ctx context.Context, m chatpb.RoomObserverRef) error {
		_, err := m.Posted(ctx, p)
		if err == nil {
			sent++
		}
		return err
	})
	if err != nil {
		ctx.Logger().Warn("a member was not sent a post", zap.String("room", r.name), zap.Uint64("seq", p.Seq), zap.Error(err))
	}
	return &chatpb.PostReply{Seq: p.Seq, Recipients: sent}, nil
}

// observerID parses the ID of a RoomObserver, as Join and Leave get it.
func observerID(s string) (grain.ID, error) {
	id, err := grain.ParseID(s)
	if err != nil {
		return grain.ID{}, status.Errorf(codes.InvalidArgument, "chat: observer %q: %v", s, err)
	}
	if id.Type != chatpb.RoomObserverObserverType {
		return grain.ID{}, status.Errorf(codes.InvalidArgument, "chat: observer %s is not a %s", id, chatpb.RoomObserverObserverType)
	}
	return id, nil
}

// checkName checks a display name.
func checkName(name string) error {
	switch {
	case name == "":
		return status.Error(codes.InvalidArgument, "chat: the name is empty")
	case len(name) > maxNameBytes:
		return status.Errorf(codes.InvalidArgument, "chat: the name is %d bytes long, more than %d", len(name), maxNameBytes)
	}
	return nil
}
