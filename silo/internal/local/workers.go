package local

import (
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/granaryio/granary/activation/admission"
	"github.com/granaryio/granary/activation/lifecycle"
	"github.com/granaryio/granary/grain"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// WorkerSet holds the local activations of one stateless-worker grain ID.
// Sets are never removed from the catalog: removing one could orphan an
// activation another goroutine is adding to it, and a set is small.
type WorkerSet struct {
	mu   sync.Mutex
	acts []*Activation
	// queued is the set's queue depth, which its queue limits bound: the
	// sum of its members' queues, moved by each member under its own
	// lock (see queuelimit.go).
	queued atomic.Int64
}

// Queued is the set's queue depth. Any goroutine.
func (ws *WorkerSet) Queued() int { return int(ws.queued.Load()) }

// workerFor picks the activation of a stateless worker that takes c: an
// idle one, else a new one while fewer than the type's bound exist, else
// the least loaded. Lock order: set, then activation.
func (s *Runtime) workerFor(id grain.ID, t *GrainType, c *Call) (a *Activation, queued bool) {
	v, ok := t.Sets.Load(id.Key)
	if !ok {
		if s.Stopping.Load() {
			return nil, false
		}
		v, _ = t.Sets.LoadOrStore(id.Key, &WorkerSet{})
	}
	ws := v.(*WorkerSet)
	ws.mu.Lock()
	var best *Activation
	bestLoad := math.MaxInt
	for _, a := range ws.acts {
		a.Mu.Lock()
		load := a.gate.Running() + a.QueuedLocked()
		usable := a.life.Usable() && !a.holdsChainLocked(c)
		a.Mu.Unlock()
		if usable && load < bestLoad {
			best, bestLoad = a, load
		}
	}
	var fresh *Activation
	if bestLoad > 0 && len(ws.acts) < t.Workers {
		s.Live.Add(1) // before looking at stopping: see activationFor
		if s.Stopping.Load() {
			s.unreserve()
		} else {
			fresh = s.newActivation(id, t)
			fresh.set = ws
			fresh.holdFirst(c) // held before it is published: see activationFor
			c.act = fresh
			ws.acts = append(ws.acts, fresh)
			best = fresh
		}
	}
	if best == nil {
		// Every worker is ending or in this call's chain: take one that
		// is not dead; submit retries or reports a deadlock.
		for _, a := range ws.acts {
			a.Mu.Lock()
			alive := a.life.State() != lifecycle.Dead
			a.Mu.Unlock()
			if alive {
				best = a
				break
			}
		}
	}
	ws.mu.Unlock()
	if fresh != nil {
		s.activated(fresh)
		return fresh, true
	}
	return best, false
}

// remove drops a from the set; it reports whether a was there.
func (ws *WorkerSet) remove(a *Activation) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for i, x := range ws.acts {
		if x == a {
			ws.acts = append(ws.acts[:i], ws.acts[i+1:]...)
			return true
		}
	}
	return false
}

func (ws *WorkerSet) Snapshot() []*Activation {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return append([]*Activation(nil), ws.acts...)
}

// kindOf is how a method's requests share an activation.
func kindOf(m *grain.MethodDesc) admission.Kind {
	switch {
	case m.AlwaysInterleave:
		return admission.Interleave
	case m.ReadOnly:
		return admission.ReadOnly
	}
	return admission.Exclusive
}

// maybeInterleave makes c, a request to a method of type t, interleave
// when t's MayInterleave predicate says it may (grain.WithMayInterleave).
// It runs on the receiving path, before c is offered to an activation: a
// request from another process is decoded here for the predicate, and
// keeps both forms, the decoded one for its turn and the encoded one in
// case it is relayed. A request that does not decode is left for its turn
// to refuse. Any goroutine, no lock held: the predicate is user code.
func (s *Runtime) maybeInterleave(t *GrainType, c *Call) {
	fn := t.Opts.MayInterleave
	if fn == nil || c.kind == admission.Interleave || isRuntimeMethod(c.Method) {
		return
	}
	idx := c.Method.Index
	if idx < 0 || idx >= len(t.Desc.Methods) || t.Desc.Methods[idx].Name != c.Method.Name {
		return // not one of t's methods: Route refuses it
	}
	m := &t.Desc.Methods[idx]
	req := c.Req
	if req == nil {
		if c.Raw == nil {
			return
		}
		req = m.NewRequest()
		if proto.Unmarshal(c.Raw, req) != nil {
			return
		}
		c.Req = req
	}
	if s.askMayInterleave(fn, m, c, req) {
		c.kind = admission.Interleave
	}
}

// askMayInterleave calls fn. A panic in it counts as false, so the
// request keeps its method's kind, and is logged: a bug in a hint about
// concurrency must not fail calls, nor crash the silo whose receiving
// path it runs on.
func (s *Runtime) askMayInterleave(fn grain.MayInterleaveFunc, m *grain.MethodDesc, c *Call, req proto.Message) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			ok = false
			s.Log.Error("MayInterleave panicked; the request keeps its method's kind",
				zap.Stringer("grain", c.ID), zap.String("method", m.Name),
				zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
		}
	}()
	return fn(m, req)
}
