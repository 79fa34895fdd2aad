package local

import (
	"math"
	"sync"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/silo/reminders"
	"github.com/granaryio/granary/silo/storage"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// reminderMethodName is the name of the runtime's method that delivers a
// reminder's tick to a grain (grain.Remindable); every grain type has it,
// and only silos call it.
const ReminderMethodName = "granary.v1.Reminders/ReceiveReminder"

// reminderMethod is the descriptor of that method. Its Index is outside
// every dispatch table: route and Deliver know it by its address and name.
var ReminderMethod = grain.MethodDesc{
	Name:        ReminderMethodName,
	FullName:    "/" + ReminderMethodName,
	Index:       -1,
	Handler:     receiveReminder,
	NewRequest:  func() proto.Message { return new(granaryv1.ReminderTick) },
	NewResponse: func() proto.Message { return new(emptypb.Empty) },
}

// receiveReminder hands a tick to the grain.
func receiveReminder(impl any, ctx grain.Context, req proto.Message) (proto.Message, error) {
	r, ok := impl.(grain.Remindable)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "granary: %s has a reminder but does not implement grain.Remindable (ReceiveReminder)", ctx.ID())
	}
	t := req.(*granaryv1.ReminderTick)
	st := grain.TickStatus{
		FirstTick:   time.Unix(0, t.FirstTickUnixNanos),
		Period:      time.Duration(t.PeriodNanos),
		CurrentTick: time.Unix(0, t.CurrentTickUnixNanos),
	}
	if err := r.ReceiveReminder(ctx, t.Name, st); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// reminderService is the silo's part of the reminder system: the service
// that fires the reminders of the ring positions the silo owns, and the
// goroutines that wait for the grains' answers to its ticks.
type reminderService struct {
	s   *Runtime
	Svc *reminders.Service
	min time.Duration

	wg sync.WaitGroup // ticks waiting for their grain

	// The service is given the silo's ranges only once the silo takes
	// calls: a tick fired before would fail. mu orders the hand-overs.
	mu     sync.Mutex
	live   bool
	ranges []storage.HashRange // the latest ranges, held until live; nil until the first
}

// StartReminders starts the reminder service, when configured. Start,
// before the cluster: the service owns nothing until the silo has a ring.
func (s *Runtime) StartReminders() error {
	rc := s.Cfg.Reminders
	if rc == nil {
		return nil
	}
	r := &reminderService{s: s, min: rc.MinPeriod}
	if r.min == 0 {
		r.min = DefaultMinReminderPeriod
	}
	svc, err := reminders.New(reminders.Config{
		Table:           s.ReminderTable,
		Clock:           s.Clock,
		Logger:          s.Log,
		RefreshInterval: rc.RefreshInterval,
		RetryInterval:   rc.RetryInterval,
		Fire:            r.fire,
	})
	if err != nil {
		return &ConfigError{Field: "Reminders", Reason: err.Error()}
	}
	r.Svc = svc
	s.Rem = r
	svc.Start()
	if !s.Cfg.Clustered {
		r.setRanges([]storage.HashRange{{Lo: 0, Hi: math.MaxUint64}})
	}
	return nil
}

// setRanges gives the service the ranges the silo owns now, or keeps them
// for goLive.
func (r *reminderService) setRanges(rs []storage.HashRange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ranges = rs // never nil: ringChanged and StartReminders make them
	if r.live {
		r.Svc.SetRanges(rs)
	}
}

// goLive hands the service the ranges kept until the silo took calls.
// Start, once the silo is ready.
func (r *reminderService) goLive() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live = true
	if r.ranges != nil {
		r.Svc.SetRanges(r.ranges)
	}
}

// RingChanged gives the service the ranges the silo owns on ring.
func (r *reminderService) RingChanged(ring *directory.Ring, self string) {
	arcs := ring.Arcs(self)
	ranges := make([]storage.HashRange, len(arcs))
	for i, a := range arcs {
		ranges[i] = storage.HashRange{Lo: a.Lo, Hi: a.Hi}
	}
	r.setRanges(ranges)
}

