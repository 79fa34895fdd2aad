package local

import (
	"context"
	"sync"
	"time"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
)

// Cancellation across processes. A caller whose context can end marks
// its request cancellable; the receiving silo (or gateway) gives the call
// a context of its own, recorded in a cancelTable under the sender and
// the call ID, and a CANCEL envelope from the sender cancels it. A silo
// that forwards a call watches the call's context and sends CANCEL to
// the silo it forwarded the call to when it ends.

// RemoteCall names one request of one sender, a silo or a client: call
// IDs are unique per sending transport.
type RemoteCall struct {
	From string
	ID   uint64
}

// CancelTable holds what cancels each cancellable request that came from
// elsewhere and is not yet answered.
type CancelTable struct {
	mu sync.Mutex
	m  map[RemoteCall]context.CancelFunc
}

// Add gives c, a request from k.From, a context that the sender may
// cancel. The reply calls forgetCancel.
func (t *CancelTable) Add(c *Call, k RemoteCall) {
	ctx, cancel := context.WithCancel(context.Background())
	t.mu.Lock()
	if t.m == nil {
		t.m = map[RemoteCall]context.CancelFunc{}
	}
	t.m[k] = cancel
	t.mu.Unlock()
	c.Cancel, c.cancels, c.cancelKey = ctx, t, k
}

// Cancel cancels the request k, if it is still unanswered.
func (t *CancelTable) Cancel(k RemoteCall) {
	t.mu.Lock()
	cancel := t.m[k]
	delete(t.m, k)
	t.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// CancelAll cancels every request: the silo is closing.
func (t *CancelTable) CancelAll() {
	t.mu.Lock()
	m := t.m
	t.m = nil
	t.mu.Unlock()
	for _, cancel := range m {
		cancel()
	}
}

// ForgetCancel drops what cancels c, answered now, and releases its
// context (cancelling it: nothing runs under it any more).
func (c *Call) ForgetCancel() {
	if c.cancels != nil {
		c.cancels.Cancel(c.cancelKey)
	}
}

// CancelWatch sends CANCEL for a forwarded call when its context ends,
// until the reply stops it.
type CancelWatch struct {
	mu      sync.Mutex
	replied bool
	stop    func() bool
}

// Watch has the forwarded request id cancelled where it went when ctx
// ends, by a CANCEL that send sends, unless the reply (done) came first.
func (w *CancelWatch) Watch(ctx context.Context, id uint64, send func(*granaryv1.Envelope, time.Time) error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.replied {
		return
	}
	w.stop = context.AfterFunc(ctx, func() {
		send(&granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_CANCEL, CallId: id}, time.Time{})
	})
}

// Done stops the watch: the reply came.
func (w *CancelWatch) Done() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.replied = true
	if w.stop != nil {
		w.stop()
	}
}
