package streaming

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/granaryio/granary/grain/streams"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
)

// TailPoll is how often a tail that has read everything looks for new
// events in the log.
const TailPoll = 20 * time.Millisecond

// tailRead bounds the records one read of a tail takes.
const tailRead = 256

// PositionHeader is the response header in which Subscribe gives the
// sequence of the first event it may send, so that a client that asked
// for the next event published can resume exactly there.
const PositionHeader = "granary-stream-position"

// Tail sends send the events of the durable stream named in req, from its
// log, as the gateway's StreamGateway/Subscribe does for clients: from the
// token or time asked, or from the next event appended, until ctx ends or
// send fails. A tail is not a subscription: it keeps no cursor, and the
// client resumes from the last token it got. A slow client slows only its
// own tail, which send blocks. start is told the sequence of the first
// event the tail may send, before any.
func (s *Streams) Tail(ctx context.Context, req *granaryv1.StreamTailRequest, start func(pos uint64) error, send func(*granaryv1.StreamItem) error) error {
	id, p, err := s.parseStreamKey(req.GetStream())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "granary: %v", err)
	}
	if p.Kind != KindDurable {
		return status.Errorf(codes.FailedPrecondition, "granary: stream %s: a memory provider's events go to grains only; clients subscribe to durable streams", id)
	}
	part := partitionOf(id.Provider, id.Namespace+"/"+id.Key, p.Partitions)
	oldest, next, err := p.Log.Bounds(ctx, part)
	if err != nil {
		return tailError(id, err)
	}
	pos := next
	switch {
	case req.GetFrom() != nil:
		pos = req.GetFrom().GetSequence()
	case req.GetFromUnixNanos() != 0:
		if pos, err = p.Log.OffsetAt(ctx, part, timeOf(req.GetFromUnixNanos())); err != nil {
			return tailError(id, err)
		}
	}
	pos = max(pos, oldest, 1)
	s.tails.Add(1)
	defer s.tails.Add(-1)
	if err := start(pos); err != nil {
		return err
	}
	key := id.Namespace + "/" + id.Key
	for {
		recs, err := p.Log.Read(ctx, part, pos, tailRead)
		if err != nil {
			return tailError(id, err)
		}
		for _, r := range recs {
			pos = r.Offset + 1
			if r.Stream != key {
				continue
			}
			item := &granaryv1.StreamItem{
				Token: &granaryv1.StreamToken{Sequence: r.Offset},
				Event: &anypb.Any{TypeUrl: "type.googleapis.com/" + r.Type, Value: r.Payload},
			}
			if err := send(item); err != nil {
				return err
			}
		}
		if len(recs) == tailRead {
			continue
		}
		t := s.cfg.Clock.NewTimer(TailPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return status.FromContextError(ctx.Err()).Err()
		case <-s.ctx.Done():
			t.Stop()
			return status.Error(codes.Unavailable, "granary: the silo is closing")
		case <-t.Chan():
		}
	}
}

// Tails is how many clients follow streams through this silo's gateway.
func (s *Streams) Tails() int { return int(s.tails.Load()) }

func tailError(id streams.ID, err error) error {
	if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
		return err
	}
	if err == context.Canceled || err == context.DeadlineExceeded {
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Unavailable, "granary: stream %s: reading its log: %v", id, err)
}
