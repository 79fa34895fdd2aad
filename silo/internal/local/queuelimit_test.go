package local

import (
	"testing"
	"time"
)

// TestLimitLogLetsOneThroughPerInterval: the first event logs, the events
// within the next interval are held back and counted, and the first event
// once the interval has passed logs with that count.
func TestLimitLogLetsOneThroughPerInterval(t *testing.T) {
	t.Parallel()
	var l logEvery
	steps := []struct {
		at       time.Duration
		wantOK   bool
		wantHeld uint64
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{limitLogInterval - 1, false, 0},
		{limitLogInterval, true, 2},
		{limitLogInterval + time.Second, false, 0},
		{5 * limitLogInterval, true, 1},
	}
	for _, s := range steps {
		held, ok := l.allow(s.at)
		if ok != s.wantOK || held != s.wantHeld {
			t.Errorf("event at %v: logged %v with %d held back, want %v with %d", s.at, ok, held, s.wantOK, s.wantHeld)
		}
	}
}

// TestResolveQueueLimitsFieldByField: each limit comes from the silo's
// per-type configuration when set there, else from the type's option,
// else from the silo-wide setting, independently of the other limit.
func TestResolveQueueLimitsFieldByField(t *testing.T) {
	t.Parallel()
	silo := QueueLimits{Soft: 5000, Hard: 20000}
	for _, tc := range []struct {
		option, typeConfig, want QueueLimits
	}{
		{QueueLimits{}, QueueLimits{}, silo},
		{QueueLimits{Soft: 10}, QueueLimits{}, QueueLimits{Soft: 10, Hard: 20000}},
		{QueueLimits{Soft: 10, Hard: 20}, QueueLimits{Hard: 30}, QueueLimits{Soft: 10, Hard: 30}},
		{QueueLimits{}, QueueLimits{Soft: 7, Hard: 8}, QueueLimits{Soft: 7, Hard: 8}},
	} {
		if got := ResolveQueueLimits(silo, tc.option, tc.typeConfig); got != tc.want {
			t.Errorf("option %+v, type config %+v: got %+v, want %+v", tc.option, tc.typeConfig, got, tc.want)
		}
	}
}
