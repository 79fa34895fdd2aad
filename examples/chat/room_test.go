package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	chatpb "github.com/granaryio/granary/proto/examples/chat"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/granarytest"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"
)

// fakeClock is the rooms' clock in the tests: it moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// recorder is a RoomObserver that hands the posts it gets to the test.
type recorder struct {
	name  string
	posts chan *chatpb.Post
}

func newRecorder(name string) *recorder {
	return &recorder{name: name, posts: make(chan *chatpb.Post, 64)}
}

func (r *recorder) Posted(_ context.Context, p *chatpb.Post) (*emptypb.Empty, error) {
	r.posts <- p
	return &emptypb.Empty{}, nil
}

// next returns the next post r gets, failing after defaultTestTimeout.
func (r *recorder) next(t *testing.T) *chatpb.Post {
	t.Helper()
	select {
	case p := <-r.posts:
		return p
	case <-time.After(defaultTestTimeout):
		t.Fatalf("%s got no post within %v", r.name, defaultTestTimeout)
		return nil
	}
}

// startRooms starts a cluster of one silo that hosts rooms on clock and
// serves a gateway on loopback, and returns it; the cluster stops when
// the test ends.
func startRooms(t *testing.T, clock *fakeClock) *granarytest.Cluster {
	t.Helper()
	return granarytest.New(t, granarytest.Gateway(),
		granarytest.Register(func(s *silo.Silo) error { return registerRoom(s, clock.now) }),
		granarytest.Configure(func(cfg *silo.Config) {
			cfg.Name = "rooms"
			if testing.Verbose() {
				cfg.Logger, _ = zap.NewDevelopment()
			}
		}))
}

// chatter is a member of a room for the test: a client of its own, with
// one recording observer.
type chatter struct {
	c    *client.Client
	rec  *recorder
	obs  chatpb.RoomObserverRef
	room chatpb.RoomRef
	name string
}

func newChatter(t *testing.T, rooms *granarytest.Cluster, room, name string) *chatter {
	t.Helper()
	c := rooms.Client(t)
	rec := newRecorder(name)
	obs, err := chatpb.CreateRoomObserver(c, rec)
	if err != nil {
		t.Fatal(err)
	}
	return &chatter{c: c, rec: rec, obs: obs, room: chatpb.NewRoomRef(c, room), name: name}
}

func (ch *chatter) join(t *testing.T, ctx context.Context) *chatpb.JoinReply {
	t.Helper()
	r, err := ch.room.Join(ctx, &chatpb.JoinRequest{Observer: ch.obs.ID().String(), Name: ch.name})
	if err != nil {
		t.Fatalf("%s joining: %v", ch.name, err)
	}
	return r
}

// post posts text as ch and checks the seq and recipients of the reply.
func (ch *chatter) post(t *testing.T, ctx context.Context, text string, wantSeq uint64, wantRecipients uint32) {
	t.Helper()
	r, err := ch.room.Post(ctx, &chatpb.PostRequest{Name: ch.name, Text: text})
	if err != nil {
		t.Fatalf("%s posting %q: %v", ch.name, text, err)
	}
	if r.GetSeq() != wantSeq || r.GetRecipients() != wantRecipients {
		t.Fatalf("%s posting %q: seq %d to %d members, want seq %d to %d", ch.name, text, r.GetSeq(), r.GetRecipients(), wantSeq, wantRecipients)
	}
}

