// Package overload decides when a silo is too busy to take new work, as
// Orleans' load shedding does. A Monitor samples the process's CPU time
// and the Go heap a few times per window, averages both over the window,
// and raises a flag while either average is over its limit. The flag
// comes down only once every average is under Hysteresis times its limit,
// so a load that hovers at a limit does not switch shedding on and off
// with each sample.
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
