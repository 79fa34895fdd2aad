package storage

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/granaryio/granary/grain"
)

// ErrUnavailable is what Memory's operations fail with while it is down
// (SetDown).
var ErrUnavailable = errors.New("storage: memory store is down")

// Op names a provider operation, for Memory's fault hook.
type Op string

// The operations Memory's fault hook sees.
const (
	OpReadState      Op = "ReadState"
	OpWriteState     Op = "WriteState"
	OpClearState     Op = "ClearState"
	OpUpsertReminder Op = "UpsertReminder"
	OpRemoveReminder Op = "RemoveReminder"
	OpGrainReminders Op = "GrainReminders"
	OpRangeReminders Op = "RangeReminders"
)

// Memory is a Provider, ReminderTable and StreamLog that keeps everything
// in memory: for tests, and for grains whose state may be lost with the
// process. It keeps the ETag and stream log contracts as the durable
// providers do, and can be made to fail (SetDown), or to fail, delay or
// block chosen operations (SetFault), so tests can take the store away
// from a running silo. Its stream log takes its times from SetClock's
// clock.
type Memory struct {
	maxSize int

	mu        sync.Mutex
	states    map[stateKey]memRecord
	reminders map[stateKey]ReminderEntry
	down      bool
	fault     func(ctx context.Context, op Op, id grain.ID) error
	version   uint64 // reminders' versions, store-wide
	streams   map[StreamPartition]*memPartition
	clock     Clock // nil: SystemClock
}

type stateKey struct {
	id   grain.ID
	name string
}

type memRecord struct {
	version uint64
	data    []byte // nil: cleared
}

// NewMemory returns an empty store that refuses states over maxStateSize
// bytes (0: DefaultMaxStateSize).
func NewMemory(maxStateSize int) *Memory {
	if maxStateSize <= 0 {
		maxStateSize = DefaultMaxStateSize
	}
	return &Memory{
		maxSize:   maxStateSize,
		states:    make(map[stateKey]memRecord),
		reminders: make(map[stateKey]ReminderEntry),
		streams:   make(map[StreamPartition]*memPartition),
	}
}

// SetDown takes the store down (every operation fails with ErrUnavailable)
// or brings it back.
func (m *Memory) SetDown(down bool) {
	m.mu.Lock()
	m.down = down
	m.mu.Unlock()
}

// SetFault sets a hook that runs before every operation, outside the
// store's lock: an error it returns fails the operation, and it may block
// to delay it. nil removes it. The hook's id is the zero ID for operations
// of no one grain: RangeReminders and the stream log's.
func (m *Memory) SetFault(f func(ctx context.Context, op Op, id grain.ID) error) {
	m.mu.Lock()
	m.fault = f
	m.mu.Unlock()
}

// enter runs the checks every operation starts with, and returns with mu
// held when they pass.
func (m *Memory) enter(ctx context.Context, op Op, id grain.ID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	f := m.fault
	m.mu.Unlock()
	if f != nil {
		if err := f(ctx, op, id); err != nil {
			return err
		}
	}
	m.mu.Lock()
	if m.down {
		m.mu.Unlock()
		return ErrUnavailable
	}
	return nil
}

// ReadState implements Provider.
func (m *Memory) ReadState(ctx context.Context, id grain.ID, name string) (Record, error) {
	if err := m.enter(ctx, OpReadState, id); err != nil {
		return Record{}, err
	}
	defer m.mu.Unlock()
	r, ok := m.states[stateKey{id, name}]
	if !ok {
		return Record{}, nil
	}
	return Record{Data: slices.Clone(r.data), ETag: FormatVersion(r.version), Exists: r.data != nil}, nil
}

// WriteState implements Provider.
func (m *Memory) WriteState(ctx context.Context, id grain.ID, name string, data []byte, etag string) (string, error) {
	if err := CheckSize(id, name, data, m.maxSize); err != nil {
		return "", err
	}
	if err := m.enter(ctx, OpWriteState, id); err != nil {
		return "", err
	}
	defer m.mu.Unlock()
	k := stateKey{id, name}
	r := m.states[k]
	if err := m.checkLocked(id, name, r, etag); err != nil {
		return "", err
	}
	if data == nil {
		data = []byte{}
	}
	r.version++
	r.data = slices.Clone(data)
	m.states[k] = r
	return FormatVersion(r.version), nil
}

// ClearState implements Provider.
func (m *Memory) ClearState(ctx context.Context, id grain.ID, name string, etag string) (string, error) {
	if err := m.enter(ctx, OpClearState, id); err != nil {
		return "", err
	}
	defer m.mu.Unlock()
	k := stateKey{id, name}
	r, ok := m.states[k]
	if err := m.checkLocked(id, name, r, etag); err != nil {
		return "", err
	}
	if !ok {
		return "", nil
	}
	r.version++
	r.data = nil
	m.states[k] = r
	return FormatVersion(r.version), nil
}

func (m *Memory) checkLocked(id grain.ID, name string, r memRecord, etag string) error {
	if v, ok := ParseVersion(etag); !ok || v != r.version {
		return Mismatch(id, name, FormatVersion(r.version), etag)
	}
	return nil
}

// UpsertReminder implements ReminderTable.
func (m *Memory) UpsertReminder(ctx context.Context, r ReminderEntry) (string, error) {
	if err := CheckID(r.Grain); err != nil {
		return "", err
	}
	if err := m.enter(ctx, OpUpsertReminder, r.Grain); err != nil {
		return "", err
	}
	defer m.mu.Unlock()
	m.version++
	r.ETag = FormatVersion(m.version)
	m.reminders[stateKey{r.Grain, r.Name}] = r
	return r.ETag, nil
}

// RemoveReminder implements ReminderTable.
func (m *Memory) RemoveReminder(ctx context.Context, id grain.ID, name, etag string) error {
	if err := m.enter(ctx, OpRemoveReminder, id); err != nil {
		return err
	}
	defer m.mu.Unlock()
	k := stateKey{id, name}
	r, ok := m.reminders[k]
	switch {
	case !ok:
		return nil
	case etag != "" && etag != r.ETag:
		return Mismatch(id, "reminder "+name, r.ETag, etag)
	}
	delete(m.reminders, k)
	return nil
}

// GrainReminders implements ReminderTable.
func (m *Memory) GrainReminders(ctx context.Context, id grain.ID) ([]ReminderEntry, error) {
	if err := m.enter(ctx, OpGrainReminders, id); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []ReminderEntry
	for k, r := range m.reminders {
		if k.id == id {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b ReminderEntry) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// RangeReminders implements ReminderTable.
func (m *Memory) RangeReminders(ctx context.Context, ranges []HashRange) ([]ReminderEntry, error) {
	if err := m.enter(ctx, OpRangeReminders, grain.ID{}); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []ReminderEntry
	for _, r := range m.reminders {
		for _, hr := range ranges {
			if hr.Contains(r.Hash) {
				out = append(out, r)
				break
			}
		}
	}
	return out, nil
}

var (
	_ Provider      = (*Memory)(nil)
	_ ReminderTable = (*Memory)(nil)
	_ StreamLog     = (*Memory)(nil)
)
