// Package overload decides when a silo is too busy to take new work, as
// Orleans' load shedding does. A Monitor samples the process's CPU time,
// the Go heap and the requests' latency a few times per window,
// averages each over the window, and raises a flag while any average is
// over its limit. The flag comes down only once every average is under
// Hysteresis times its limit, so a load that hovers at a limit does not
// switch shedding on and off with each sample.
//
// The latency is the mean time the requests that ended during the window
// took, which the silo times from their arrival to the end of their
// turns. It sees a request only once it ends, so it tells of work that
// drains slowly, not of work that has stopped: a stall is caught by the
// per-request wait limit and the calls' deadlines.
//
// The package owns the measuring and the decision, nothing else: what a
// silo refuses while the flag is up, and how it tells the caller, belong
// to the silo's gateway and its silo-to-silo receiver, which read the
// flag with one atomic load per request.
//
// It imports only the standard library, clockwork and zap, so that it is
// tested alone: a test gives the Monitor a fake clock and samplers it
// drives, and every decision follows from the samples it fed.
package overload
