package membership

// Graceful leave.
//
// memberlist announces a leave with a dead message that the leaving node
// sends about itself, and receivers mark such a node StateLeft rather than
// StateDead. But the EventDelegate cannot see the difference in v0.7.0:
// NotifyLeave passes &nodeState.Node, and deadNode sets nodeState.State,
// a field that shadows Node.State, which so stays StateAlive for every
// node in the map. (serf has the same need for other reasons and solves
// it the same way: a leave intent of its own, gossiped before the leave.)
//
// So Leave first gossips a leave intent, a user message carrying the
// cluster hash and the member's ID, through memberlist's broadcast queue;
// every member that receives it for a member it sees reports EventLeft at
// once, forgets the member, and re-gossips the intent so it spreads like
// memberlist's own messages. Only when the intent has been transmitted
// its full retransmit count (or Leave's bound expires) does Leave call
// memberlist's Leave, whose dead message then finds the member already
// gone at the others. A member that gets the dead message first (the
// intent lost or overtaken) reports EventFailed: the safe side.
//
// A member reported as left is remembered in Memberlist.leaving until
// memberlist's own death notification for it arrives, so that a late
// alive or update about it does not bring it back.

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
)

// msgLeaveIntent is the first byte of a leave intent: msgLeaveIntent,
// the cluster hash (8 bytes, big endian), the leaving member's ID.
const msgLeaveIntent byte = 1

func encodeLeaveIntent(cluster uint64, id string) []byte {
	b := make([]byte, 0, 9+len(id))
	b = append(b, msgLeaveIntent)
	b = binary.BigEndian.AppendUint64(b, cluster)
	return append(b, id...)
}

// decodeLeaveIntent returns the ID a leave intent of cluster names.
func decodeLeaveIntent(b []byte, cluster uint64) (string, error) {
	switch {
	case len(b) < 10:
		return "", fmt.Errorf("membership: user message of %d bytes", len(b))
	case b[0] != msgLeaveIntent:
		return "", fmt.Errorf("membership: unknown user message type %d", b[0])
	case binary.BigEndian.Uint64(b[1:9]) != cluster:
		return "", fmt.Errorf("membership: leave intent of another cluster")
	}
	return string(b[9:]), nil
}

// intentBroadcast is a leave intent in memberlist's broadcast queue. done,
// if not nil, is closed when the queue is finished with it (transmitted
// its retransmit count, or replaced).
type intentBroadcast struct {
	id   string
	msg  []byte
	once sync.Once
	done chan struct{}
}

var _ memberlist.NamedBroadcast = (*intentBroadcast)(nil)

func (b *intentBroadcast) Name() string    { return "leave:" + b.id }
func (b *intentBroadcast) Message() []byte { return b.msg }

func (b *intentBroadcast) Invalidates(o memberlist.Broadcast) bool {
	nb, ok := o.(memberlist.NamedBroadcast)
	return ok && nb.Name() == b.Name()
}

// Finished is called by the queue, its lock held.
func (b *intentBroadcast) Finished() {
	if b.done != nil {
		b.once.Do(func() { close(b.done) })
	}
}

// observeLeaveIntent reports a member that announced its leave as
// EventLeft and re-gossips the intent. Anything else is logged and
// dropped. memberlist's goroutines; b is only valid during the call.
func (m *Memberlist) observeLeaveIntent(b []byte) {
	id, err := decodeLeaveIntent(b, m.cluster)
	if err != nil {
		m.log.Warn("membership: dropping user message", zap.Error(err))
		return
	}
	if id == m.id {
		return
	}
	m.mu.Lock()
	left := m.removeLocked(id, EventLeft)
	if left {
		m.leaving[id] = true
	}
	m.mu.Unlock()
	if !left {
		return
	}
	m.broadcasts.QueueBroadcast(&intentBroadcast{id: id, msg: append([]byte(nil), b...)})
}

// announceLeaveLocked gossips the leave intent, then memberlist's leave,
// then waits LeavePropagateDelay for the retransmissions. TCPTimeout, or
// ctx's deadline if sooner, bounds the announcement. lifeMu held.
func (m *Memberlist) announceLeaveLocked(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("membership: leave: not announced: %w", err)
	}
	// The announcement gets at most a TCPTimeout, however long ctx
	// allows: when every silo stops at once, no one is left to take the
	// news, and waiting for them would spend a whole shutdown budget.
	clock := m.cfg.Clock
	deadline := clock.Now().Add(m.cfg.TCPTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	m.mu.Lock()
	alone := len(m.others) == 0
	m.mu.Unlock()
	if !alone {
		intent := &intentBroadcast{id: m.id, msg: encodeLeaveIntent(m.cluster, m.id), done: make(chan struct{})}
		m.broadcasts.QueueBroadcast(intent)
		t := clock.NewTimer(clock.Until(deadline))
		select {
		case <-intent.done:
		case <-ctx.Done():
		case <-t.Chan():
		}
		t.Stop()
	}
	// memberlist's Leave waits forever given a timeout of 0.
	timeout := clock.Until(deadline)
	if timeout <= 0 || ctx.Err() != nil {
		return fmt.Errorf("membership: leave: not announced in time: %w", context.DeadlineExceeded)
	}
	if err := m.ml.Leave(timeout); err != nil {
		return fmt.Errorf("membership: leave: %w", err)
	}
	if alone {
		return nil
	}
	t := clock.NewTimer(m.cfg.LeavePropagateDelay)
	defer t.Stop()
	select {
	case <-t.Chan():
	case <-ctx.Done():
	}
	return nil
}
