package storage

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/granaryio/granary/grain"
)

// The stream log operations Memory's fault hook sees, with the zero grain
// ID.
const (
	OpAppend       Op = "Append"
	OpRead         Op = "Read"
	OpBounds       Op = "Bounds"
	OpOffsetAt     Op = "OffsetAt"
	OpTrim         Op = "Trim"
	OpSaveCursor   Op = "SaveCursor"
	OpCursor       Op = "Cursor"
	OpDeleteCursor Op = "DeleteCursor"
)

// memPartition is one partition's log in Memory.
type memPartition struct {
	// recs are the records kept, oldest first: recs[i].Offset is
	// next-len(recs)+i, since trimming removes only from the front.
	recs    []StreamRecord
	next    uint64    // the offset the next append assigns, from 1
	bytes   int64     // the payload bytes of recs
	last    time.Time // the time of the last append: times never go back
	cursors map[string]uint64
}

func (mp *memPartition) oldest() uint64 {
	if len(mp.recs) == 0 {
		return 0
	}
	return mp.recs[0].Offset
}

// SetClock sets the clock the stream log's appends take their times from;
// nil means SystemClock.
func (m *Memory) SetClock(c Clock) {
	m.mu.Lock()
	m.clock = c
	m.mu.Unlock()
}

// enterStream runs enter for a stream log operation on p; it returns with
// mu held when the checks pass.
func (m *Memory) enterStream(ctx context.Context, op Op, p StreamPartition) error {
	if err := CheckPartition(p); err != nil {
		return err
	}
	return m.enter(ctx, op, grain.ID{})
}

// partitionLocked returns p's log, made empty if there is none yet and
// create is set; nil if there is none and create is not. mu held.
func (m *Memory) partitionLocked(p StreamPartition, create bool) *memPartition {
	mp := m.streams[p]
	if mp == nil && create {
		mp = &memPartition{next: 1}
		m.streams[p] = mp
	}
	return mp
}

// Append implements StreamLog.
func (m *Memory) Append(ctx context.Context, p StreamPartition, recs []StreamRecord) error {
	if err := CheckRecords(p, recs, m.maxSize); err != nil {
		return err
	}
	if err := m.enterStream(ctx, OpAppend, p); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	mp := m.partitionLocked(p, true)
	clock := m.clock
	if clock == nil {
		clock = SystemClock{}
	}
	// UTC drops the monotonic reading, which the durable stores cannot
	// keep either.
	now := clock.Now().UTC()
	if now.Before(mp.last) {
		now = mp.last
	}
	mp.last = now
	for i := range recs {
		recs[i].Offset, recs[i].Time = mp.next, now
		mp.next++
		r := recs[i]
		r.Payload = slices.Clone(r.Payload)
		mp.recs = append(mp.recs, r)
		mp.bytes += int64(len(r.Payload))
	}
	return nil
}

// Read implements StreamLog.
func (m *Memory) Read(ctx context.Context, p StreamPartition, from uint64, max int) ([]StreamRecord, error) {
	if err := CheckReadMax(p, max); err != nil {
		return nil, err
	}
	if err := m.enterStream(ctx, OpRead, p); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	mp := m.partitionLocked(p, false)
	if mp == nil || len(mp.recs) == 0 || from >= mp.next {
		return nil, nil
	}
	i := 0
	if o := mp.oldest(); from > o {
		i = int(from - o)
	}
	out := make([]StreamRecord, 0, min(max, len(mp.recs)-i))
	for _, r := range mp.recs[i:min(len(mp.recs), i+max)] {
		r.Payload = slices.Clone(r.Payload)
		out = append(out, r)
	}
	return out, nil
}

// Bounds implements StreamLog.
func (m *Memory) Bounds(ctx context.Context, p StreamPartition) (oldest, next uint64, err error) {
	if err := m.enterStream(ctx, OpBounds, p); err != nil {
		return 0, 0, err
	}
	defer m.mu.Unlock()
	mp := m.partitionLocked(p, false)
	if mp == nil {
		return 0, 1, nil
	}
	return mp.oldest(), mp.next, nil
}

// OffsetAt implements StreamLog.
func (m *Memory) OffsetAt(ctx context.Context, p StreamPartition, t time.Time) (uint64, error) {
	if err := m.enterStream(ctx, OpOffsetAt, p); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	mp := m.partitionLocked(p, false)
	if mp == nil {
		return 1, nil
	}
	// Times never decrease along the log, so the records before t are a
	// prefix.
	i := sort.Search(len(mp.recs), func(i int) bool { return !mp.recs[i].Time.Before(t) })
	if i == len(mp.recs) {
		return mp.next, nil
	}
	return mp.recs[i].Offset, nil
}

// Trim implements StreamLog.
func (m *Memory) Trim(ctx context.Context, p StreamPartition, olderThan time.Time, maxBytes int64) (int, error) {
	if err := CheckTrimBytes(p, maxBytes); err != nil {
		return 0, err
	}
	if err := m.enterStream(ctx, OpTrim, p); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	mp := m.partitionLocked(p, false)
	if mp == nil {
		return 0, nil
	}
	n := 0
	for n < len(mp.recs) {
		r := &mp.recs[n]
		if !r.Time.Before(olderThan) && (maxBytes == 0 || mp.bytes <= maxBytes) {
			break
		}
		mp.bytes -= int64(len(r.Payload))
		n++
	}
	// Drop the removed records' payloads now; the array's front goes once
	// a later append moves the slice.
	clear(mp.recs[:n])
	mp.recs = mp.recs[n:]
	return n, nil
}

// SaveCursor implements StreamLog.
func (m *Memory) SaveCursor(ctx context.Context, p StreamPartition, sub string, offset uint64) error {
	if err := CheckSubscription(p, sub); err != nil {
		return err
	}
	if err := m.enterStream(ctx, OpSaveCursor, p); err != nil {
		return err
	}
	defer m.mu.Unlock()
	mp := m.partitionLocked(p, true)
	if mp.cursors == nil {
		mp.cursors = make(map[string]uint64)
	}
	if stored, ok := mp.cursors[sub]; !ok || offset > stored {
		mp.cursors[sub] = offset
	}
	return nil
}

// Cursor implements StreamLog.
func (m *Memory) Cursor(ctx context.Context, p StreamPartition, sub string) (uint64, bool, error) {
	if err := CheckSubscription(p, sub); err != nil {
		return 0, false, err
	}
	if err := m.enterStream(ctx, OpCursor, p); err != nil {
		return 0, false, err
	}
	defer m.mu.Unlock()
	mp := m.partitionLocked(p, false)
	if mp == nil {
		return 0, false, nil
	}
	offset, ok := mp.cursors[sub]
	return offset, ok, nil
}

// DeleteCursor implements StreamLog.
func (m *Memory) DeleteCursor(ctx context.Context, p StreamPartition, sub string) error {
	if err := CheckSubscription(p, sub); err != nil {
		return err
	}
	if err := m.enterStream(ctx, OpDeleteCursor, p); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if mp := m.partitionLocked(p, false); mp != nil {
		delete(mp.cursors, sub)
	}
	return nil
}