// expectPosts checks that rec gets the posts seqs, in order, with the
// texts text(seq), under epoch.
func expectPosts(t *testing.T, rec *recorder, epoch uint64, seqs []uint64, text func(uint64) string) {
	t.Helper()
	for _, seq := range seqs {
		p := rec.next(t)
		if p.GetSeq() != seq || p.GetText() != text(seq) || p.GetEpoch() != epoch || p.GetRoom() != "lobby" {
			t.Fatalf("%s got post %v, want seq %d %q in room lobby, epoch %d", rec.name, p, seq, text(seq), epoch)
		}
	}
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// TestRoom drives a Room on a silo alone through two clients, each with
// an observer: posts reach every member in seq order, Join returns the
// last 20, Leave and the subscription expiry end a membership, and bad
// requests are refused.
func TestRoom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	clock := &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	rooms := startRooms(t, clock)
	alice := newChatter(t, rooms, "lobby", "alice")
	bob := newChatter(t, rooms, "lobby", "bob")
	text := func(seq uint64) string { return fmt.Sprintf("post %d", seq) }

	// Both join an empty room, of one epoch.
	ra, rb := alice.join(t, ctx), bob.join(t, ctx)
	epoch := ra.GetEpoch()
	if epoch == 0 || rb.GetEpoch() != epoch || len(ra.GetRecent())+len(rb.GetRecent()) != 0 {
		t.Fatalf("joining a new room: replies %v and %v, want no posts and one epoch, not 0", ra, rb)
	}

	// Posts from either reach both, in seq order.
	for seq := uint64(1); seq <= 25; seq++ {
		from := alice
		if seq%2 == 0 {
			from = bob
		}
		from.post(t, ctx, text(seq), seq, 2)
	}
	expectPosts(t, alice.rec, epoch, seqRange(1, 25), text)
	expectPosts(t, bob.rec, epoch, seqRange(1, 25), text)

	// A Join, which renews, returns the last 20, oldest first, as they
	// were taken.
	recent := alice.join(t, ctx).GetRecent()
	if len(recent) != recentPosts {
		t.Fatalf("Join returned %d recent posts, want %d", len(recent), recentPosts)
	}
	for i, p := range recent {
		seq := uint64(25 - recentPosts + 1 + i)
		wantName := "alice"
		if seq%2 == 0 {
			wantName = "bob"
		}
		if p.GetSeq() != seq || p.GetText() != text(seq) || p.GetName() != wantName || p.GetEpoch() != epoch ||
			p.GetUnixMillis() != clock.now().UnixMilli() {
			t.Fatalf("recent post %d is %v, want seq %d by %s at %d", i, p, seq, wantName, clock.now().UnixMilli())
		}
	}

	// After Leave, alice gets nothing more until she joins again.
	if _, err := alice.room.Leave(ctx, &chatpb.LeaveRequest{Observer: alice.obs.ID().String()}); err != nil {
		t.Fatal(err)
	}
	bob.post(t, ctx, text(26), 26, 1)
	expectPosts(t, bob.rec, epoch, []uint64{26}, text)
	if got := alice.join(t, ctx).GetRecent(); got[len(got)-1].GetSeq() != 26 {
		t.Fatalf("after rejoining, alice's newest recent post is %v, want seq 26", got[len(got)-1])
	}
	alice.post(t, ctx, text(27), 27, 2)
	expectPosts(t, alice.rec, epoch, []uint64{27}, text) // and not 26: it came after her Leave
	expectPosts(t, bob.rec, epoch, []uint64{27}, text)

	// Bob's observer goes without a Leave. A one-way call reports no
	// failure, so the room keeps sending to him until his membership
	// expires; alice renews hers in time and stays.
	bob.c.DeleteObserver(bob.obs.ID())
	alice.post(t, ctx, text(28), 28, 2)
	expectPosts(t, alice.rec, epoch, []uint64{28}, text)
	clock.advance(subscriptionExpiry / 2)
	alice.join(t, ctx)
	clock.advance(subscriptionExpiry/2 + time.Second)
	alice.post(t, ctx, text(29), 29, 1)
	expectPosts(t, alice.rec, epoch, []uint64{29}, text)
	select {
	case p := <-bob.rec.posts:
		t.Fatalf("bob's deleted observer got %v", p)
	default:
	}

	// Bad requests are refused, and change nothing.
	long := strings.Repeat("x", maxTextBytes+1)
	bad := []struct {
		name string
		call func() error
	}{
		{"join with a malformed observer ID", func() error {
			_, err := alice.room.Join(ctx, &chatpb.JoinRequest{Observer: "no slash", Name: "alice"})
			return err
		}},
		{"join with a grain's ID", func() error {
			_, err := alice.room.Join(ctx, &chatpb.JoinRequest{Observer: grain.ID{Type: chatpb.RoomGrainType, Key: "lobby"}.String(), Name: "alice"})
			return err
		}},
		{"join without a name", func() error {
			_, err := alice.room.Join(ctx, &chatpb.JoinRequest{Observer: alice.obs.ID().String()})
			return err
		}},
		{"leave with a malformed observer ID", func() error {
			_, err := alice.room.Leave(ctx, &chatpb.LeaveRequest{Observer: ""})
			return err
		}},
		{"post without text", func() error {
			_, err := alice.room.Post(ctx, &chatpb.PostRequest{Name: "alice"})
			return err
		}},
		{"post with too long a text", func() error {
			_, err := alice.room.Post(ctx, &chatpb.PostRequest{Name: "alice", Text: long})
			return err
		}},
		{"post with too long a name", func() error {
			_, err := alice.room.Post(ctx, &chatpb.PostRequest{Name: long[:maxNameBytes+1], Text: "hi"})
			return err
		}},
	}
	for _, b := range bad {
		if err := b.call(); grain.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", b.name, err)
		}
	}
	alice.post(t, ctx, text(30), 30, 1)
	expectPosts(t, alice.rec, epoch, []uint64{30}, text)
}
