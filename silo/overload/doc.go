// Package overload decides when a silo is too busy to take new work, as
// Orleans' load shedding does. A Monitor samples the process's CPU time,
// the Go heap and the requests' latency a few times per window. It
// averages CPU and heap over the window and raises a flag while either
// average is over its limit. The flag comes down only once every average
// is under Hysteresis times its limit, so a load that hovers at a limit
// does not switch shedding on and off with each sample.
//
// Latency is not a flag but a Limiter: a bound on the new requests in
// progress, which the monitor adapts each sample so that their mean
// latency stays under a target. A saturated dependency slows every
// request at once, and a flag would refuse all of them until the queues
// drained, then admit a flood; the limit admits what the silo serves in
// time and refuses only the rest.
//
// The latency is the mean time the requests that ended in a sample's
// interval took, which the silo times from their arrival to the end of
// their turns. It sees a request only once it ends, so it tells of work
// that drains slowly, not of work that has stopped: a stall is caught by
// the per-request wait limit and the calls' deadlines.
//
// The package owns the measuring and the decision, nothing else: what a
// silo refuses while the flag is up, and how it tells the caller, belong
// to the silo's gateway and its silo-to-silo receiver, which read the
// flag with one atomic load per request, and to the silo's runtime, which
// takes a place in the Limiter for each new request it runs.
//
// It imports only the standard library, clockwork and zap, so that it is
// tested alone: a test gives the Monitor a fake clock and samplers it
// drives, and every decision follows from the samples it fed.
package overload
