// Package metrics exports a silo to Prometheus: the requests its grains
// receive, counted and timed by an incoming filter, and the silo's own
// counters (scheduler, directory, transport, cluster, persistent state,
// reminders, overload protection), read at scrape time.
//
// Wiring:
//
//	reg := prometheus.NewRegistry()
//	m, err := metrics.New(metrics.Config{Registerer: reg})
//	cfg := silo.DefaultConfig()
//	cfg.IncomingFilters = append([]grain.IncomingFilter{m.IncomingFilter()}, cfg.IncomingFilters...)
//	s, err := silo.New(cfg)
//	err = m.Attach(s)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// # Contract
//
// The filter's cost is on every request, so it takes no lock and
// allocates nothing on the success path once a method has been called:
// the counts of each (method, status code) pair live in a histogram of
// atomic counters found through a sync.Map keyed by the method
// descriptor, and granary_grain_calls_total is the histogram's count, so
// the two never disagree. A failed call also goes into a small ring,
// under a lock, for RecentErrors.
//
// Attach costs nothing between scrapes: its collector asks the silo for
// Stats, TypeStats and StateStats when Prometheus scrapes. No family
// carries a label naming the silo; the Prometheus server adds the
// instance it scraped. Label values are bounded by what the silo hosts:
// grain types, their methods, the 17 gRPC codes (a call that ends with a
// code past Unauthenticated counts as Unknown), storage provider names.
// Grain keys never become labels.
//
// Every family is in the granary namespace. Counters (_total) count from
// the silo's (or, for grain calls, the Metrics') start; gauges are levels
// at the scrape. Durations are in seconds. granary_scheduler_turn_duration_seconds
// is sampled (see activation.TurnSampleEvery): its count is of samples,
// not turns. The families of a silo alone leave out the cluster,
// directory and transport; those of a silo without a reminder service
// leave out the reminders.
package metrics
