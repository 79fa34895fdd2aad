// Package metrics exports a silo to Prometheus: the requests its grains
// receive, counted and timed by an incoming filter, and the silo's own
// counters (scheduler, directory, transport, cluster, persistent state,
// reminders, overload protection, streams), read at scrape time.
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
// Stats, TypeStats, StateStats, StreamStats and Streams when Prometheus
// scrapes. No family carries a label naming the silo; the Prometheus
// server adds the instance it scraped. Label values are bounded by what
// the silo hosts: grain types, their methods, the 17 gRPC codes (a call
// that ends with a code past Unauthenticated counts as Unknown), storage
// provider names. Grain keys never become labels, with one bounded
// exception: granary_stream_subscription_lag{stream, subscription, grain}
// names streams and subscribers, whose number grows with the
// application's data, so a silo exports it for the Config.StreamLagSeries
// subscriptions with the most events waiting only (20 by default), none
// for a subscription with nothing waiting. That is what an alert on a
// stuck subscriber needs, at a cost of at most that many series a silo;
// granary_stream_pending_events is the silo's total, and the admin API
// (granaryctl streams) lists every subscription.
//
// The stream families (a silo with Config.Streams):
//
//	granary_streams_active                       gauge: streams active on the silo
//	granary_stream_subscriptions                 gauge: their subscriptions
//	granary_stream_subscriptions_parked          gauge: of those, parked now
//	granary_stream_pending_events                gauge: events waiting, over all subscriptions
//	granary_stream_subscription_lag              gauge: events waiting for one subscription (bounded, above)
//	granary_stream_events_published_total        counter: rate() is the publish rate
//	granary_stream_events_delivered_total        counter: events handled, once per subscriber
//	granary_stream_events_dropped_total          counter: events a subscriber lost (buffer full, parked, deactivation)
//	granary_stream_deliveries_retried_total      counter
//	granary_stream_subscriptions_parked_total    counter
//	granary_stream_subscriptions_unparked_total  counter
//
// Every family is in the granary namespace. Counters (_total) count from
// the silo's (or, for grain calls, the Metrics') start; gauges are levels
// at the scrape. Durations are in seconds. granary_scheduler_turn_duration_seconds
// is sampled (see activation.TurnSampleEvery): its count is of samples,
// not turns. The families of a silo alone leave out the cluster,
// directory and transport; those of a silo without a reminder service
// leave out the reminders, and those of a silo without streams the
// streams.
package metrics
