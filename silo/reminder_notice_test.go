package silo

import (
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/storage"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestReminderNoticeReachesOwner: RegisterReminder on a silo that does not
// own the grain's ring position sends the owner a REMINDER envelope, which
// the owner's transport must take (it once dropped the kind, leaving the
// reminder to the owner's next refresh). The owner's RefreshInterval is an
// hour here, so only the notice can schedule the reminder.
func TestReminderNoticeReachesOwner(t *testing.T) {
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
	ring := tc.silo("a").cl.Dir.Ring()
	var key, host string
	var owner *Silo
	for _, k := range keys("n", 200) {
		r, err := reg(tc.silo("a"), k).Get(testCtx(t), &probe.RegisterOp{})
		if err != nil {
			t.Fatal(err)
		}
		o := ring.Owner(directory.Position(grain.NewID(probe.RegisterGrainType, k)))
		if tc.silo(r.Silo).cl.SelfID != o {
			key, host = k, r.Silo
			for _, s := range tc.live() {
				if s.cl.SelfID == o {
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
	waitFor(t, "the owner to schedule the reminder, or drop the notice", func() bool {
		return owner.Stats().Reminders.Owned == 1 || dropped()
	})
	if owner.Stats().Reminders.Owned != 1 {
		for _, e := range logs.All() {
			t.Logf("%s: %s %v", e.Level, e.Message, e.ContextMap())
		}
		t.Fatalf("%s's reminder, registered on %s, is not scheduled by its owner %s: the REMINDER notice was dropped by the transport",
			key, host, owner.rt.Cfg.Name)
	}
}
