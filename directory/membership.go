package directory

import (
	"iter"
	"maps"
	"slices"

	"github.com/granaryio/granary/grain"
	"go.uber.org/zap"
)

// SetMembers installs a new view: active lists the ACTIVE silos (joining
// and shutting-down silos are not on the ring), and local yields this
// silo's own activations (it may be nil when there are none). Calls must
// not overlap: the membership layer calls it from one goroutine, in the
// order of its views. local is read before mu is taken, so it may hold the
// silo's own locks. Any goroutine.
//
// It rebuilds the ring, then:
//
//   - Entries of the own partition that another silo now owns are
//     extracted and handed to their new owners, in OpHandoff batches of at
//     most Config.HandoffBatch. Entries whose handoff fails are dropped:
//     the silos holding their activations register them again, as below.
//   - Each local activation whose owner changed between the old ring and
//     the new is registered again at its new owner (in the same handoff
//     batches, or in the own partition when that is this silo). This
//     rebuilds the entries lost with a dead owner, and finds duplicates
//     made while views disagreed: an activation whose entry meets another
//     recorded first is reported to Config.Lost.
//
// A silo missing from active, such as this one while it shuts down, owns
// nothing: with this silo alone, or no silo at all, the ring is empty and
// Lookup and Register fail with Unavailable. A silo named dead by SiloDead
// that appears in active again is taken to be alive.
func (d *Directory) SetMembers(active []string, local iter.Seq[Item]) {
	next := NewRing(active, d.cfg.VirtualNodes)
	prev := d.ring.Load()
	var moving []Item // own activations whose owner changes
	if local != nil && !prev.Equal(next) {
		for it := range local {
			if it.ID.IsZero() || it.Entry.Silo == "" {
				continue
			}
			if o := next.OwnerOf(it.ID); o != "" && o != prev.OwnerOf(it.ID) {
				moving = append(moving, it)
			}
		}
	}

	var (
		lost    []lostItem
		batches = make(map[string][]Item)
	)
	d.mu.Lock()
	for _, s := range next.Silos() {
		d.forgetDeadLocked(s)
	}
	if d.ring.Load().Equal(next) {
		d.mu.Unlock()
		return
	}
	d.ring.Store(next)
	if prev.Len() > 0 && d.cfg.RecoveryWindow > 0 {
		// Every change within the window keeps its own: a grain that
		// moved here with an earlier change may still be on its way
		// after a later one.
		d.recovering = append(d.recovering, recovery{prev: prev, until: d.cfg.Clock.Now().Add(d.cfg.RecoveryWindow)})
	}
	moved := d.part.Extract(func(id grain.ID) bool { return next.OwnerOf(id) == d.self })
	handed := make(map[grain.ID]Entry, len(moved))
	for _, it := range moved {
		handed[it.ID] = it.Entry
	}
	d.batchLocked(batches, moved, next)
	for _, it := range moving {
		switch o := next.OwnerOf(it.ID); {
		case o == d.self:
			lost = d.registerOwnLocked(it, lost)
		case handed[it.ID] == it.Entry:
			// The moved entry is this activation's: it travels once.
		default:
			batches[o] = append(batches[o], it)
		}
	}
	d.mu.Unlock()

	d.log.Debug("directory: new view",
		zap.Strings("active", next.Silos()), zap.Int("moved", len(moved)), zap.Int("reregistered", len(moving)))
	d.settle(lost, batches)
}

// HandOffAll takes this silo off its own ring and hands every entry of its
// partition to its owner on what remains. Call it when this silo leaves
// gracefully, once it takes no new activations; SetMembers with an active
// list that lacks this silo does the same, so a silo whose membership
// layer reports its own departure need not call it. Any goroutine.
func (d *Directory) HandOffAll() {
	batches := make(map[string][]Item)
	d.mu.Lock()
	next := d.ring.Load().Without(d.self)
	d.ring.Store(next)
	moved := d.part.Extract(func(grain.ID) bool { return false })
	d.batchLocked(batches, moved, next)
	d.mu.Unlock()
	d.sendHandoffs(batches)
}

// batchLocked adds items to batches, keyed by their owners on ring; items
// without an owner (an empty ring) are dropped. mu held.
func (d *Directory) batchLocked(batches map[string][]Item, items []Item, ring *Ring) {
	for _, it := range items {
		o := ring.OwnerOf(it.ID)
		if o == "" {
			d.dropped.Add(1)
			continue
		}
		batches[o] = append(batches[o], it)
	}
}

