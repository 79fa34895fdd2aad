package main

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// addReply is what the load generator keeps of a Counter.Add reply.
type addReply struct {
	Value      int64  // the count after the Add
	Silo       string // the member ID of the silo that ran it
	Activation uint64 // the activation that ran it, unique within its silo
}

// activationKey names one activation in the cluster: a member ID is new
// at every process start, and an activation ID unique within its silo.
type activationKey struct {
	silo string
	id   uint64
}

// counterTally is what the generator knows of one counter. Every Add it
// sends adds 1, and nothing else adds to the counter (its key is new to
// the run), so if the cluster forgets no acknowledged Add:
//
//   - a reply to an Add sent after k Adds were acknowledged, or after a
//     reply with count v arrived, carries a count of at least max(k, v)+1
//     (more when an Add that failed was counted anyway);
//   - no count exceeds the Adds sent so far, or one was counted twice.
//
// It also remembers which activations answered, and when each answered
// first, to catch two activations of the counter alive at once.
type counterTally struct {
	sent, acked int64
	last        int64 // the highest count acknowledged
	first       map[activationKey]firstReply
	dupSeen     map[activationKey]bool
}

// firstReply is when an activation's first reply was asked for and when
// it arrived: the activation was alive at some moment in between.
type firstReply struct {
	sent, received time.Time
}

// ticket is one Add in flight: when it was sent and the lower bound its
// reply must meet.
type ticket struct {
	key    string
	sentAt time.Time
	bound  int64
}

// verdict is what one reply revealed.
type verdict struct {
	lost      bool // its count fell below the bound: an acknowledged Add was forgotten
	over      bool // its count exceeds the Adds sent: an Add was counted twice
	duplicate bool // it came from an activation already superseded by a newer one
}

// ledger keeps the tallies of every counter. Its methods may be called
// from any goroutine.
type ledger struct {
	mu      sync.Mutex
	tallies map[string]*counterTally
	// open lets send take keys the ledger has not seen: the overload
	// soak makes a new key for most of its calls. A closed ledger knows
	// its keys from the start, and any other is a bug of the generator.
	open bool
}

func newLedger(keys []string) *ledger {
	l := &ledger{tallies: make(map[string]*counterTally, len(keys))}
	for _, k := range keys {
		l.tallies[k] = &counterTally{}
	}
	return l
}

// newOpenLedger returns a ledger that takes each key at its first send.
func newOpenLedger() *ledger {
	return &ledger{tallies: map[string]*counterTally{}, open: true}
}

// send records an Add of 1 about to be sent to key at now.
func (l *ledger) send(key string, now time.Time) ticket {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tally(key)
	t.sent++
	return ticket{key: key, sentAt: now, bound: max(t.acked, t.last) + 1}
}

// ack records the reply to tk, received at now, and says what it
// revealed.
//
// A reply from activation X to a call sent at s reveals a duplicate
// when another activation Y of the counter had its first call sent after
// X's first reply arrived, and its first reply arrive before s. Then X
// was alive when it first answered, Y ran a call after that, and X ran
// one after Y's: X was alive throughout, Y with it. Replies that merely
// cross (the move of a counter from X to Y, with X's last reply slow)
// reveal nothing. Each activation counts once.
func (l *ledger) ack(tk ticket, r addReply, now time.Time) verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tally(tk.key)
	var v verdict
	v.lost = r.Value < tk.bound
	v.over = r.Value > t.sent
	t.acked++
	t.last = max(t.last, r.Value)
	a := activationKey{r.Silo, r.Activation}
	first, seen := t.first[a]
	if !seen {
		// The maps are made at the first reply: the soak's ledger holds a
		// tally for each of its hundreds of thousands of keys, most of
		// which are sent one Add.
		if t.first == nil {
			t.first, t.dupSeen = map[activationKey]firstReply{}, map[activationKey]bool{}
		}
		t.first[a] = firstReply{sent: tk.sentAt, received: now}
		return v
	}
	if t.dupSeen[a] {
		return v
	}
	for other, o := range t.first {
		if other != a && o.sent.After(first.received) && o.received.Before(tk.sentAt) {
			t.dupSeen[a] = true
			v.duplicate = true
			break
		}
	}
	return v
}

// tally returns key's tally; mu held. A closed ledger's keys are fixed
// at newLedger: any other is a bug of the generator. An open one makes
// the tally.
func (l *ledger) tally(key string) *counterTally {
	t, ok := l.tallies[key]
	if !ok {
		if !l.open {
			panic(fmt.Sprintf("e2e: ledger: counter %q is not one of the run's", key))
		}
		t = &counterTally{}
		l.tallies[key] = t
	}
	return t
}

// acknowledged returns, sorted, the keys with at least one acknowledged
// Add: the only ones whose count the cluster can have lost.
func (l *ledger) acknowledged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []string
	for k, t := range l.tallies {
		if t.acked > 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// finalCheck is the outcome of reading every counter at the end.
type finalCheck struct {
	Counters int   // counters read
	Acked    int64 // acknowledged Adds, over all counters
	Sent     int64 // Adds sent, acknowledged or not
	Final    int64 // the counts read, summed
	// LostCounters counts the counters whose final count is below their
	// acknowledged Adds (or an acknowledged count), and LostAdds the
	// Adds missing from them.
	LostCounters int
	LostAdds     int64
	// OverCounters counts the counters whose final count exceeds the
	// Adds sent to them.
	OverCounters int
	// Unread lists the counters that could not be read, with the error.
	Unread []string
}

// final compares the counts read at the end (counts, by key; a key
// missing was not read, errs says why) against the tallies.
func (l *ledger) final(counts map[string]int64, errs map[string]error) finalCheck {
	l.mu.Lock()
	keys := slices.Sorted(maps.Keys(l.tallies))
	l.mu.Unlock()
	return l.finalOf(keys, counts, errs)
}

// finalOf is final over keys only: Acked and Sent sum theirs, and a key
// of them missing from counts is unread.
func (l *ledger) finalOf(keys []string, counts map[string]int64, errs map[string]error) finalCheck {
	l.mu.Lock()
	defer l.mu.Unlock()
	var f finalCheck
	for _, key := range keys {
		t := l.tally(key)
		f.Acked += t.acked
		f.Sent += t.sent
		v, ok := counts[key]
		if !ok {
			f.Unread = append(f.Unread, fmt.Sprintf("%s: %v", key, errs[key]))
			continue
		}
		f.Counters++
		f.Final += v
		if bound := max(t.acked, t.last); v < bound {
			f.LostCounters++
			f.LostAdds += bound - v
		}
		if v > t.sent {
			f.OverCounters++
		}
	}
	return f
}
