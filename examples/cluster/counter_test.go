package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/granaryio/granary/examples/cluster/counter"
	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/granarytest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestCounterPersistent runs persistent counters on a test cluster of one
// silo, whose default provider is an in-memory store, which the test also
// writes to behind a counter's back. The counter's next Add fails with
// FailedPrecondition; the Adds after it go to a new activation, which
// reads the count the test wrote and goes on from it.
func TestCounterPersistent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	c := granarytest.New(t, granarytest.Register(func(s *silo.Silo) error { return counter.Register(s, true) }))
	m, s := c.Storage(), c.Silo(0)

	ref := clusterpb.NewCounterRef(s, "c")
	add := func(delta int64) (*clusterpb.AddReply, error) {
		return ref.Add(ctx, &clusterpb.AddRequest{Delta: delta})
	}
	if r, err := add(1); err != nil || r.GetValue() != 1 {
		t.Fatalf("first Add: %v, %v; want a count of 1", r, err)
	}
	first, err := add(2)
	if err != nil || first.GetValue() != 3 {
		t.Fatalf("second Add: %v, %v; want a count of 3", first, err)
	}
	rec, err := m.ReadState(ctx, ref.ID(), counter.State.StateName())
	if err != nil {
		t.Fatal(err)
	}
	var st clusterpb.CounterState
	if err := proto.Unmarshal(rec.Data, &st); err != nil || st.GetValue() != 3 {
		t.Fatalf("stored count %d, %v; want 3", st.GetValue(), err)
	}

	// Another writer: the activation's ETag is stale from now on.
	data, err := proto.Marshal(&clusterpb.CounterState{Value: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteState(ctx, ref.ID(), counter.State.StateName(), data, rec.ETag); err != nil {
		t.Fatal(err)
	}
	_, err = add(1)
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Add after another write: %v, want FailedPrecondition", err)
	}
	// The failed activation deactivates once idle; a call that reaches it
	// before then fails as the last did. Each call is one turn, so a
	// few attempts are enough.
	const attempts = 10
	for i := range attempts {
		r, err := add(1)
		if status.Code(err) == codes.FailedPrecondition && i < attempts-1 {
			continue
		}
		if err != nil || r.GetValue() != 11 || r.GetActivation() == first.GetActivation() {
			t.Fatalf("Add after the failed write: %v, %v; want 11 from an activation other than %d", r, err, first.GetActivation())
		}
		if i > 0 {
			t.Logf("%d Adds reached the failed activation before it deactivated", i)
		}
		break
	}
}

// TestDriveTally checks the driver's bounds on a reply's count and how a
// drive line reports the replies below the lower one.
func TestDriveTally(t *testing.T) {
	var c counterTally
	type step struct {
		send  bool  // an Add is sent
		value int64 // its reply's count; 0: it failed
		lost  bool
		over  bool
	}
	for i, s := range []step{
		{send: true, value: 1},             // in [1, 1]
		{send: true},                       // failed: counted or not
		{send: true, value: 3},             // in [2, 3]: it was counted
		{send: true, value: 3, lost: true}, // below [4, 4]: the last acknowledged Add forgotten
		{send: true, value: 9, over: true}, // above [4, 5]: another caller, or counts left over
		{send: true, value: 1, lost: true}, // below [10, 6]: started again from zero
		{send: true, value: 2, lost: true}, // below [6, 7]: still behind the Adds acknowledged
	} {
		if s.send {
			c.sent++
		}
		if s.value == 0 {
			continue
		}
		if lost, over := c.ack(s.value); lost != s.lost || over != s.over {
			t.Errorf("step %d: ack(%d) = lost %t, over %t; want %t, %t", i, s.value, lost, over, s.lost, s.over)
		}
	}
	if c.sent != 7 || c.acked != 6 || c.last != 2 {
		t.Errorf("sent %d, acked %d, last %d; want 7, 6, 2", c.sent, c.acked, c.last)
	}

	d := driveStats{ok: 2, failed: 1, silos: map[string]int{"b-2": 1, "a-1": 1}, lost: 3, lastErr: status.Error(codes.Unavailable, "down")}
	want := `drive ok=2 failed=1 silos=a-1:1,b-2:1 lost=3 err="rpc error: code = Unavailable desc = down"`
	if got := d.line(); got != want {
		t.Errorf("line:\n%s\nwant\n%s", got, want)
	}
	if n := d.next(); n.lost != 3 || n.ok != 0 || n.failed != 0 || len(n.silos) != 0 || n.lastErr != nil {
		t.Errorf("next interval %+v: want lost carried over, the rest zero", n)
	}
	if got, want := (&driveStats{silos: map[string]int{}}).line(), "drive ok=0 failed=0 silos= lost=0"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
}

// TestPostgresFlags checks -postgres and -service.
func TestPostgresFlags(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil || o.postgres != "" || o.service != "cluster-example" {
		t.Fatalf("defaults: %+v, %v; want no DSN and service cluster-example", o, err)
	}
	dsn := "postgres://u:p@db:5432/x?sslmode=disable"
	o, err = parseFlags([]string{"-postgres", dsn, "-service", "svc"}, io.Discard)
	if err != nil || o.postgres != dsn || o.service != "svc" {
		t.Fatalf("-postgres -service: %+v, %v", o, err)
	}
	// A DSN that does not parse fails run before the silo starts.
	o.postgres, o.name, o.cluster, o.gossip, o.grpc, o.profile = "postgres://%zz", "x", "c", "127.0.0.1:0", "127.0.0.1:0", "local"
	var out strings.Builder
	if err := run(context.Background(), o, &out); err == nil || !strings.Contains(err.Error(), "store") || out.Len() > 0 {
		t.Fatalf("run with a bad DSN: %v, printed %q; want an error about the store, nothing printed", err, out.String())
	}
}