// SiloDead forgets silo, which failed or left: entries naming it are
// purged from the own partition and the cache, and refused from now on
// (messages sent before it died may still arrive with some). It does not
// change the ring: the membership layer first installs a view without the
// silo with SetMembers, then calls SiloDead, on every silo. A silo may be
// named dead while still on the ring (its entries are purged, requests
// still route to it and fail); this silo itself is never dead to itself.
// Member IDs must be unique per process: a restarted silo has a new one.
// A silo that joins should be told of the silos that died recently too
// (memberlist keeps them in its state a while), since messages they sent
// may still arrive. Any goroutine.
func (d *Directory) SiloDead(silo string) {
	if silo == "" || silo == d.self {
		return
	}
	d.mu.Lock()
	n := d.part.PurgeSilo(silo)
	if _, ok := d.dead[silo]; !ok {
		d.dead[silo] = struct{}{}
		d.deadOrder = append(d.deadOrder, silo)
		if len(d.deadOrder) > maxDead {
			delete(d.dead, d.deadOrder[0])
			d.deadOrder = d.deadOrder[1:]
		}
	}
	d.mu.Unlock()
	d.cache.InvalidateSilo(silo)
	d.log.Debug("directory: silo dead", zap.String("dead", silo), zap.Int("purged", n))
}

// forgetDeadLocked takes silo out of the dead set. mu held.
func (d *Directory) forgetDeadLocked(silo string) {
	if _, ok := d.dead[silo]; !ok {
		return
	}
	delete(d.dead, silo)
	d.deadOrder = slices.DeleteFunc(d.deadOrder, func(s string) bool { return s == silo })
	// A silo taken for dead is back: the entries naming it were purged,
	// and it registers them again (OpResync). Until they are in, no miss
	// is an answer, whichever grain it is about.
	if d.cfg.RecoveryWindow > 0 {
		d.recovering = append(d.recovering, recovery{until: d.cfg.Clock.Now().Add(d.cfg.RecoveryWindow)})
	}
}

type lostItem struct {
	item   Item
	winner Entry
}

// registerOwnLocked registers it, one of this silo's activations, in the
// own partition, and adds it to lost when another entry holds. mu held.
func (d *Directory) registerOwnLocked(it Item, lost []lostItem) []lostItem {
	if w, err := d.registerLocked(it.ID, it.Entry); err == nil && w != it.Entry {
		lost = append(lost, lostItem{it, w})
	}
	return lost
}

// settle reports lost to Config.Lost and sends batches, keyed by owner.
// mu not held.
func (d *Directory) settle(lost []lostItem, batches map[string][]Item) {
	for _, l := range lost {
		d.reportLost(l.item.ID, l.item.Entry, l.winner)
	}
	d.sendHandoffs(batches)
}

// reportLost tells Config.Lost that local, an activation of this silo,
// lost id's registration to winner, and caches the winner. mu not held.
func (d *Directory) reportLost(id grain.ID, local, winner Entry) {
	d.lost.Add(1)
	d.cache.Put(id, winner)
	d.log.Debug("directory: activation lost its registration",
		zap.Stringer("grain", id), zap.Stringer("local", local), zap.Stringer("winner", winner))
	if d.cfg.Lost != nil {
		d.cfg.Lost(id, local, winner)
	}
}

// sendHandoffs sends batches, keyed by owner, in messages of at most
// Config.HandoffBatch items. mu not held.
func (d *Directory) sendHandoffs(batches map[string][]Item) {
	for _, to := range slices.Sorted(maps.Keys(batches)) {
		items := batches[to]
		for len(items) > 0 {
			n := min(len(items), d.cfg.HandoffBatch)
			chunk := items[:n:n]
			items = items[n:]
			d.handedOff.Add(uint64(n))
			d.sender.Send(to, &Request{Op: OpHandoff, Items: chunk}, func(resp *Response, err error) {
				if err == nil && resp == nil {
					err = errNoResponse
				}
				if err != nil {
					own := d.keepForRetry(chunk)
					d.dropped.Add(uint64(len(chunk) - own))
					d.log.Warn("directory: handoff failed; its entries are dropped, and their silos register them again",
						zap.String("to", to), zap.Int("entries", len(chunk)), zap.Int("own, to retry", own), zap.Error(err))
					return
				}
				d.settleRejected(resp)
				if own := d.keepForRetry(resp.Unplaced); own > 0 {
					d.log.Debug("directory: own registrations not placed; sent again later", zap.String("to", to), zap.Int("entries", own))
				}
			})
		}
	}
}

