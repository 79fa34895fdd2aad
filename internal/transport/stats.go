package transport

import (
	"math/bits"
	"sync/atomic"
)

// batchBounds is the number of finite buckets of Stats.BatchSizes: upper
// bounds of 1, 2, 4, ... 1,024 envelopes.
const batchBounds = 11

// counters are a Transport's traffic counters. The writers add to them
// once per frame sent, the readers once per frame delivered, so they cost
// a few atomic adds per frame, not per envelope. Any goroutine.
type counters struct {
	_ [64]byte // off the cache line of the fields before

	bytesSent     atomic.Uint64
	envelopesSent atomic.Uint64
	batchSizes    [batchBounds + 1]atomic.Uint64 // frames sent, by envelopes held

	bytesReceived     atomic.Uint64
	framesReceived    atomic.Uint64
	envelopesReceived atomic.Uint64
}

// batchBucket returns the Stats.BatchSizes bucket of a frame of n
// envelopes: the first whose bound is at least n.
func batchBucket(n int) int {
	if n <= 1 {
		return 0
	}
	return min(bits.Len(uint(n-1)), batchBounds)
}

// sent counts a frame of size bytes holding envs envelopes written to a
// stream.
func (c *counters) sent(size, envs int) {
	c.bytesSent.Add(uint64(size))
	c.envelopesSent.Add(uint64(envs))
	c.batchSizes[batchBucket(envs)].Add(1)
}

// received counts a frame of size bytes holding envs envelopes read from
// a stream.
func (c *counters) received(size int, envs uint64) {
	c.bytesReceived.Add(uint64(size))
	c.framesReceived.Add(1)
	c.envelopesReceived.Add(envs)
}

// Stats is a snapshot of the transport's state and counters. The counters
// cover the transport's life, every stream in both directions: requests
// and responses alike, the hello that opens a stream included. A batch is
// one frame: the envelopes a writer found queued and sent in one Send.
type Stats struct {
	Peers   int // known peers
	Streams int // streams up, both directions
	Pending int // calls waiting for a response
	// EnvelopesUnsent is the number of envelopes queued on the streams up
	// and not yet written (those the writer has just written may count
	// until it looks for more). Taken from the queues under their locks,
	// so the send path pays nothing for it.
	EnvelopesUnsent uint64

	BytesSent         uint64 // frame bytes written to streams
	BytesReceived     uint64 // frame bytes read from streams and delivered
	BatchesSent       uint64 // frames written
	BatchesReceived   uint64 // frames read and delivered
	EnvelopesSent     uint64 // envelopes in the frames written
	EnvelopesReceived uint64 // envelopes decoded from the frames read, malformed ones included

	// BatchSizes counts the frames written by their number of envelopes:
	// bucket i counts the frames of n envelopes with BatchBounds[i-1] < n
	// <= BatchBounds[i], and the last, past BatchBounds, larger ones. It
	// has len(BatchBounds)+1 counts, which add up to BatchesSent.
	BatchSizes  []uint64
	BatchBounds []uint64
}

// Stats returns the transport's counters. Any goroutine.
func (t *Transport) Stats() Stats {
	t.mu.Lock()
	st := Stats{Peers: len(t.peers)}
	eps := t.endpointsLocked()
	t.mu.Unlock()
	st.Streams = len(eps)
	for _, ep := range eps {
		st.Pending += ep.pendingCount()
		st.EnvelopesUnsent += uint64(ep.unsentCount())
	}
	// The counters are read in the reverse of the order sent and received
	// add them, so a frame counted in one is counted in those read after:
	// a snapshot that holds a frame's batch holds its envelopes and bytes.
	c := &t.stats
	st.BatchSizes = make([]uint64, batchBounds+1)
	st.BatchBounds = make([]uint64, batchBounds)
	for i := range st.BatchSizes {
		st.BatchSizes[i] = c.batchSizes[i].Load()
		st.BatchesSent += st.BatchSizes[i]
	}
	st.EnvelopesSent = c.envelopesSent.Load()
	st.BytesSent = c.bytesSent.Load()
	st.EnvelopesReceived = c.envelopesReceived.Load()
	st.BatchesReceived = c.framesReceived.Load()
	st.BytesReceived = c.bytesReceived.Load()
	for i := range st.BatchBounds {
		st.BatchBounds[i] = 1 << i
	}
	return st
}
