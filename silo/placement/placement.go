package placement

import (
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/granaryio/granary/grain"
)

// Strategy is a placement strategy. The silo maps a grain type's options
// onto it (see the package documentation); its zero value, Default, stands
// for Config.Default.
type Strategy int

const (
	// Default uses the Placer's Config.Default.
	Default Strategy = iota
	// Random picks a candidate uniformly at random.
	Random
	// PreferLocal picks the calling silo when it hosts the type, else a
	// random candidate.
	PreferLocal
	// Hash picks a candidate by rendezvous hashing of the grain ID: the
	// same ID gets the same silo while the candidates are the same, and
	// when a silo leaves only the grains it had move.
	Hash
	// ActivationCount picks the less loaded of two distinct random
	// candidates (the power of two choices), counting the activations the
	// silo last reported plus those placed on it since (see Placer.Placed).
	ActivationCount
	// SiloRole picks a random candidate among those with Request.Role.
	SiloRole
	// StatelessWorker picks the calling silo when it hosts the type, else
	// a random candidate: a stateless worker runs where it is called.
	StatelessWorker

	numStrategies
)

var strategyNames = [...]string{
	"default", "random", "prefer_local", "hash", "activation_count", "silo_role", "stateless_worker",
}

func (s Strategy) String() string {
	if s >= 0 && s < numStrategies {
		return strategyNames[s]
	}
	return "Strategy(" + strconv.Itoa(int(s)) + ")"
}

// Candidate is a silo that may receive an activation: an active member of
// the cluster that hosts the grain type.
type Candidate struct {
	// ID is the member ID, the name Place returns.
	ID string
	// Roles are the silo's roles, for SiloRole.
	Roles []string
	// Activations is the silo's activation count as last gossiped, for
	// ActivationCount. A Placer that has had a LoadReported for the silo
	// uses that report instead.
	Activations uint64
}

// Request asks where to activate one grain.
type Request struct {
	// Grain is the grain to activate; Hash hashes it, errors name its
	// type.
	Grain grain.ID
	// Strategy picks the silo; Default means Config.Default.
	Strategy Strategy
	// Role is the role a silo must have, for SiloRole.
	Role string
	// Local is the calling silo's member ID.
	Local string
	// LocalHosts reports that the calling silo is active and hosts the
	// grain type, so that PreferLocal and StatelessWorker may pick it.
	LocalHosts bool
	// Candidates are the active silos that host the grain type, the
	// calling one included when LocalHosts, in any order. Place only
	// reads it and keeps no reference to it.
	Candidates []Candidate
}

// Placer picks the silo on which a grain with no activation anywhere is
// activated. It does no I/O: the silo gathers the candidates from its
// membership view and tells the Placer about placements and load reports.
// All its methods may be called from any goroutine.
type Placer struct {
	def Strategy

	// rngMu guards rng. rng is nil for an unseeded Placer, which draws
	// from math/rand/v2's lock-free top-level functions instead.
	rngMu sync.Mutex
	rng   *rand.Rand

	// mu guards loads.
	mu    sync.Mutex
	loads map[string]load
}

// load is what a Placer knows of one silo's load beyond the request.
type load struct {
	reported    uint64 // activations of the latest report; valid if hasReport
	hasReport   bool
	sinceReport uint64 // placements recorded by Placed since that report
}

// New returns a Placer configured by cfg.
func New(cfg Config) (*Placer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Placer{def: cfg.Default, loads: make(map[string]load)}
	if cfg.Seed != 0 {
		p.rng = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	}
	return p, nil
}

// Place returns the member ID of the silo on which to activate
// req.Grain. It fails with a status error: Unavailable (ErrNoSilo) when
// there is no candidate, FailedPrecondition (ErrNoSiloWithRole) when no
// candidate has the role SiloRole asks for, and InvalidArgument
// (ErrBadRequest) for an unknown strategy, a SiloRole request without a
// role, a candidate without an ID, or LocalHosts with an empty Local.
// Place does not record the placement: call Placed once the activation is
// requested on the silo it returned. Any goroutine.
func (p *Placer) Place(req Request) (string, error) {
	s := req.Strategy
	if s == Default {
		s = p.def
	}
	for i := range req.Candidates {
		if req.Candidates[i].ID == "" {
			return "", badCandidate(req, i)
		}
	}
	switch s {
	case Random:
		return p.placeRandom(req)
	case PreferLocal, StatelessWorker:
		if req.LocalHosts {
			if req.Local == "" {
				return "", badRequest(req, "LocalHosts is set but Local is empty")
			}
			return req.Local, nil
		}
		return p.placeRandom(req)
	case Hash:
		return placeHash(req)
	case ActivationCount:
		return p.placeActivationCount(req)
	case SiloRole:
		return p.placeRole(req)
	}
	return "", badRequest(req, "unknown strategy "+s.String())
}