// fire delivers a tick as a call to the grain, activating it wherever it
// belongs. The reminder service's goroutine; it does not block.
func (r *reminderService) fire(e storage.ReminderEntry, st grain.TickStatus, done func(error)) {
	tick := &granaryv1.ReminderTick{
		Name:                 e.Name,
		FirstTickUnixNanos:   st.FirstTick.UnixNano(),
		CurrentTickUnixNanos: st.CurrentTick.UnixNano(),
		PeriodNanos:          int64(st.Period),
	}
	r.wg.Go(func() {
		// The silo's closing ends the wait: Release waits for these
		// goroutines, and a tick stuck in grain code must not hold Close
		// past its CloseTimeout.
		_, err := r.s.Invoke(r.s.Closed, e.Grain, &ReminderMethod, tick)
		if err != nil {
			r.s.Log.Warn("reminder tick failed", zap.Stringer("grain", e.Grain), zap.String("reminder", e.Name), zap.Error(err))
		}
		done(err)
	})
}

// changed tells the silo that owns id's ring position that id's reminders
// changed in the table.
func (s *Runtime) remindersChanged(id grain.ID) {
	h := directory.Position(id)
	if s.Cl == nil {
		s.Rem.Svc.Changed(id, h)
		return
	}
	s.Cl.RemindersChanged(id, h)
}

// reminderOp checks that a grain may use reminders now.
func (t *turnCtx) reminderOp() (*reminderService, error) {
	a := t.C.act
	r := a.s.Rem
	switch {
	case r == nil:
		return nil, status.Errorf(codes.FailedPrecondition, "granary: %s: silo %s runs no reminder service (Config.Reminders)", a.ID, a.s.Cfg.Name)
	case t.exec() == nil && !t.C.blocking:
		return nil, errOffTurn
	}
	return r, nil
}

func (t *turnCtx) RegisterReminder(name string, due, period time.Duration) (grain.Reminder, error) {
	r, err := t.reminderOp()
	if err != nil {
		return grain.Reminder{}, err
	}
	a := t.C.act
	if _, ok := a.impl.(grain.Remindable); !ok {
		return grain.Reminder{}, status.Errorf(codes.FailedPrecondition, "granary: %s registers reminder %q but does not implement grain.Remindable (ReceiveReminder)", a.ID, name)
	}
	switch {
	case name == "":
		return grain.Reminder{}, status.Errorf(codes.InvalidArgument, "granary: %s: a reminder needs a name", a.ID)
	case due < 0:
		return grain.Reminder{}, status.Errorf(codes.InvalidArgument, "granary: %s: reminder %q: due time %v is negative", a.ID, name, due)
	case period < r.min:
		return grain.Reminder{}, status.Errorf(codes.InvalidArgument, "granary: %s: reminder %q: period %v is below the silo's minimum of %v (Reminders.MinPeriod); use a timer for short periods", a.ID, name, period, r.min)
	}
	e := storage.ReminderEntry{
		Grain:     a.ID,
		Name:      name,
		Hash:      directory.Position(a.ID),
		FirstTick: a.s.Clock.Now().Add(due),
		Period:    period,
	}
	t.Blocking(func() { e.ETag, err = a.s.ReminderTable.UpsertReminder(t, e) })
	if err != nil {
		return grain.Reminder{}, storageStatus(err, "registering reminder "+name+" of "+a.ID.String())
	}
	a.s.remindersChanged(a.ID)
	return grain.Reminder{Name: name, FirstTick: e.FirstTick, Period: period, ETag: e.ETag}, nil
}

func (t *turnCtx) UnregisterReminder(name string) error {
	if _, err := t.reminderOp(); err != nil {
		return err
	}
	a := t.C.act
	var err error
	t.Blocking(func() { err = a.s.ReminderTable.RemoveReminder(t, a.ID, name, "") })
	if err != nil {
		return storageStatus(err, "removing reminder "+name+" of "+a.ID.String())
	}
	a.s.remindersChanged(a.ID)
	return nil
}

func (t *turnCtx) Reminders() ([]grain.Reminder, error) {
	if _, err := t.reminderOp(); err != nil {
		return nil, err
	}
	a := t.C.act
	var (
		es  []storage.ReminderEntry
		err error
	)
	t.Blocking(func() { es, err = a.s.ReminderTable.GrainReminders(t, a.ID) })
	if err != nil {
		return nil, storageStatus(err, "reading the reminders of "+a.ID.String())
	}
	out := make([]grain.Reminder, len(es))
	for i, e := range es {
		out[i] = grain.Reminder{Name: e.Name, FirstTick: e.FirstTick, Period: e.Period, ETag: e.ETag}
	}
	return out, nil
}

// ReminderStats is a snapshot of a silo's reminder service.
type ReminderStats = reminders.Stats
