// Package granarytest runs a cluster of silos inside a test, as Orleans'
// InProcessTestCluster does: one line starts them, and the test calls its
// grains, moves time on, and stops, kills and cuts off silos.
//
//	c := granarytest.New(t, granarytest.Silos(3),
//		granarytest.Register(func(r *silo.Silo) error {
//			return hellopb.RegisterGreeterGrain(r, newGreeter)
//		}))
//	reply, err := hellopb.NewGreeterRef(c.Caller(), "en").SayHello(ctx, req)
//
// The silos (named silo0, silo1, ... and indexed from 0 in the order they
// started) talk over an in-memory network and an in-memory membership,
// with no sockets and no gossip timers; they are members of one cluster
// even when there is one. They share:
//
//   - a fake clock, which moves only in Advance: grain timers, reminders,
//     grain.Context.Sleep, call timeouts and idle collection happen when
//     the test says, and Advance returns once the work they started has
//     run (WithRealClock runs the silos on the real clock instead);
//   - a storage.Memory provider (Storage), as the default provider and the
//     reminder table, so a grain's state and reminders survive its silo;
//   - the grain types every Register option registers.
//
// New registers t.Cleanup to stop every silo gracefully and wait for the
// goroutines of the silos, the network and the clock, so a test that
// checks for leaked goroutines (goleak) passes; it fails the test when
// something does not start or stop. Every wait is bounded by Timeout.
//
// Membership changes move the fake clock: New, StartSilo, Stop, Kill,
// Partition and Heal wait until the silos agree on who is in the cluster
// and then Advance the clock by the directory's recovery window (500 ms by
// default), during which a silo that took over a grain's directory entry
// tells callers to retry. A test that counts timer ticks across such a
// change should count on it.
//
// A call's context deadline is a time in real time, which the fake clock
// leaves behind once Advance moves it on. So calls through Caller turn
// it into a timeout on the cluster's clock: a call made with
// context.WithTimeout(ctx, 5*time.Second) gets grain.WithTimeout of the
// time left until the deadline when it starts (or its own WithTimeout,
// or its method's timeout, if shorter), and runs with a context without
// the deadline that is still cancelled when the caller's context ends.
// It works whatever Advance did before, and fails with DeadlineExceeded
// once Advance moves the clock past its timeout. Calls made through a
// Silo(i) directly, or by a Client, keep the deadline as it is, which the
// silos read on the fake clock. Contexts that are cancelled rather than
// given a deadline work whatever the clock says.
//
// The methods of a Cluster are for the test's goroutine (they fail the
// test with t.Fatalf), never for grain code: they wait for the cluster,
// and a grain that waits for its own silo waits for ever.
package granarytest
