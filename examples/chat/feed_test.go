package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	chatpb "github.com/granaryio/granary/proto/examples/chat"
)

// feedStep is one event for a feed: a post the room sent (post), or the
// reply of a Join (join, with the recent seqs from to to, none when
// from is 0); want is what the feed must show then, as "epoch:seq" words.
type feedStep struct {
	post     string // "epoch:seq"
	join     uint64 // the reply's epoch
	from, to uint64 // the reply's recent seqs
	want     string
}

func parseKey(s string) (epoch, seq uint64) {
	if _, err := fmt.Sscanf(s, "%d:%d", &epoch, &seq); err != nil {
		panic(fmt.Sprintf("bad post %q in a test table", s))
	}
	return epoch, seq
}

func testPost(epoch, seq uint64) *chatpb.Post {
	return &chatpb.Post{Room: "r", Seq: seq, Epoch: epoch, Name: "n", Text: fmt.Sprint(seq)}
}

// TestFeed scripts posts and Join replies through a feed and checks what
// it shows after each: posts in seq order, each once, gaps held until a
// Join reply fills them or shows them lost, and epochs switched only by
// a Join reply.
func TestFeed(t *testing.T) {
	tests := []struct {
		name  string
		steps []feedStep
	}{
		{name: "in order", steps: []feedStep{
			{join: 7, want: ""},
			{post: "7:1", want: "7:1"},
			{post: "7:2", want: "7:2"},
		}},
		{name: "history on the first join", steps: []feedStep{
			{join: 7, from: 5, to: 8, want: "7:5 7:6 7:7 7:8"},
			{post: "7:9", want: "7:9"},
		}},
		{name: "duplicates are shown once", steps: []feedStep{
			{join: 7, from: 1, to: 2, want: "7:1 7:2"},
			{post: "7:2", want: ""},
			{post: "7:3", want: "7:3"},
			{join: 7, from: 1, to: 3, want: ""},
			{post: "7:3", want: ""},
		}},
		{name: "reordered", steps: []feedStep{
			{join: 7, want: ""},
			{post: "7:2", want: ""},
			{post: "7:3", want: ""},
			{post: "7:1", want: "7:1 7:2 7:3"},
		}},
		{name: "a gap filled by the next join", steps: []feedStep{
			{join: 7, want: ""},
			{post: "7:1", want: "7:1"},
			{post: "7:3", want: ""},
			{join: 7, from: 1, to: 3, want: "7:2 7:3"},
			{post: "7:4", want: "7:4"},
		}},
		{name: "a gap older than the recent posts is skipped", steps: []feedStep{
			{join: 7, want: ""},
			{post: "7:1", want: "7:1"},
			{post: "7:3", want: ""},
			{post: "7:4", want: ""},
			{join: 7, from: 10, to: 12, want: "7:3 7:4 7:10 7:11 7:12"},
			{post: "7:13", want: "7:13"},
		}},
		{name: "posts before the first join reply", steps: []feedStep{
			{post: "7:3", want: ""},
			{join: 7, from: 1, to: 2, want: "7:1 7:2 7:3"},
		}},
		{name: "a new epoch, its first post before the join reply", steps: []feedStep{
			{join: 7, from: 39, to: 40, want: "7:39 7:40"},
			{post: "9:2", want: ""},      // the room activated again; the reply of the Join that reached it is on its way
			{post: "7:41", want: "7:41"}, // the old activation is still the one joined
			{join: 9, from: 1, to: 1, want: "9:1 9:2"},
			{post: "7:42", want: ""}, // a straggler from the old activation
			{post: "9:3", want: "9:3"},
		}},
		{name: "a new epoch with no posts yet", steps: []feedStep{
			{join: 7, from: 1, to: 3, want: "7:1 7:2 7:3"},
			{join: 9, want: ""},
			{post: "9:1", want: "9:1"},
		}},
		{name: "stragglers are forgotten at the next join", steps: []feedStep{
			{join: 7, want: ""},
			{post: "5:1", want: ""},
			{post: "7:5", want: ""},
			{join: 7, from: 1, to: 3, want: "7:1 7:2 7:3"}, // 7:5 still waits for 7:4
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFeed()
			for i, st := range tt.steps {
				var shown []*chatpb.Post
				if st.post != "" {
					shown = f.posted(testPost(parseKey(st.post)))
				} else {
					r := &chatpb.JoinReply{Epoch: st.join}
					for seq := st.from; st.from > 0 && seq <= st.to; seq++ {
						r.Recent = append(r.Recent, testPost(st.join, seq))
					}
					shown = f.joined(r)
					// A Join reply settles everything: what the feed
					// still holds, it can still show.
					for k := range f.held {
						if k.epoch != f.epoch || k.seq <= f.last+1 {
							t.Fatalf("step %d %+v: the feed still holds %d:%d, which it should have shown or dropped", i, st, k.epoch, k.seq)
						}
					}
				}
				var got []string
				for _, p := range shown {
					got = append(got, fmt.Sprintf("%d:%d", p.GetEpoch(), p.GetSeq()))
				}
				if !slices.Equal(got, strings.Fields(st.want)) {
					t.Fatalf("step %d %+v: shown %q, want %q", i, st, got, st.want)
				}
			}
		})
	}
}

// TestFeedBound: a feed holds at most maxHeld posts behind a gap, and
// shows them all once the gap is filled.
func TestFeedBound(t *testing.T) {
	f := newFeed()
	f.joined(&chatpb.JoinReply{Epoch: 1})
	for seq := uint64(2); seq <= maxHeld+10; seq++ {
		if shown := f.posted(testPost(1, seq)); len(shown) != 0 {
			t.Fatalf("post %d showed %d posts behind the gap at 1", seq, len(shown))
		}
	}
	if len(f.held) != maxHeld {
		t.Fatalf("the feed holds %d posts, want at most %d", len(f.held), maxHeld)
	}
	shown := f.posted(testPost(1, 1))
	if len(shown) != maxHeld+1 || shown[0].GetSeq() != 1 || shown[maxHeld].GetSeq() != maxHeld+1 {
		t.Fatalf("the post filling the gap showed %d posts, want 1 to %d", len(shown), maxHeld+1)
	}
	if len(f.held) != 0 {
		t.Fatalf("the feed still holds %d posts", len(f.held))
	}
}
