package main

import (
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	chatpb "github.com/granaryio/granary/proto/examples/chat"
	"github.com/granaryio/granary/silo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// streamProvider and streamNamespace name the rooms' streams:
	// chat/rooms/<room>, on the silos' durable provider "chat".
	streamProvider  = "chat"
	streamNamespace = "rooms"
	// maxNameBytes and maxTextBytes bound a display name and a message.
	maxNameBytes = 64
	maxTextBytes = 4096
)

// roomStream is the stream of room's posts, reached through c.
func roomStream(c grain.Caller, room string) streams.Stream[*chatpb.Post] {
	return streams.Get[*chatpb.Post](c, streamProvider, streamNamespace, room)
}

// registerRoom registers the Room grain on s. now tells the rooms the
// time, for their posts' timestamps; a test passes a clock of its own.
func registerRoom(s *silo.Silo, now func() time.Time) error {
	return chatpb.RegisterRoomGrain(s, func(id grain.ID) chatpb.RoomGrain { return &room{name: id.Key, now: now} })
}

// room implements the chat.Room grain. It keeps nothing: the room's
// stream keeps its posts, and the members follow the stream.
type room struct {
	chatpb.UnimplementedRoomGrain

	name string
	now  func() time.Time
}

var _ chatpb.RoomGrain = (*room)(nil)

// Post checks the message, stamps it and publishes it to the room's
// stream. Publish returns once the stream's log has the post, so a post
// that was answered reaches every member that follows the room, whatever
// silo dies.
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
	tok, err := roomStream(ctx.Caller(), r.name).Publish(ctx, &chatpb.Post{
		Room:       r.name,
		Name:       req.GetName(),
		Text:       req.GetText(),
		UnixMillis: r.now().UnixMilli(),
	})
	if err != nil {
		return nil, err
	}
	return &chatpb.PostReply{Seq: tok.Sequence}, nil
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
