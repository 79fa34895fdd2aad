package silo

import (
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/storage"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestReminderNoticeReachesOwner: RegisterReminder on a silo that does not
// own the grain's ring position sends the owner a REMINDER envelope, which
// the owner's transport takes and the owner schedules at once, without
// waiting for its next refresh. The owner's RefreshInterval is an hour
// here, so only the notice can schedule the reminder.
func TestReminderNoticeReachesOwner(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.WarnLevel)
	w := newRegisterWorld()
	m := storage.NewMemory(0)
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{
		tweak: func(c *Config) {
			memoryStore(m)(c)
			c.Reminders = &RemindersConfig{MinPeriod: time.Millisecond, RefreshInterval: time.Hour, RetryInterval: 20 * time.Millisecond}
			c.Logger = zap.New(core).With(zap.String("silo", c.Name))
		},
		register: func(s *Silo, name string) { w.register(t, s, name) },
	})
	ring := ringOf(tc.silo("a"))
	var key, host string
	var owner *Silo
	for _, k := range keys("n", 200) {
		r, err := reg(tc.silo("a"), k).Get(testCtx(t), &probe.RegisterOp{})
		if err != nil {
			t.Fatal(err)
		}
		o := ring.Owner(directory.Position(grain.NewID(probe.RegisterGrainType, k)))
		if tc.silo(r.Silo).Member() != o {
			key, host = k, r.Silo
			for _, s := range tc.live() {
				if s.Member() == o {
					owner = s
				}
			}
			break
		}
	}
	if key == "" {
		t.Fatal("no grain active away from its ring owner")
	}
	remind(t, tc.silo(host), key, "r", 0, testReminderPeriod)
	dropped := func() bool {
		for _, e := range logs.All() {
			if strings.Contains(e.Message, "dropped an envelope of a kind") {
				return true
			}
		}
		return false
	}
	testwait.For(t, defaultTestTimeout, "the owner to schedule the reminder, or drop the notice", func() bool {
		return owner.Stats().Reminders.Owned == 1 || dropped()
	})
	if owner.Stats().Reminders.Owned != 1 {
		for _, e := range logs.All() {
			t.Logf("%s: %s %v", e.Level, e.Message, e.ContextMap())
		}
		t.Fatalf("%s's reminder, registered on %s, is not scheduled by its owner %s: the transport dropped the REMINDER notice",
			key, host, owner.cfg.Name)
	}
}
