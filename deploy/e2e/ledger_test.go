package main

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the start of the tests' timelines.
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// sec returns t0 plus s seconds.
func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// step is one event of a scripted ledger scenario: an Add sent, or the
// reply to the Add sent by step `of`.
type step struct {
	at    float64 // seconds after t0
	send  bool
	of    int // for a reply: the index of the send step it answers
	reply addReply
	want  verdict
}

func TestLedgerVerdicts(t *testing.T) {
	a1 := func(v int64) addReply { return addReply{Value: v, Silo: "a-1", Activation: 1} }
	b7 := func(v int64) addReply { return addReply{Value: v, Silo: "b-1", Activation: 7} }
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "counts in order",
			steps: []step{
				{at: 0, send: true}, {at: 0.1, of: 0, reply: a1(1)},
				{at: 0.2, send: true}, {at: 0.3, of: 2, reply: a1(2)},
			},
		},
		{
			name: "a failed Add counted anyway is no loss",
			steps: []step{
				{at: 0, send: true}, // fails: no reply
				{at: 1, send: true}, {at: 1.1, of: 1, reply: a1(2)},
			},
		},
		{
			name: "a count that went back is a lost write",
			steps: []step{
				{at: 0, send: true}, {at: 0.1, of: 0, reply: a1(1)},
				{at: 0.2, send: true}, {at: 0.3, of: 2, reply: a1(2)},
				{at: 0.4, send: true}, {at: 0.5, of: 4, reply: b7(1), want: verdict{lost: true}},
			},
		},
		{
			name: "concurrent Adds: a reply need only count what was acknowledged before it was sent",
			steps: []step{
				{at: 0, send: true}, {at: 0.01, send: true},
				{at: 0.1, of: 1, reply: a1(1)}, {at: 0.2, of: 0, reply: a1(2)},
			},
		},
		{
			name: "a count above the Adds sent is an Add counted twice",
			steps: []step{
				{at: 0, send: true}, {at: 0.1, of: 0, reply: a1(2), want: verdict{over: true}},
			},
		},
		{
			name: "a counter that moved is no duplicate, even when the old activation's last reply is slow",
			steps: []step{
				{at: 0, send: true}, {at: 0.1, of: 0, reply: a1(1)},
				{at: 0.2, send: true}, // slow, answered by a-1 after b-7 first answered
				{at: 0.3, send: true}, {at: 0.4, of: 3, reply: b7(3)},
				{at: 0.5, of: 2, reply: a1(2)},
				{at: 0.6, send: true}, {at: 0.7, of: 6, reply: b7(4)},
			},
		},
		{
			name: "an old activation answering after a newer one is a duplicate, counted once",
			steps: []step{
				{at: 0, send: true}, {at: 0.1, of: 0, reply: a1(1)},
				{at: 0.2, send: true}, {at: 0.3, of: 2, reply: b7(2)},
				{at: 0.4, send: true}, {at: 0.5, of: 4, reply: a1(3), want: verdict{duplicate: true}},
				{at: 0.6, send: true}, {at: 0.7, of: 6, reply: a1(4)},
			},
		},
		{
			name: "a newer activation first called before the old one's first reply proves nothing",
			steps: []step{
				{at: 0, send: true}, {at: 0.05, send: true},
				{at: 0.1, of: 1, reply: b7(1)}, {at: 0.2, of: 0, reply: a1(2)},
				{at: 0.3, send: true}, {at: 0.4, of: 4, reply: b7(3)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger([]string{"k"})
			tickets := map[int]ticket{}
			for i, s := range tt.steps {
				if s.send {
					tickets[i] = l.send("k", sec(s.at))
					continue
				}
				tk, ok := tickets[s.of]
				if !ok {
					t.Fatalf("step %d answers step %d, which sent nothing", i, s.of)
				}
				if got := l.ack(tk, s.reply, sec(s.at)); got != s.want {
					t.Errorf("step %d (reply %+v): verdict %+v, want %+v", i, s.reply, got, s.want)
				}
			}
		})
	}
}

func TestLedgerFinal(t *testing.T) {
	l := newLedger([]string{"a", "b", "c", "d"})
	ackN := func(key string, n int) {
		for i := range n {
			tk := l.send(key, sec(float64(i)))
			l.ack(tk, addReply{Value: int64(i + 1), Silo: "s", Activation: 1}, sec(float64(i)+0.5))
		}
	}
	ackN("a", 5)
	ackN("b", 3)
	ackN("c", 2)
	l.send("c", sec(9)) // failed, maybe counted
	ackN("d", 1)
	counts := map[string]int64{"a": 5, "b": 1, "c": 3}
	errs := map[string]error{"d": errUnavailable}
	got := l.final(counts, errs)
	want := finalCheck{Counters: 3, Acked: 11, Sent: 12, Final: 9, LostCounters: 1, LostAdds: 2}
	if len(got.Unread) != 1 || !strings.HasPrefix(got.Unread[0], "d: ") {
		t.Errorf("Unread = %q, want d with its error", got.Unread)
	}
	got.Unread = nil
	if !equalFinal(got, want) {
		t.Errorf("final = %+v, want %+v", got, want)
	}

	over := newLedger([]string{"x"})
	over.send("x", t0)
	if f := over.final(map[string]int64{"x": 2}, nil); f.OverCounters != 1 {
		t.Errorf("a count of 2 after one Add sent: OverCounters = %d, want 1", f.OverCounters)
	}
}

func equalFinal(a, b finalCheck) bool {
	return a.Counters == b.Counters && a.Acked == b.Acked && a.Sent == b.Sent && a.Final == b.Final &&
		a.LostCounters == b.LostCounters && a.LostAdds == b.LostAdds && a.OverCounters == b.OverCounters
}

func TestLedgerUnknownKeyPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `"nope"`) {
			t.Errorf("recover() = %v, want a panic naming the key", r)
		}
	}()
	newLedger([]string{"k"}).send("nope", t0)
}
