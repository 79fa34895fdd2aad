package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain/streams"
	chatpb "github.com/granaryio/granary/proto/examples/chat"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/granarytest"
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

// chatCluster starts two silos with the rooms and a gateway on the first,
// sharing one memory store, which keeps the rooms' log.
func chatCluster(t *testing.T, clock *fakeClock) *granarytest.Cluster {
	t.Helper()
	return granarytest.New(t, granarytest.Silos(2), granarytest.Gateway(),
		granarytest.Configure(func(cfg *silo.Config) {
			cfg.Streams = &silo.StreamsConfig{Providers: map[string]silo.StreamProviderConfig{streamProvider: {Kind: "durable"}}}
		}),
		granarytest.Register(func(s *silo.Silo) error { return registerRoom(s, clock.now) }))
}

// TestRoomPublishesPostsInOrder: each post a room takes goes to its
// stream stamped with the room's clock and numbered after the one before,
// and a client following the stream from its start gets them all, in
// order, from any silo's room activation.
func TestRoomPublishesPostsInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	clock := &fakeClock{t: time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)}
	c := chatCluster(t, clock)
	room := chatpb.NewRoomRef(c.Caller(), "lobby")
	var seqs []uint64
	for _, text := range []string{"hi", "hello", "bye"} {
		r, err := room.Post(ctx, &chatpb.PostRequest{Name: "alice", Text: text})
		if err != nil {
			t.Fatal(err)
		}
		if len(seqs) > 0 && r.GetSeq() <= seqs[len(seqs)-1] {
			t.Fatalf("post %q numbered %d after %d", text, r.GetSeq(), seqs[len(seqs)-1])
		}
		seqs = append(seqs, r.GetSeq())
		clock.advance(time.Second)
	}

	cl, err := client.Dial(ctx, client.WithGateways(c.Silo(0).GatewayAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*chatpb.Post
	var toks []uint64
	watchCtx, stop := context.WithCancel(ctx)
	err = roomStream(nil, "lobby").Watch(watchCtx, cl, func(ev streams.Event[*chatpb.Post]) error {
		got, toks = append(got, ev.Message), append(toks, ev.Token.Sequence)
		if len(got) == 3 {
			stop()
		}
		return nil
	}, streams.FromToken(streams.Token{Sequence: 1}))
	if status.Code(err) != codes.Canceled {
		t.Fatalf("Watch: %v", err)
	}
	for i, p := range got {
		wantText := []string{"hi", "hello", "bye"}[i]
		wantMillis := time.Date(2026, 12, 8, 12, 0, i, 0, time.UTC).UnixMilli()
		if p.GetRoom() != "lobby" || p.GetName() != "alice" || p.GetText() != wantText || p.GetUnixMillis() != wantMillis || toks[i] != seqs[i] {
			t.Fatalf("post %d: %v with seq %d; want lobby/alice %q at %d with seq %d", i, p, toks[i], wantText, wantMillis, seqs[i])
		}
	}
}

// TestRoomRefusesBadPosts: a post without a name or text, or with one too
// long, is refused with InvalidArgument, and nothing is published.
func TestRoomRefusesBadPosts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	c := chatCluster(t, &fakeClock{})
	room := chatpb.NewRoomRef(c.Caller(), "lobby")
	for _, req := range []*chatpb.PostRequest{
		{Name: "", Text: "hi"},
		{Name: strings.Repeat("n", maxNameBytes+1), Text: "hi"},
		{Name: "alice", Text: ""},
		{Name: "alice", Text: strings.Repeat("t", maxTextBytes+1)},
	} {
		if _, err := room.Post(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Post(name %d bytes, text %d bytes): %v, want InvalidArgument", len(req.Name), len(req.Text), err)
		}
	}
	r, err := room.Post(ctx, &chatpb.PostRequest{Name: "alice", Text: "hi"})
	if err != nil || r.GetSeq() != 1 {
		t.Fatalf("the first good post: %v, %v; want seq 1, none published before it", r, err)
	}
}
