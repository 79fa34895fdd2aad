package directory_test

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"testing"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/directory/directorytest"
	"github.com/granaryio/granary/grain"
)

// deliveryLimit bounds the messages one delivery command may deliver; only
// a livelock reaches it.
const deliveryLimit = 100_000

// cluster is a set of Directories on one directorytest.Network, with the
// activations of each silo as the silo would track them. It plays the
// silo's part: it registers the activations it makes, drops those that
// lose (Register's answer or Config.Lost), and passes its activations to
// SetMembers. Everything runs on the test goroutine: the network calls
// back only when the test delivers.
type cluster struct {
	t       testing.TB
	cfg     directory.Config
	net     *directorytest.Network
	dirs    map[string]*directory.Directory
	crashed map[string]bool
	// locals holds each silo's activations: registering, registered, or
	// not yet found lost.
	locals map[string]map[grain.ID]directory.Entry
	lost   []lostEvent // Config.Lost calls not yet checked

	lookups   map[call]result
	registers map[call]result

	// unregisterFailed makes a silo whose Register failed unregister its
	// entry, in case the owner recorded it before the answer was lost.
	unregisterFailed bool
}

type lostEvent struct {
	silo          string
	id            grain.ID
	local, winner directory.Entry
}

type call struct {
	silo string
	id   grain.ID
}

// result is the answer of a Lookup or Register; done is false while it is
// pending.
type result struct {
	done  bool
	e     directory.Entry
	found bool
	err   error
}

func newCluster(t testing.TB, cfg directory.Config) *cluster {
	return &cluster{
		t:         t,
		cfg:       cfg,
		net:       directorytest.NewNetwork(),
		dirs:      make(map[string]*directory.Directory),
		crashed:   make(map[string]bool),
		locals:    make(map[string]map[grain.ID]directory.Entry),
		lookups:   make(map[call]result),
		registers: make(map[call]result),
	}
}

// add starts a silo, not yet a member of any view.
func (c *cluster) add(silo string) {
	if _, ok := c.dirs[silo]; ok {
		c.t.Fatalf("silo %s added twice", silo)
	}
	cfg := c.cfg
	cfg.Lost = func(id grain.ID, local, winner directory.Entry) {
		c.lost = append(c.lost, lostEvent{silo, id, local, winner})
		if c.locals[silo][id] == local {
			delete(c.locals[silo], id)
		}
	}
	d, err := directory.New(cfg, silo, c.net.Sender(silo))
	if err != nil {
		c.t.Fatal(err)
	}
	c.dirs[silo] = d
	c.locals[silo] = make(map[grain.ID]directory.Entry)
	c.net.Attach(silo, d)
}

// live returns the silos that have not crashed, sorted.
func (c *cluster) live() []string {
	var s []string
	for name := range c.dirs {
		if !c.crashed[name] {
			s = append(s, name)
		}
	}
	slices.Sort(s)
	return s
}

// localItems yields a snapshot of silo's activations, in a fixed order.
func (c *cluster) localItems(silo string) iter.Seq[directory.Item] {
	items := make([]directory.Item, 0, len(c.locals[silo]))
	for id, e := range c.locals[silo] {
		items = append(items, directory.Item{ID: id, Entry: e})
	}
	slices.SortFunc(items, func(a, b directory.Item) int { return compareIDs(a.ID, b.ID) })
	return slices.Values(items)
}

// setMembers gives silo the view active.
func (c *cluster) setMembers(silo string, active []string) {
	c.dirs[silo].SetMembers(active, c.localItems(silo))
}

// register makes silo activate id as activation act and register it.
func (c *cluster) register(silo string, id grain.ID, act uint64) {
	e := directory.Entry{Silo: silo, Activation: act}
	c.locals[silo][id] = e
	k := call{silo, id}
	c.registers[k] = result{}
	c.dirs[silo].Register(id, e, func(w directory.Entry, err error) {
		c.registers[k] = result{done: true, e: w, found: err == nil, err: err}
		if err == nil && w == e {
			return
		}
		if c.locals[silo][id] == e {
			delete(c.locals[silo], id) // lost: forward to the winner; failed: give up
		}
		if err != nil && c.unregisterFailed {
			c.dirs[silo].Unregister(id, e)
		}
	})
}

func (c *cluster) lookup(silo string, id grain.ID) {
	k := call{silo, id}
	c.lookups[k] = result{}
	c.dirs[silo].Lookup(id, func(e directory.Entry, found bool, err error) {
		c.lookups[k] = result{done: true, e: e, found: found, err: err}
	})
}

// deactivate makes silo drop its activation e of id and unregister it.
func (c *cluster) deactivate(silo string, id grain.ID, e directory.Entry) {
	if c.locals[silo][id] == e {
		delete(c.locals[silo], id)
	}
	c.dirs[silo].Unregister(id, e)
}

// crash stops silo: the network fails what it was serving and drops what
// is sent to it; its activations are gone.
func (c *cluster) crash(silo string) {
	c.crashed[silo] = true
	c.net.Crash(silo)
	clear(c.locals[silo])
}

// dead tells every live silo that silo died.
func (c *cluster) dead(silo string) {
	for _, s := range c.live() {
		c.dirs[s].SiloDead(silo)
	}
}

type holder struct {
	silo  string // whose partition
	entry directory.Entry
}

// entries returns every live silo's entry for id.
func (c *cluster) entries(id grain.ID) []holder {
	var hs []holder
	for _, s := range c.live() {
		for _, it := range c.dirs[s].Entries() {
			if it.ID == id {
				hs = append(hs, holder{s, it.Entry})
			}
		}
	}
	return hs
}

// checkConverged checks the directory's promise at quiescence, once every
// live silo has the same view: each grain has at most one entry, at its
// owner, naming a live silo; and, if strict, every activation a silo holds
// is its grain's entry (those that lost were dropped when told).
func (c *cluster) checkConverged(strict bool) error {
	if n := c.net.Len(); n != 0 {
		return fmt.Errorf("%d messages still queued", n)
	}
	if n := c.net.Open(); n != 0 {
		return fmt.Errorf("%d requests never answered", n)
	}
	live := c.live()
	if len(live) == 0 {
		return nil
	}
	ring := c.dirs[live[0]].Ring()
	all := make(map[grain.ID][]holder)
	for _, s := range live {
		if r := c.dirs[s].Ring(); !r.Equal(ring) {
			return fmt.Errorf("%s has view %v, %s has %v", live[0], ring.Silos(), s, r.Silos())
		}
		for _, it := range c.dirs[s].Entries() {
			all[it.ID] = append(all[it.ID], holder{s, it.Entry})
		}
	}
	for _, id := range slices.SortedFunc(maps.Keys(all), compareIDs) {
		hs := all[id]
		if len(hs) > 1 {
			return fmt.Errorf("%v has %d entries: %v", id, len(hs), hs)
		}
		if o := ring.OwnerOf(id); hs[0].silo != o {
			return fmt.Errorf("%v's entry %v is at %s, but %s owns it", id, hs[0].entry, hs[0].silo, o)
		}
		if c.crashed[hs[0].entry.Silo] {
			return fmt.Errorf("%v's entry %v names a crashed silo", id, hs[0].entry)
		}
	}
	if !strict {
		return nil
	}
	for _, s := range live {
		for _, it := range slices.Collect(c.localItems(s)) {
			if hs := all[it.ID]; len(hs) == 0 || hs[0].entry != it.Entry {
				return fmt.Errorf("%s holds %v, not told it lost, but the entry is %v", s, it, hs)
			}
		}
	}
	return nil
}
