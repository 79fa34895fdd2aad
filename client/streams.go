package client

import (
	"context"
	"errors"
	"io"
	"strconv"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/granaryio/granary/grain"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
)

// positionHeader is the gateway's response header that gives the sequence
// of the first event a subscription may get.
const positionHeader = "granary-stream-position"

// streamDesc is the gateway's StreamGateway/Subscribe.
var streamDesc = grpc.StreamDesc{StreamName: "Subscribe", ServerStreams: true}

const subscribeMethod = "/granary.v1.StreamGateway/Subscribe"

// Back-off between a broken stream subscription and the next try.
const (
	watchRetryMin = 50 * time.Millisecond
	watchRetryMax = 2 * time.Second
)

// WatchStream follows a durable stream through the gateways (grain/streams'
// Watch is its typed form): it calls fn with each event, from where req
// says, until ctx ends or fn fails, and returns why. When its gateway goes
// away it subscribes again through another, from the event after the last
// fn got (or from where the first subscription started), so fn gets each
// event once, in order, unless the stream's log dropped it meanwhile. An
// error that another gateway would give too (no such stream, a memory
// stream, a refusal) ends it.
func (c *Client) WatchStream(ctx context.Context, req *granaryv1.StreamTailRequest, fn func(*granaryv1.StreamItem) error) error {
	req = proto.CloneOf(req)
	id := grain.ID{Type: "granary.v1.Stream", Key: req.GetStream()}
	var tried []*gatewayRef
	wait := watchRetryMin
	for {
		g := c.pick(id, tried)
		if g == nil {
			tried, g = nil, c.pick(id, nil)
		}
		if g == nil {
			return status.Error(codes.Unavailable, "client: no gateway to subscribe through")
		}
		got, err := c.watchOnce(ctx, g.addr, req, fn)
		switch {
		case ctx.Err() != nil:
			return status.FromContextError(ctx.Err()).Err()
		}
		var he handlerError
		if errors.As(err, &he) {
			return he.err
		}
		switch status.Code(err) {
		case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.PermissionDenied,
			codes.Unauthenticated, codes.Unimplemented, codes.OutOfRange:
			return err
		}
		c.log.Debug("stream subscription broke; resuming through another gateway", zap.String("stream", req.GetStream()), zap.Error(err))
		tried = append(tried, g)
		if got {
			wait = watchRetryMin
		}
		t := c.o.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return status.FromContextError(ctx.Err()).Err()
		case <-t.Chan():
		}
		wait = min(2*wait, watchRetryMax)
	}
}

// handlerError is the error of fn, which ends the watch.
type handlerError struct{ err error }

func (e handlerError) Error() string { return e.err.Error() }

// watchOnce subscribes through the gateway at addr until the stream
// breaks, moving req's start past each event fn gets. got says whether
// the gateway answered at all.
func (c *Client) watchOnce(ctx context.Context, addr string, req *granaryv1.StreamTailRequest, fn func(*granaryv1.StreamItem) error) (got bool, err error) {
	cc, err := c.net.ClientConn(addr)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cc.NewStream(ctx, &streamDesc, subscribeMethod)
	if err != nil {
		return false, err
	}
	if err := st.SendMsg(req); err != nil {
		return false, recvErr(st, err)
	}
	if err := st.CloseSend(); err != nil {
		return false, err
	}
	md, err := st.Header()
	if err != nil {
		return false, err
	}
	got = true
	if req.GetFrom() == nil {
		// Resume where this subscription started, whatever the clocks.
		if v := md.Get(positionHeader); len(v) == 1 {
			if pos, perr := strconv.ParseUint(v[0], 10, 64); perr == nil {
				req.From, req.FromUnixNanos = &granaryv1.StreamToken{Sequence: pos}, 0
			}
		}
	}
	for {
		it := new(granaryv1.StreamItem)
		if err := st.RecvMsg(it); err != nil {
			if err == io.EOF {
				err = status.Error(codes.Unavailable, "client: the gateway ended the stream subscription")
			}
			return got, err
		}
		if err := fn(it); err != nil {
			return got, handlerError{err}
		}
		req.From, req.FromUnixNanos = &granaryv1.StreamToken{Sequence: it.GetToken().GetSequence() + 1}, 0
	}
}

// recvErr is the stream's status when a send failed because it ended.
func recvErr(st grpc.ClientStream, err error) error {
	if err != io.EOF {
		return err
	}
	if rerr := st.RecvMsg(new(granaryv1.StreamItem)); rerr != nil && rerr != io.EOF {
		return rerr
	}
	return err
}
