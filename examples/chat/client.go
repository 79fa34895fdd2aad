package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/granaryio/granary/client"
	chatpb "github.com/granaryio/granary/proto/examples/chat"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/protobuf/types/known/emptypb"
)

const (
	// rejoinInterval is how often a client joins its room again by
	// default: well within subscriptionExpiry, so that a membership
	// outlives one failed renewal, and a room that activated afresh, or
	// lost the client's observer while the client moved to another
	// gateway, has the member back within this.
	rejoinInterval = 10 * time.Second
	// callTimeout bounds each Join, Post and Leave of the client.
	callTimeout = 10 * time.Second
)

// clientOptions are the flags of chat client.
type clientOptions struct {
	gateways []string      // gateway addresses to learn the cluster from
	room     string        // the room's name: the Room grain's key
	name     string        // the member's display name
	rejoin   time.Duration // how often to renew the membership
}

// runClient joins room o.room as o.name through the cluster's gateways,
// shows each post of the room on stdout, and posts each line of stdin,
// until stdin ends or ctx does; it then leaves the room. Besides the posts,
// written as
//
//	[<room>] <name>: <text>
//
// it writes two lines for scripts and the tests:
//
//	joined room=<room> name=<name> home=<member ID of its home gateway's silo>
//	left room=<room>
//
// Failures to post or renew go to stderr, and the client goes on.
func runClient(ctx context.Context, o clientOptions, stdin io.Reader, stdout, stderr io.Writer) error {
	logger := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(stderr), zap.WarnLevel))
	c, err := client.Dial(ctx, client.WithGateways(o.gateways...), client.WithLogger(logger))
	if err != nil {
		return fmt.Errorf("connecting through %s: %w", strings.Join(o.gateways, ","), err)
	}
	defer c.Close() // also ends the observer

	scr := &screen{w: stdout, f: newFeed()}
	obs, err := chatpb.CreateRoomObserver(c, &roomObserver{scr: scr})
	if err != nil {
		return fmt.Errorf("making the room's observer: %w", err)
	}
	room := chatpb.NewRoomRef(c, o.room)
	join := func() (*chatpb.JoinReply, error) {
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		return room.Join(ctx, &chatpb.JoinRequest{Observer: obs.ID().String(), Name: o.name})
	}
	reply, err := join()
	if err != nil {
		return fmt.Errorf("joining room %q: %w", o.room, err)
	}
	scr.joined(reply, fmt.Sprintf("joined room=%s name=%s home=%s", o.room, o.name, c.HomeGateway()))

	done := make(chan struct{})
	defer close(done)
	lines, readErr := readLines(stdin, done)
	tick := time.NewTicker(o.rejoin)
	defer tick.Stop()
	leaveRoom := func() {
		leave(ctx, room, obs.ID().String(), stderr)
		scr.println("left room=" + o.room)
	}
	for {
		select {
		case <-ctx.Done():
			leaveRoom()
			return nil
		case line, ok := <-lines:
			if !ok {
				leaveRoom()
				if err := <-readErr; err != nil {
					return fmt.Errorf("reading stdin: %w", err)
				}
				return nil
			}
			if line = strings.TrimSpace(line); line == "" {
				continue
			}
			postCtx, cancel := context.WithTimeout(ctx, callTimeout)
			_, err := room.Post(postCtx, &chatpb.PostRequest{Name: o.name, Text: line})
			cancel()
			if err != nil {
				fmt.Fprintf(stderr, "chat: posting to %q: %v\n", o.room, err)
			}
		case <-tick.C:
			reply, err := join()
			if err != nil {
				fmt.Fprintf(stderr, "chat: renewing the membership of %q: %v\n", o.room, err)
				continue
			}
			scr.joined(reply, "")
		}
	}
}

// leave leaves the room, within callTimeout even when ctx has ended. A
// failure is only reported: the membership expires anyway.
func leave(ctx context.Context, room chatpb.RoomRef, observer string, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	if _, err := room.Leave(ctx, &chatpb.LeaveRequest{Observer: observer}); err != nil {
		fmt.Fprintf(stderr, "chat: leaving room %q: %v\n", room.ID().Key, err)
	}
}

// readLines reads r line by line on a goroutine of its own and sends the
// lines on the channel it returns, which it closes at the end of r; the
// error channel then holds the read error, nil at EOF. Once done is
// closed the goroutine ends after the read it is in: a read of os.Stdin
// cannot be interrupted, but the process is exiting then.
func readLines(r io.Reader, done <-chan struct{}) (<-chan string, <-chan error) {
	lines := make(chan string)
	errc := make(chan error, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-done:
				return
			}
		}
		errc <- sc.Err()
	}()
	return lines, errc
}

// roomObserver is the client's RoomObserver: the room calls it with each
// post, one call at a time.
type roomObserver struct {
	chatpb.UnimplementedRoomObserver
	scr *screen
}

var _ chatpb.RoomObserver = (*roomObserver)(nil)

// Posted shows the post, and any it was holding back for it.
func (o *roomObserver) Posted(_ context.Context, p *chatpb.Post) (*emptypb.Empty, error) {
	o.scr.posted(p)
	return &emptypb.Empty{}, nil
}

// screen writes the client's stdout: the posts in the order its feed
// puts them, and the client's own lines. Any goroutine; mu serialises
// the feed and the writes.
type screen struct {
	mu sync.Mutex
	w  io.Writer
	f  *feed
}

// posted shows what the feed lets through of a post the room sent.
func (s *screen) posted(p *chatpb.Post) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.show(s.f.posted(p))
}

// joined writes line, unless it is empty, and then what the feed lets
// through of a Join reply.
func (s *screen) joined(r *chatpb.JoinReply, line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if line != "" {
		fmt.Fprintln(s.w, line)
	}
	s.show(s.f.joined(r))
}

// println writes one line of the client's own.
func (s *screen) println(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintln(s.w, line)
}

// show writes posts; mu held.
func (s *screen) show(posts []*chatpb.Post) {
	for _, p := range posts {
		fmt.Fprintf(s.w, "[%s] %s: %s\n", printable(p.GetRoom()), printable(p.GetName()), printable(p.GetText()))
	}
}

// printable drops the control characters of s, so that another member
// can neither break the one-post-per-line output nor send escape
// sequences to the terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
}
