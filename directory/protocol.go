package directory

import (
	"maps"
	"slices"
	"strconv"
	"sync"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Op is a directory operation between silos. The values match
// granary.v1.DirectoryOp on the wire.
type Op int

const (
	// OpLookup asks where Items[0].ID lives.
	OpLookup Op = iota + 1
	// OpRegister records Items[0] unless its grain has an entry already;
	// the answer carries the entry that holds.
	OpRegister
	// OpUnregister forgets Items[0], if it is the recorded entry.
	OpUnregister
	// OpHandoff gives the receiver entries it owns: a former owner's
	// entries, or a silo's own activations registered again after a
	// membership change. Each is merged first-wins; the answer lists the
	// items that lost, and the entries that beat them.
	OpHandoff
	// OpResync tells the receiver that the sender took it for dead and
	// purged the entries naming it: the receiver registers all its
	// activations again (Config.Local). No items.
	OpResync
)

func (o Op) String() string {
	switch o {
	case OpLookup:
		return "Lookup"
	case OpRegister:
		return "Register"
	case OpUnregister:
		return "Unregister"
	case OpHandoff:
		return "Handoff"
	case OpResync:
		return "Resync"
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Request is a directory request from one silo to another. A request
// belongs to its receiver once sent: neither side modifies it after Send.
type Request struct {
	Op Op
	// Items: Lookup, Register and Unregister carry exactly one (Lookup
	// reads only its ID); Handoff carries any number, a grain possibly
	// more than once, merged in order.
	Items []Item
	// Hops counts the silos that passed the request on because they did
	// not own its grains in their view of the ring.
	Hops int
}

// Response answers a Request.
type Response struct {
	Found    bool    // Lookup: found. Register: true. Unregister: the entry was removed.
	Entry    Entry   // Lookup/Register: the entry that holds
	Rejected []Item  // Handoff: items that lost to an entry recorded already
	Winners  []Entry // Handoff: the winners, parallel to Rejected
	// Handoff: items recorded nowhere (no owner in view, the hop bound, a
	// silo on the way unreachable); their silos send them again.
	Unplaced []Item
}

// Sender carries directory requests to other silos.
type Sender interface {
	// Send delivers req to silo `to` and calls done exactly once, on any
	// goroutine (possibly before Send returns), with the answer or an
	// error (a gRPC status error, Unavailable when `to` cannot be
	// reached). Must not block. The directory never sends to itself.
	Send(to string, req *Request, done func(*Response, error))
}

// ErrNoSilos is the error of a request when this silo's ring is empty: it
// was given no active silo, or none but itself and it left. Unavailable:
// the caller may retry once membership settles.
var ErrNoSilos = status.Error(codes.Unavailable, "directory: no active silo owns the grain: the ring is empty")

// errNoResponse is the error of a request whose Sender answered neither a
// Response nor an error.
var errNoResponse = status.Error(codes.Internal, "directory: the sender returned neither a response nor an error")

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "directory: "+format, args...)
}

// checkRequest reports what is wrong with a request another silo sent, as
// an InvalidArgument error.
func checkRequest(req *Request) error {
	if req == nil {
		return invalid("nil request")
	}
	if req.Hops < 0 {
		return invalid("%v request with %d hops", req.Op, req.Hops)
	}
	switch req.Op {
	case OpLookup, OpRegister, OpUnregister:
		if len(req.Items) != 1 {
			return invalid("%v request with %d items; want 1", req.Op, len(req.Items))
		}
		it := req.Items[0]
		if it.ID.IsZero() {
			return invalid("%v request for the zero grain ID", req.Op)
		}
		if req.Op != OpLookup && it.Entry.Silo == "" {
			return invalid("%v request for %v with an entry that names no silo", req.Op, it.ID)
		}
	case OpHandoff:
		for i, it := range req.Items {
			if it.ID.IsZero() {
				return invalid("Handoff item %d has the zero grain ID", i)
			}
			if it.Entry.Silo == "" {
				return invalid("Handoff item %d (%v) names no silo", i, it.ID)
			}
		}
	case OpResync:
		if len(req.Items) != 0 {
			return invalid("Resync request with %d items; want none", len(req.Items))
		}
	default:
		return invalid("unknown op %d", int(req.Op))
	}
	return nil
}

// Handle serves a request from silo `from` and calls reply exactly once,
// possibly before Handle returns. A request for a grain this silo does not
// own in its view is passed on to the owner it believes in, with Hops+1,
// and the answer relayed, while Hops < Config.MaxHops; past that it fails
// with Unavailable. Of a handoff, the items this silo owns are merged
// first-wins and the others passed on, grouped by the owner it believes
// in; items that cannot be placed, or that name a silo this one takes
// for dead, are answered as unplaced, for their holders to send again.
// Bad requests fail with InvalidArgument. Any goroutine.
func (d *Directory) Handle(from string, req *Request, reply func(*Response, error)) {
	if err := checkRequest(req); err != nil {
		d.log.Debug("directory: bad request", zap.String("from", from), zap.Error(err))
		reply(nil, err)
		return
	}
	switch req.Op {
	case OpHandoff:
		d.handleHandoff(req, reply)
		return
	case OpResync:
		d.log.Info("directory: another silo took this one for dead; registering every activation again", zap.String("from", from))
		d.RegisterAll()
		reply(&Response{}, nil)
		return
	}
	it := req.Items[0]
	d.mu.Lock()
	owner := d.ring.Load().OwnerOf(it.ID)
	if owner != d.self {
		d.mu.Unlock()
		d.passOn(owner, req, reply)
		return
	}
	var (
		resp Response
		err  error
	)
	switch req.Op {
	case OpLookup:
		resp.Entry, resp.Found = d.part.Lookup(it.ID)
		if !resp.Found && d.recoveringLocked(it.ID) {
			err = errRecovering(it.ID)
		}
	case OpRegister:
		resp.Entry, err = d.registerFreshLocked(it.ID, it.Entry)
		resp.Found = err == nil
	case OpUnregister:
		resp.Found = d.part.Unregister(it.ID, it.Entry)
	}
	d.mu.Unlock()
	if req.Op == OpUnregister && resp.Found {
		d.cache.Invalidate(it.ID, it.Entry)
	}
	if err != nil {
		reply(nil, err)
		return
	}
	reply(&resp, nil)
}

// passOn sends a single-grain request to owner, the silo this one believes
// owns its grain, and relays the answer; or refuses it at the hop bound or
// when the ring is empty. Any goroutine; mu not held.
func (d *Directory) passOn(owner string, req *Request, reply func(*Response, error)) {
	if owner == "" {
		reply(nil, ErrNoSilos)
		return
	}
	if req.Op == OpRegister {
		d.mu.Lock()
		_, dead := d.dead[req.Items[0].Entry.Silo]
		d.mu.Unlock()
		if dead {
			reply(nil, status.Errorf(codes.FailedPrecondition, "directory: cannot register %v: silo %s is dead", req.Items[0].ID, req.Items[0].Entry.Silo))
			return
		}
	}
	if req.Hops >= d.cfg.MaxHops {
		d.refused.Add(1)
		reply(nil, status.Errorf(codes.Unavailable,
			"directory: silo %s does not own %v in its view of the ring (%s does), and %d silos passed the %v request on already",
			d.self, req.Items[0].ID, owner, req.Hops, req.Op))
		return
	}
	d.forwarded.Add(1)
	d.sender.Send(owner, &Request{Op: req.Op, Items: req.Items, Hops: req.Hops + 1}, reply)
}

// handleHandoff merges a handoff's items that this silo owns, first-wins,
// and passes the others on, grouped by the owner it believes in, while the
// hop bound allows; it answers with every rejected item, its own and those
// of the silos it passed items to. Any goroutine; mu not held.
func (d *Directory) handleHandoff(req *Request, reply func(*Response, error)) {
	var (
		resp    Response
		away    = make(map[string][]Item)
		dropped int
	)
	d.mu.Lock()
	ring := d.ring.Load()
	for _, it := range req.Items {
		if _, dead := d.dead[it.Entry.Silo]; dead {
			// Either the entry outlived its silo, or the silo is alive
			// and this one has not heard yet (a partition has just
			// healed): back it goes, and a live holder sends it again.
			dropped++
			resp.Unplaced = append(resp.Unplaced, it)
			continue
		}
		switch o := ring.OwnerOf(it.ID); {
		case o == d.self:
			if w := d.part.Register(it.ID, it.Entry); w != it.Entry {
				resp.Rejected = append(resp.Rejected, it)
				resp.Winners = append(resp.Winners, w)
			}
		case o == "" || req.Hops >= d.cfg.MaxHops:
			dropped++
			resp.Unplaced = append(resp.Unplaced, it)
		default:
			away[o] = append(away[o], it)
		}
	}
	d.mu.Unlock()
	if dropped > 0 {
		d.dropped.Add(uint64(dropped))
		d.log.Debug("directory: handoff entries sent back: dead silo, no owner or hop bound", zap.Int("entries", dropped))
	}
	d.settleRejected(&resp)
	if len(away) == 0 {
		reply(&resp, nil)
		return
	}
	g := &gather{resp: resp, pending: len(away) + 1, reply: reply}
	for _, to := range slices.Sorted(maps.Keys(away)) {
		items := away[to]
		d.forwarded.Add(1)
		d.sender.Send(to, &Request{Op: OpHandoff, Items: items, Hops: req.Hops + 1}, func(r *Response, err error) {
			if err == nil && r == nil {
				err = errNoResponse
			}
			if err != nil {
				d.dropped.Add(uint64(len(items)))
				d.log.Debug("directory: passing handoff entries on failed; their silos are told to send them again",
					zap.String("to", to), zap.Int("entries", len(items)), zap.Error(err))
				r = &Response{Unplaced: items}
			} else {
				d.settleRejected(r)
			}
			g.add(r)
		})
	}
	g.add(nil) // the own part is done
}

// gather joins the answers of a handoff's parts and replies once all are
// in. Its callbacks run on any goroutine.
type gather struct {
	mu      sync.Mutex
	resp    Response // mu
	pending int      // mu; parts not yet in
	reply   func(*Response, error)
}

func (g *gather) add(r *Response) {
	g.mu.Lock()
	if r != nil {
		n := min(len(r.Rejected), len(r.Winners))
		g.resp.Rejected = append(g.resp.Rejected, r.Rejected[:n]...)
		g.resp.Winners = append(g.resp.Winners, r.Winners[:n]...)
		g.resp.Unplaced = append(g.resp.Unplaced, r.Unplaced...)
	}
	g.pending--
	done := g.pending == 0
	g.mu.Unlock()
	if done {
		g.reply(&g.resp, nil)
	}
}
