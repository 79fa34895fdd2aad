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
	"github.com/granaryio/granary/grain/streams"
	chatpb "github.com/granaryio/granary/proto/examples/chat"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// defaultHistory is how far back a member's view of the room starts
	// by default.
	defaultHistory = time.Hour
	// callTimeout bounds each Post of the client.
	callTimeout = 10 * time.Second
)

// clientOptions are the flags of chat client.
type clientOptions struct {
	gateways []string      // gateway addresses to learn the cluster from
	room     string        // the room's name: its stream's key and the Room grain's
	name     string        // the member's display name
	history  time.Duration // how far back the view of the room starts
}

// runClient enters room o.room as o.name through the cluster's gateways:
// it shows the room's posts of the last o.history, then each new one as it
// comes, on stdout, and posts each line of stdin, until stdin ends or ctx
// does. It follows the room's stream, rewound to o.history ago, so it
// sees what was said before it came, in the room's one order, and a
// gateway that goes away only moves it to another, from the post after
// the last it showed. Besides the posts, written as
//
//	[<room>] <name>: <text>
//
// it writes two lines for scripts and the tests:
//
//	joined room=<room> name=<name>
//	left room=<room>
//
// Failures to post go to stderr, and the client goes on.
func runClient(ctx context.Context, o clientOptions, stdin io.Reader, stdout, stderr io.Writer) error {
	logger := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(stderr), zap.WarnLevel))
	c, err := client.Dial(ctx, client.WithGateways(o.gateways...), client.WithLogger(logger))
	if err != nil {
		return fmt.Errorf("connecting through %s: %w", strings.Join(o.gateways, ","), err)
	}
	defer c.Close()

	scr := &screen{w: stdout}
	scr.println(fmt.Sprintf("joined room=%s name=%s", o.room, o.name))
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched := make(chan error, 1)
	since := time.Now().Add(-o.history)
	go func() {
		watched <- roomStream(nil, o.room).Watch(watchCtx, c, func(ev streams.Event[*chatpb.Post]) error {
			scr.show(ev.Message)
			return nil
		}, streams.FromTime(since))
	}()

	done := make(chan struct{})
	defer close(done)
	lines, readErr := readLines(stdin, done)
	room := chatpb.NewRoomRef(c, o.room)
	leave := func() error {
		stopWatch()
		err := <-watched
		scr.println("left room=" + o.room)
		if status.Code(err) != codes.Canceled {
			return fmt.Errorf("following room %q: %w", o.room, err)
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return leave()
		case err := <-watched:
			watched <- err // for leave
			return leave()
		case line, ok := <-lines:
			if !ok {
				if err := leave(); err != nil {
					return err
				}
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
		}
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

// screen writes the client's stdout: the posts as the stream delivers
// them, and the client's own lines. Any goroutine; mu serialises the
// writes.
type screen struct {
	mu sync.Mutex
	w  io.Writer
}

// println writes one line of the client's own.
func (s *screen) println(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintln(s.w, line)
}

// show writes a post.
func (s *screen) show(p *chatpb.Post) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "[%s] %s: %s\n", printable(p.GetRoom()), printable(p.GetName()), printable(p.GetText()))
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