// settleRejected reports the own activations among a handoff's rejected
// items to Config.Lost. Every silo a handoff passes through does this for
// its own, so each rejection is reported by the silo it concerns; the
// others learn it when they register their activations again. mu not
// held.
func (d *Directory) settleRejected(resp *Response) {
	if len(resp.Winners) != len(resp.Rejected) {
		d.log.Warn("directory: handoff answer with unpaired winners",
			zap.Int("rejected", len(resp.Rejected)), zap.Int("winners", len(resp.Winners)))
	}
	for i, r := range resp.Rejected {
		if i >= len(resp.Winners) {
			break
		}
		if w := resp.Winners[i]; r.Entry.Silo == d.self && w != r.Entry && !w.IsZero() {
			d.reportLost(r.ID, r.Entry, w)
		}
	}
}

// keepForRetry records the own activations among items, whose
// registration could not be delivered, for RetryRegistrations, and tells
// Config.RetryNeeded; it returns how many there were. mu not held.
func (d *Directory) keepForRetry(items []Item) (n int) {
	defer func() {
		if n > 0 && d.cfg.RetryNeeded != nil {
			d.cfg.RetryNeeded()
		}
	}()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, it := range items {
		if it.Entry.Silo != d.self {
			continue
		}
		if d.retry == nil {
			d.retry = make(map[grain.ID]Entry)
		}
		d.retry[it.ID] = it.Entry
		n++
	}
	return n
}

// RetryRegistrations sends again the registrations of this silo's own
// activations that a membership change moved to a new owner and that
// could not be delivered then (the owner was unreachable for a moment,
// or sent them back because it still took this silo for dead, as when a
// partition heals): without them an activation has no entry,
// and a duplicate made while views disagreed would never be found. The
// silo calls it periodically; a registration that fails again is kept
// for the next call, one whose activation ended (Unregister) is dropped,
// and one that meets another entry is reported to Config.Lost. Any
// goroutine.
func (d *Directory) RetryRegistrations() {
	var (
		lost    []lostItem
		batches = make(map[string][]Item)
	)
	d.mu.Lock()
	if len(d.retry) == 0 {
		d.mu.Unlock()
		return
	}
	ring := d.ring.Load()
	for id, e := range d.retry {
		switch o := ring.OwnerOf(id); o {
		case "":
			continue // no ring: keep it
		case d.self:
			lost = d.registerOwnLocked(Item{ID: id, Entry: e}, lost)
		default:
			batches[o] = append(batches[o], Item{ID: id, Entry: e})
		}
		delete(d.retry, id)
	}
	d.mu.Unlock()
	d.settle(lost, batches)
}

// AskResync tells silo, which this one took for dead and now sees alive
// again, to register all its activations again: their entries here, and
// at every silo that purged them, are gone. done gets the outcome; the
// caller asks again while it fails, since the first messages on a link
// just back may. Any goroutine.
func (d *Directory) AskResync(silo string, done func(error)) {
	if silo == d.self {
		done(nil)
		return
	}
	d.sender.Send(silo, &Request{Op: OpResync}, func(_ *Response, err error) {
		if err != nil {
			d.log.Debug("directory: asking a silo to register again failed", zap.String("silo", silo), zap.Error(err))
		}
		done(err)
	})
}

// RegisterAll registers every activation Config.Local yields at its
// owner, as after a membership change; losers go to Config.Lost, and
// registrations that could not be placed are sent again as
// RetryRegistrations says. A silo calls it when another asks (OpResync)
// and a while after a partition heals, to find the duplicates made on
// either side of it. Any goroutine; mu not held.
func (d *Directory) RegisterAll() {
	if d.cfg.Local == nil {
		return
	}
	var (
		lost    []lostItem
		batches = make(map[string][]Item)
		items   []Item
	)
	for it := range d.cfg.Local() {
		items = append(items, it)
	}
	d.mu.Lock()
	ring := d.ring.Load()
	for _, it := range items {
		switch o := ring.OwnerOf(it.ID); o {
		case "":
		case d.self:
			lost = d.registerOwnLocked(it, lost)
		default:
			batches[o] = append(batches[o], it)
		}
	}
	d.mu.Unlock()
	d.settle(lost, batches)
}
