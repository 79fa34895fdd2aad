package main

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// second describes one second of a scripted timeline for two workers.
type second struct {
	ok     [2]int // successful calls per worker
	failed int
	lost   int
	dups   int
}

func buildTimeline(secs []second) *timeline {
	tl := newTimeline(t0, 2)
	for i, s := range secs {
		at := sec(float64(i) + 0.5)
		for w, n := range s.ok {
			for range n {
				tl.record(w, at, nil, verdict{})
			}
		}
		for range s.failed {
			tl.record(0, at, status.Error(codes.Unavailable, "gone"), verdict{})
		}
		for range s.lost {
			tl.record(1, at, nil, verdict{lost: true})
		}
		for range s.dups {
			tl.record(1, at, nil, verdict{duplicate: true})
		}
	}
	return tl
}

var clean = second{ok: [2]int{3, 3}}

func TestTimelineWindow(t *testing.T) {
	tests := []struct {
		name     string
		secs     []second
		from, to int
		want     windowStats
	}{
		{
			name: "every second clean",
			secs: []second{clean, clean, clean},
			from: 0, to: 3,
			want: windowStats{Calls: 18, Recovered: true},
		},
		{
			name: "failures, then clean",
			secs: []second{clean, {ok: [2]int{1, 0}, failed: 4}, {ok: [2]int{2, 2}, failed: 1}, clean, clean},
			from: 1, to: 5,
			want: windowStats{Calls: 22, Failed: 5, Recovered: true, Recovery: 2 * time.Second},
		},
		{
			name: "a worker stalled on a slow call is not recovered",
			secs: []second{{ok: [2]int{4, 0}}, {ok: [2]int{4, 0}}, clean},
			from: 0, to: 3,
			want: windowStats{Calls: 14, Recovered: true, Recovery: 2 * time.Second},
		},
		{
			name: "a relapse counts: recovery is after the last unclean second",
			secs: []second{{failed: 1, ok: [2]int{1, 1}}, clean, {failed: 2, ok: [2]int{1, 1}}, clean},
			from: 0, to: 4,
			want: windowStats{Calls: 19, Failed: 3, Recovered: true, Recovery: 3 * time.Second},
		},
		{
			name: "still failing at the end",
			secs: []second{clean, {failed: 2}},
			from: 0, to: 2,
			want: windowStats{Calls: 8, Failed: 2, Recovered: false, Recovery: 2 * time.Second},
		},
		{
			name: "lost writes and duplicates are summed",
			secs: []second{{ok: [2]int{1, 1}, lost: 2, dups: 1}, clean},
			from: 0, to: 2,
			want: windowStats{Calls: 11, Lost: 2, Duplicates: 1, Recovered: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := buildTimeline(tt.secs).window(tt.from, tt.to)
			tt.want.PeakActivations = -1
			if tt.want.Failed > 0 {
				tt.want.TopCode, tt.want.TopCount, tt.want.TopExample = "Unavailable", tt.want.Failed, "rpc error: code = Unavailable desc = gone"
			}
			if got != tt.want {
				t.Errorf("window(%d, %d) =\n  %+v\nwant\n  %+v", tt.from, tt.to, got, tt.want)
			}
		})
	}
}

func TestTimelineIndexAndSamples(t *testing.T) {
	tl := newTimeline(t0, 1)
	for _, tt := range []struct {
		at   time.Time
		want int
	}{{t0.Add(-time.Second), 0}, {t0, 0}, {sec(0.999), 0}, {sec(1), 1}, {sec(7.5), 7}} {
		if got := tl.index(tt.at); got != tt.want {
			t.Errorf("index(%v) = %d, want %d", tt.at.Sub(t0), got, tt.want)
		}
	}
	if got := tl.at(3); !got.Equal(sec(3)) {
		t.Errorf("at(3) = %v, want %v", got, sec(3))
	}
	tl.sample(sec(0.2), 60)
	tl.sample(sec(0.7), 66)
	tl.sample(sec(1.2), 64)
	if got := tl.window(0, 1).PeakActivations; got != 66 {
		t.Errorf("peak activations of second 0 = %d, want 66", got)
	}
	if got := tl.window(0, 2).PeakActivations; got != 66 {
		t.Errorf("peak activations of seconds 0-1 = %d, want 66", got)
	}
	if got := tl.window(2, 3).PeakActivations; got != -1 {
		t.Errorf("peak activations of an unsampled second = %d, want -1", got)
	}
}

func TestTimelineTopCode(t *testing.T) {
	tl := newTimeline(t0, 1)
	for i, c := range []codes.Code{codes.Unavailable, codes.DeadlineExceeded, codes.Unavailable, codes.DeadlineExceeded, codes.Aborted} {
		tl.record(0, sec(0.5), status.Errorf(c, "failure %d", i), verdict{})
	}
	tl.record(0, sec(1.5), errors.New("no status"), verdict{})
	// Two codes tie: the first in order wins, so the report is stable;
	// the example is the first failure of that code.
	w := tl.window(0, 2)
	if w.TopCode != "DeadlineExceeded" || w.TopCount != 2 || w.TopExample != "rpc error: code = DeadlineExceeded desc = failure 1" {
		t.Errorf("top code %s (%d, %q), want DeadlineExceeded (2, failure 1)", w.TopCode, w.TopCount, w.TopExample)
	}
	if w := tl.window(1, 2); w.TopCode != "Unknown" || w.TopExample != "no status" {
		t.Errorf("an error without a status: top code %s (%q), want Unknown", w.TopCode, w.TopExample)
	}
}