// placeRandom picks a candidate uniformly.
func (p *Placer) placeRandom(req Request) (string, error) {
	n := len(req.Candidates)
	if n == 0 {
		return "", noSilo(req)
	}
	return req.Candidates[p.intN(n)].ID, nil
}

// placeRole picks uniformly among the candidates with req.Role, without
// allocating: it counts them, draws k and walks to the k-th.
func (p *Placer) placeRole(req Request) (string, error) {
	if req.Role == "" {
		return "", badRequest(req, "silo_role placement needs a Role")
	}
	if len(req.Candidates) == 0 {
		return "", noSilo(req)
	}
	n := 0
	for i := range req.Candidates {
		if hasRole(req.Candidates[i].Roles, req.Role) {
			n++
		}
	}
	if n == 0 {
		return "", noSiloWithRole(req)
	}
	k := p.intN(n)
	for i := range req.Candidates {
		if hasRole(req.Candidates[i].Roles, req.Role) {
			if k == 0 {
				return req.Candidates[i].ID, nil
			}
			k--
		}
	}
	// Unreachable unless the caller changed Roles while Place read them.
	return "", noSiloWithRole(req)
}

func hasRole(roles []string, role string) bool {
	for _, r := range roles {
		if r == role {
			return true
		}
	}
	return false
}

// placeActivationCount is the power of two choices: of two distinct
// random candidates, the one with the smaller estimated load, a coin
// breaking ties.
func (p *Placer) placeActivationCount(req Request) (string, error) {
	n := len(req.Candidates)
	switch n {
	case 0:
		return "", noSilo(req)
	case 1:
		return req.Candidates[0].ID, nil
	}
	i, j, coin := p.pair(n)
	a, b := &req.Candidates[i], &req.Candidates[j]
	p.mu.Lock()
	la, lb := p.estimateLocked(a), p.estimateLocked(b)
	p.mu.Unlock()
	switch {
	case la < lb:
		return a.ID, nil
	case lb < la:
		return b.ID, nil
	case coin:
		return a.ID, nil
	}
	return b.ID, nil
}

// estimateLocked returns c's estimated activation count: its latest
// report (or the request's figure without one) plus the placements since.
// mu held.
func (p *Placer) estimateLocked(c *Candidate) uint64 {
	l, ok := p.loads[c.ID]
	base := c.Activations
	if ok && l.hasReport {
		base = l.reported
	}
	return satAdd(base, l.sinceReport)
}

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}

// Placed records that this silo asked silo id to activate a grain, so
// that until id's next load report ActivationCount counts it as one more
// activation there; without it, every placement between two gossip rounds
// would go to the silo that looked least loaded at the last one. Call it
// once per activation placed on another silo or on this one. Any
// goroutine.
func (p *Placer) Placed(id string) {
	p.mu.Lock()
	l := p.loads[id]
	l.sinceReport = satAdd(l.sinceReport, 1)
	p.loads[id] = l
	p.mu.Unlock()
}

// LoadReported records that silo id reported activations activations: the
// count replaces the Candidate.Activations of later requests for id, and
// the placements recorded by Placed until now are forgotten, as the
// report is taken to include them. Call it for every load report the silo
// receives, its own included. Any goroutine.
func (p *Placer) LoadReported(id string, activations uint64) {
	p.mu.Lock()
	p.loads[id] = load{reported: activations, hasReport: true}
	p.mu.Unlock()
}

// Forget drops what the Placer knows of silo id's load: call it when id
// leaves the cluster, so the Placer's memory stays bounded by the
// cluster's size. Any goroutine.
func (p *Placer) Forget(id string) {
	p.mu.Lock()
	delete(p.loads, id)
	p.mu.Unlock()
}

// intN returns a uniform int in [0, n); n > 0.
func (p *Placer) intN(n int) int {
	if p.rng == nil {
		return rand.IntN(n)
	}
	p.rngMu.Lock()
	k := p.rng.IntN(n)
	p.rngMu.Unlock()
	return k
}

// pair returns two distinct uniform indexes in [0, n) and a fair coin;
// n >= 2.
func (p *Placer) pair(n int) (i, j int, coin bool) {
	var r uint64
	if p.rng == nil {
		i, j, r = rand.IntN(n), rand.IntN(n-1), rand.Uint64()
	} else {
		p.rngMu.Lock()
		i, j, r = p.rng.IntN(n), p.rng.IntN(n-1), p.rng.Uint64()
		p.rngMu.Unlock()
	}
	if j >= i {
		j++
	}
	return i, j, r&1 == 1
}
