package main

import (
	"cmp"
	"slices"

	chatpb "github.com/granaryio/granary/proto/examples/chat"
)

// A feed puts the posts of one room in the order its member shows them:
// by seq, each once, within the epoch of the room's activation the member
// last joined. It is pure: the client feeds it what the room's observer
// calls and Join replies bring, and shows what it returns; the caller
// serialises the calls.
//
// Posts arrive one way, so the runtime does not promise them all, nor in
// order, and they race with the Join replies: a post may come before the
// reply of the Join that subscribed to it, from an activation the member
// has not seen yet. So the feed holds what it cannot show yet (a post
// past a gap, or of an epoch no Join reply named) and lets each Join
// reply settle the rest: the reply names the room's epoch, and its recent
// posts follow each other without gaps up to the room's newest, so a gap
// that they do not fill is a post lost for good.
type feed struct {
	epoch uint64 // of the activation the member last joined; 0 before the first reply
	last  uint64 // the seq of the last post shown in epoch
	held  map[postKey]*chatpb.Post
}

// postKey names a post across the room's activations.
type postKey struct{ epoch, seq uint64 }

// maxHeld bounds the posts a feed holds. Past it, new ones are dropped,
// but for the one it waits for: the next Join reply brings back the
// recent ones.
const maxHeld = 1024

func newFeed() *feed { return &feed{held: map[postKey]*chatpb.Post{}} }

// posted takes a post the room sent and returns the posts to show now,
// in order.
func (f *feed) posted(p *chatpb.Post) []*chatpb.Post {
	k := postKey{p.GetEpoch(), p.GetSeq()}
	switch {
	case k.epoch == f.epoch && k.seq <= f.last:
		return nil // shown already
	case len(f.held) >= maxHeld && (k.epoch != f.epoch || k.seq != f.last+1):
		return nil // no room to hold it; the post that fills the gap always has
	}
	f.held[k] = p
	return f.flush(nil)
}

// joined takes the reply of a Join and returns the posts to show now, in
// order: on the first Join, or the first since the room activated again,
// the room's recent posts; else the posts that filled gaps. Posts held
// from before the newest recent one are shown too, in order, skipping
// the posts that never came.
func (f *feed) joined(r *chatpb.JoinReply) []*chatpb.Post {
	if r.GetEpoch() != f.epoch {
		f.epoch, f.last = r.GetEpoch(), 0
	}
	var out []*chatpb.Post
	if recent := r.GetRecent(); len(recent) > 0 {
		for _, p := range recent {
			if p.GetSeq() > f.last {
				f.held[postKey{f.epoch, p.GetSeq()}] = p
			}
		}
		if newest := recent[len(recent)-1].GetSeq(); newest > f.last {
			var keys []postKey
			for k := range f.held {
				if k.epoch == f.epoch && k.seq <= newest {
					keys = append(keys, k)
				}
			}
			slices.SortFunc(keys, func(a, b postKey) int { return cmp.Compare(a.seq, b.seq) })
			for _, k := range keys {
				out = append(out, f.held[k])
				delete(f.held, k)
			}
			f.last = newest
		}
	}
	// What is left of other epochs came from activations the member is
	// not in any more, and can never be shown.
	for k := range f.held {
		if k.epoch != f.epoch || k.seq <= f.last {
			delete(f.held, k)
		}
	}
	return f.flush(out)
}

// flush appends to out the held posts that follow the last shown one
// without a gap, and returns it.
func (f *feed) flush(out []*chatpb.Post) []*chatpb.Post {
	for {
		k := postKey{f.epoch, f.last + 1}
		p := f.held[k]
		if p == nil {
			return out
		}
		delete(f.held, k)
		f.last++
		out = append(out, p)
	}
}
