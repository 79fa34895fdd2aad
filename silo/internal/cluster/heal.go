package cluster

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// After a partition heals, each side holds activations the other side
// made meanwhile for the same grains, and the messages that would find
// them (the registrations each side sends again, the resync requests) go
// out on links that have just come back, to silos that may not yet have
// heard of the heal. Two things make sure they land:
//
//   - a silo asks each silo it took for dead and sees alive again to
//     register its activations again (OpResync), and asks again on every
//     load tick until one is answered, or refused as a request it will
//     never take (InvalidArgument, Unimplemented);
//   - a silo that sees such a silo come back registers all its own
//     activations again twice: healCheckFirst after the last such
//     return, when the first gossip about it has spread, and again after
//     two member-list syncs (membership's PushPullInterval, at least
//     healCheckSecondMin), by which time most silos have heard of it in
//     a small cluster (memberlist stretches the sync interval itself
//     above 32 silos; registrations an owner refuses meanwhile are sent
//     again anyway, as below). Each activation whose registration meets
//     another entry loses and deactivates.
//
// Registrations sent to a silo that still takes this one for dead come
// back unplaced and are sent again (Directory.RetryRegistrations).

// healCheckFirst is how long after a silo taken for dead comes back this
// one first registers its activations again.
const healCheckFirst = time.Second

// healCheckSecondMin is the least wait for the second check after the
// first, when member-list syncs are frequent or off.
const healCheckSecondMin = 2 * time.Second

// maxResyncAsks bounds the resync requests sent to one silo that does
// not answer: past it, the silo is taken to be gone again, which its
// membership will say soon.
const maxResyncAsks = 30

// healWork is what heals left to do. mu guards it; the load loop and the
// membership's goroutine use it.
type healWork struct {
	mu     sync.Mutex
	resync map[string]int // member → requests sent unanswered
	asking map[string]bool
	checks []time.Time // when to register every own activation again
}

// healed takes the return of member, which this silo took for dead: it
// asks member to register again and schedules this silo's own checks.
// Call it once the transport knows member again. Any goroutine.
func (cl *Cluster) healed(member string) {
	now := cl.s.Clock.Now()
	h := &cl.heal
	h.mu.Lock()
	if h.resync == nil {
		h.resync, h.asking = map[string]int{}, map[string]bool{}
	}
	h.resync[member] = 0
	second := healCheckFirst + max(2*cl.Cfg.Membership.PushPullInterval, healCheckSecondMin)
	h.checks = append(h.checks[:0], now.Add(healCheckFirst), now.Add(second))
	h.mu.Unlock()
	cl.askResync(member)
}

// askResync sends member a resync request unless one is in flight.
func (cl *Cluster) askResync(member string) {
	h := &cl.heal
	h.mu.Lock()
	n, pending := h.resync[member]
	if !pending || h.asking[member] || cl.Closed.Load() {
		h.mu.Unlock()
		return
	}
	if n >= maxResyncAsks {
		delete(h.resync, member)
		h.mu.Unlock()
		cl.log.Warn("a silo taken for dead and back never answered the request to register again; giving up",
			zap.String("member", member), zap.Int("requests", n))
		return
	}
	h.resync[member] = n + 1
	h.asking[member] = true
	h.mu.Unlock()
	cl.Dir.AskResync(member, func(err error) {
		retry := true // it did not arrive, or its answer did not
		switch status.Code(err) {
		case codes.OK:
			retry = false
		case codes.InvalidArgument, codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated:
			retry = false // it arrived and will never be taken
			cl.log.Warn("a silo taken for dead refused the request to register again", zap.String("member", member), zap.Error(err))
		}
		h.mu.Lock()
		delete(h.asking, member)
		if !retry {
			delete(h.resync, member)
		}
		h.mu.Unlock()
	})
}

// healTick asks again the silos that have not answered a resync request
// and, when a check is due, registers every own activation again. The
// load loop.
func (cl *Cluster) healTick() {
	now := cl.s.Clock.Now()
	h := &cl.heal
	h.mu.Lock()
	var ask []string
	for m := range h.resync {
		ask = append(ask, m)
	}
	due := false
	for len(h.checks) > 0 && !h.checks[0].After(now) {
		h.checks = h.checks[1:]
		due = true
	}
	h.mu.Unlock()
	for _, m := range ask {
		if _, alive := cl.View.Load().Known[m]; alive {
			cl.askResync(m)
		} else {
			h.mu.Lock()
			delete(h.resync, m) // gone again
			h.mu.Unlock()
		}
	}
	if due {
		cl.log.Info("a silo taken for dead came back: registering every activation again to find duplicates")
		cl.Dir.RegisterAll()
	}
}
