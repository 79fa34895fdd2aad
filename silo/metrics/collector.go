package metrics

import (
	"strconv"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/silo"
	"github.com/prometheus/client_golang/prometheus"
)

// siloCollector exports one silo's counters, read at scrape time.
type siloCollector struct {
	s *silo.Silo
	// lagSeries bounds the series of granary_stream_subscription_lag.
	lagSeries int
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("granary_"+name, help, labels, nil)
}

// The silo's families. Gauges are levels now; counters (_total) count
// since the silo started.
var (
	siloReady = desc("silo_ready", "1 while the silo serves calls (Start has returned and Stop has not begun), else 0.")

	activations = desc("activations", "Grain activations in the silo's catalog (activating, serving or deactivating), by grain type.", "type")

	schedProcessors = desc("scheduler_processors", "Processors of the scheduler's pool: the most grain turns that run at once outside blocking regions.")
	schedQueued     = desc("scheduler_queued_groups", "Activations (work-item groups) waiting in the scheduler's run queues.")
	schedRunning    = desc("scheduler_running_workers", "Scheduler workers holding a processor, those whose processor the monitor detached included.")
	schedSpinning   = desc("scheduler_spinning_workers", "Running scheduler workers looking for work before they park.")
	schedParked     = desc("scheduler_parked_workers", "Scheduler workers parked without a processor, kept for hand-offs.")
	schedBlocked    = desc("scheduler_blocked_turns", "Grain turns waiting (on a call, a future, a sleep or a blocking region) with their processor handed on.")
	schedWorkers    = desc("scheduler_workers", "Scheduler worker goroutines alive.")
	schedSteals     = desc("scheduler_steals_total", "Runnable activations a scheduler worker stole from another processor's queue.")
	schedHandoffs   = desc("scheduler_handoffs_total", "Processors handed to another worker by a turn that waited.")
	schedHandons    = desc("scheduler_handons_total", "Processors the monitor took from a turn that ran too long without waiting, and gave to another worker.")
	schedLongTurns  = desc("scheduler_long_turns_total", "Turns that ran past the long-turn warning threshold (logged with their grain and method).")
	schedTurnTime   = desc("scheduler_turn_duration_seconds", "Time in seconds a grain turn held its processor, SAMPLED: each worker times about one turn in "+
		strconv.Itoa(activation.TurnSampleEvery)+" (at random gaps), and leaves out turns that waited or panicked; the count is of samples, not turns.")

	clusterMembers  = desc("cluster_members", "Live members of the cluster as this silo sees them, itself included.")
	clusterActive   = desc("cluster_active_members", "Members on this silo's directory ring: live and not shutting down.")
	clusterInFlight = desc("cluster_inflight_requests", "Requests from or forwarded to other silos that have no answer yet.")

	dirEntries   = desc("directory_entries", "Grain directory entries in this silo's partition of the ring.")
	dirCache     = desc("directory_cache_entries", "Entries in this silo's directory lookup cache.")
	dirShare     = desc("directory_ring_share", "Fraction (0 to 1) of the directory ring this silo owns.")
	dirDead      = desc("directory_dead_silos", "Silos the directory remembers as dead, whose entries it refuses.")
	dirRetrying  = desc("directory_retrying_registrations", "This silo's activations whose registration waits to be sent again to its owner.")
	dirLookups   = desc("directory_lookups_total", "Directory lookups this silo made to route calls: by the lookup cache, the own partition or the owning silo.")
	dirHits      = desc("directory_lookup_cache_hits_total", "Directory lookups answered by this silo's lookup cache.")
	dirRemote    = desc("directory_remote_lookups_total", "Directory lookups sent to the silo owning the grain's entry.")
	dirForwarded = desc("directory_forwarded_total", "Directory requests passed on to the silo believed to own them.")
	dirRefused   = desc("directory_refused_total", "Directory requests refused at the hop bound while silos' views disagreed.")
	dirHandedOff = desc("directory_handed_off_total", "Directory entries sent to new owners after membership changes.")
	dirDropped   = desc("directory_dropped_total", "Directory handoff entries not placed: the send failed, no owner, hop bound or dead silo; a live silo sends its own again.")
	dirLost      = desc("directory_lost_activations_total", "Activations of this silo that lost their directory registration to another and were deactivated.")

	tpPeers          = desc("transport_peers", "Silos the transport knows an address for.")
	tpStreams        = desc("transport_streams", "Transport streams up, both directions.")
	tpPending        = desc("transport_pending_calls", "Calls sent on transport streams and waiting for their response.")
	tpBytesSent      = desc("transport_bytes_sent_total", "Bytes of frames the transport wrote to other silos and clients.")
	tpBytesRecv      = desc("transport_bytes_received_total", "Bytes of frames the transport read and delivered.")
	tpBatchesSent    = desc("transport_batches_sent_total", "Frames (batches of envelopes) the transport wrote.")
	tpBatchesRecv    = desc("transport_batches_received_total", "Frames (batches of envelopes) the transport read and delivered.")
	tpEnvsSent       = desc("transport_envelopes_sent_total", "Envelopes (requests, responses, one-way and control messages) the transport wrote.")
	tpEnvsRecv       = desc("transport_envelopes_received_total", "Envelopes the transport read.")
	tpBatchEnvelopes = desc("transport_batch_envelopes", "Envelopes per frame the transport wrote: how well its writers coalesce.")

	stateReads     = desc("state_reads_total", "Grain state reads made through a storage provider, by provider.", "provider")
	stateWrites    = desc("state_writes_total", "Grain state writes made through a storage provider, by provider.", "provider")
	stateClears    = desc("state_clears_total", "Grain state clears made through a storage provider, by provider.", "provider")
	stateFailures  = desc("state_failures_total", "Grain state operations that failed (unreachable store, oversize state, ended context, stale ETag), by provider and operation.", "provider", "op")
	stateConflicts = desc("state_conflicts_total", "Grain state writes and clears refused for a stale ETag, by provider; counted among the failures too.", "provider")

	queueWarnings     = desc("queue_limit_warnings_total", "Requests that queued at an activation past its soft queue limit.")
	queueRefusals     = desc("queue_limit_refusals_total", "Requests refused with ResourceExhausted because an activation's queue was at its hard limit.")
	waitRefusals      = desc("queue_wait_refusals_total", "Requests refused with ResourceExhausted because they waited for their turn past their type's queue wait limit.")
	limitRefusals     = desc("concurrency_limit_refusals_total", "New requests refused with ResourceExhausted because the silo ran as many at once as its latency limit allows.")
	concurrencyLimit  = desc("concurrency_limit", "How many new requests from clients and other silos the latency limit lets the silo run at once; 0 while nothing is limited.")
	concurrency       = desc("concurrency", "New requests from clients and other silos running or queued in the silo now, counted while a latency limit is set.")
	shedRequests      = desc("shed_requests_total", "Requests refused with ResourceExhausted by load shedding.")
	loadShedding      = desc("load_shedding", "1 while the silo sheds load (refuses new requests because its CPU use or Go heap is over its limit), else 0.")
	memoryCollections = desc("memory_collections_total", "Idle activations deactivated because the Go heap was over the memory collection's heap target.")
	abandonedTurns    = desc("abandoned_turns_total", "Grain turns still running when the silo's close stopped waiting for them, at its close timeout.")
	oneWayFailures    = desc("oneway_failures_total", "One-way requests that failed after their senders were told they were sent: refused, expired, dropped by a stopping silo, or failed by their handler.")

	remOwned        = desc("reminders_owned", "Reminders scheduled on this silo: those of the ring ranges it owns.")
	remTicks        = desc("reminder_ticks_total", "Reminder ticks delivered to grains.")
	remFailures     = desc("reminder_tick_failures_total", "Reminder ticks whose grain call failed.")
	remSkipped      = desc("reminder_ticks_skipped_total", "Reminder ticks skipped because the reminder's previous tick was still running.")
	remTardiness    = desc("reminder_tardiness_seconds", "Time in seconds by which a reminder tick was delivered after it was due.")
	remLoads        = desc("reminder_table_loads_total", "Reads of the reminder table.")
	remLoadFailures = desc("reminder_table_load_failures_total", "Reads of the reminder table that failed.")
)

var siloDescs = []*prometheus.Desc{
	siloReady, activations,
	schedProcessors, schedQueued, schedRunning, schedSpinning, schedParked, schedBlocked, schedWorkers,
	schedSteals, schedHandoffs, schedHandons, schedLongTurns, schedTurnTime,
	clusterMembers, clusterActive, clusterInFlight,
	dirEntries, dirCache, dirShare, dirDead, dirRetrying, dirLookups, dirHits, dirRemote,
	dirForwarded, dirRefused, dirHandedOff, dirDropped, dirLost,
	tpPeers, tpStreams, tpPending, tpBytesSent, tpBytesRecv, tpBatchesSent, tpBatchesRecv, tpEnvsSent, tpEnvsRecv, tpBatchEnvelopes,
	stateReads, stateWrites, stateClears, stateFailures, stateConflicts,
	remOwned, remTicks, remFailures, remSkipped, remTardiness, remLoads, remLoadFailures,
	queueWarnings, queueRefusals, waitRefusals, limitRefusals, concurrencyLimit, concurrency, shedRequests, loadShedding, memoryCollections, abandonedTurns,
	oneWayFailures,
}

func (c *siloCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range siloDescs {
		ch <- d
	}
	for _, d := range streamDescs {
		ch <- d
	}
}

// emit sends metrics to a scrape.
type emit chan<- prometheus.Metric

func (e emit) gauge(d *prometheus.Desc, v float64, labels ...string) {
	e <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func (e emit) counter(d *prometheus.Desc, v uint64, labels ...string) {
	e <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

// durations sends a histogram of durations kept in buckets: counts[i]
// holds those at most bounds[i], and counts[len(bounds)] the overflow.
func (e emit) durations(d *prometheus.Desc, bounds []time.Duration, counts []uint64, sum time.Duration) {
	n, buckets := cumulative(bounds, counts, time.Duration.Seconds)
	e <- constHistogram(d, n, sum.Seconds(), buckets)
}

// cumulative turns bucket counts (counts[i] of the values at most
// bounds[i], the one past the bounds the overflow) into Prometheus'
// cumulative buckets keyed by upper bound (key gives it as a float), and
// their total.
func cumulative[B any](bounds []B, counts []uint64, key func(B) float64) (total uint64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(bounds))
	for i, c := range counts {
		total += c
		if i < len(bounds) {
			buckets[key(bounds[i])] = total
		}
	}
	return total, buckets
}

func (c *siloCollector) Collect(ch chan<- prometheus.Metric) {
	e := emit(ch)
	s := c.s
	if s.Info().Status == silo.StatusJoining {
		// Until Start returns, only the readiness gauge: the silo's
		// TypeStats, Stats and StateStats describe nothing yet.
		e.gauge(siloReady, 0)
		return
	}
	ready := 0.0
	if s.Ready() == nil {
		ready = 1
	}
	e.gauge(siloReady, ready)
	for _, t := range s.TypeStats() {
		e.gauge(activations, float64(t.Activations), t.Type)
	}
	st := s.Stats()
	collectScheduler(e, st)
	collectOverload(e, st.Overload)
	e.counter(oneWayFailures, st.OneWayFailures)
	if cl := st.Cluster; cl != nil {
		collectCluster(e, cl)
	}
	if r := st.Reminders; r != nil {
		e.gauge(remOwned, float64(r.Owned))
		e.counter(remTicks, r.Ticks)
		e.counter(remFailures, r.Failures)
		e.counter(remSkipped, r.Skipped)
		e.durations(remTardiness, r.Tardiness.Bounds, r.Tardiness.Counts, r.Tardiness.Sum)
		e.counter(remLoads, r.Loads)
		e.counter(remLoadFailures, r.LoadFailures)
	}
	for _, p := range s.StateStats().Providers {
		e.counter(stateReads, p.Reads, p.Provider)
		e.counter(stateWrites, p.Writes, p.Provider)
		e.counter(stateClears, p.Clears, p.Provider)
		e.counter(stateFailures, p.ReadFailures, p.Provider, "read")
		e.counter(stateFailures, p.WriteFailures, p.Provider, "write")
		e.counter(stateFailures, p.ClearFailures, p.Provider, "clear")
		e.counter(stateConflicts, p.Conflicts, p.Provider)
	}
	if st, ok := s.StreamStats(); ok {
		collectStreams(e, st, s.Streams(), c.lagSeries)
	}
}

func collectScheduler(e emit, st silo.Stats) {
	sc := st.Scheduler
	e.gauge(schedProcessors, float64(sc.Processors))
	e.gauge(schedQueued, float64(sc.QueuedGroups))
	e.gauge(schedRunning, float64(sc.RunningWorkers))
	e.gauge(schedSpinning, float64(sc.SpinningWorkers))
	e.gauge(schedParked, float64(sc.ParkedWorkers))
	e.gauge(schedBlocked, float64(sc.BlockedTurns))
	e.gauge(schedWorkers, float64(sc.Workers))
	e.counter(schedSteals, sc.Steals)
	e.counter(schedHandoffs, sc.Handoffs)
	e.counter(schedHandons, sc.HandOns)
	e.counter(schedLongTurns, sc.LongTurnWarnings)
	tt := sc.TurnTime
	e.durations(schedTurnTime, tt.Bounds, tt.Counts, tt.Sum)
}

func collectOverload(e emit, o silo.OverloadStats) {
	e.counter(queueWarnings, o.QueueWarnings)
	e.counter(queueRefusals, o.QueueRefusals)
	e.counter(waitRefusals, o.WaitRefusals)
	e.counter(limitRefusals, o.LimitRefusals)
	e.gauge(concurrencyLimit, float64(o.ConcurrencyLimit))
	e.gauge(concurrency, float64(o.Concurrency))
	e.counter(shedRequests, o.Shed)
	shedding := 0.0
	if o.Shedding {
		shedding = 1
	}
	e.gauge(loadShedding, shedding)
	e.counter(memoryCollections, o.MemoryCollections)
	e.counter(abandonedTurns, o.AbandonedTurns)
}

func collectCluster(e emit, cl *silo.ClusterStats) {
	e.gauge(clusterMembers, float64(cl.Members))
	e.gauge(clusterActive, float64(cl.Active))
	e.gauge(clusterInFlight, float64(cl.InFlight))

	d := cl.Directory
	e.gauge(dirEntries, float64(d.Entries))
	e.gauge(dirCache, float64(d.CacheEntries))
	e.gauge(dirShare, d.Share)
	e.gauge(dirDead, float64(d.DeadSilos))
	e.gauge(dirRetrying, float64(d.Retrying))
	e.counter(dirLookups, d.Lookups)
	e.counter(dirHits, d.LookupCacheHits)
	e.counter(dirRemote, d.RemoteLookups)
	e.counter(dirForwarded, d.Forwarded)
	e.counter(dirRefused, d.Refused)
	e.counter(dirHandedOff, d.HandedOff)
	e.counter(dirDropped, d.Dropped)
	e.counter(dirLost, d.Lost)

	t := cl.Transport
	e.gauge(tpPeers, float64(t.Peers))
	e.gauge(tpStreams, float64(t.Streams))
	e.gauge(tpPending, float64(t.Pending))
	e.counter(tpBytesSent, t.BytesSent)
	e.counter(tpBytesRecv, t.BytesReceived)
	e.counter(tpBatchesSent, t.BatchesSent)
	e.counter(tpBatchesRecv, t.BatchesReceived)
	e.counter(tpEnvsSent, t.EnvelopesSent)
	e.counter(tpEnvsRecv, t.EnvelopesReceived)
	n, buckets := cumulative(t.BatchBounds, t.BatchSizes, func(b uint64) float64 { return float64(b) })
	e <- constHistogram(tpBatchEnvelopes, n, float64(t.EnvelopesSent), buckets)
}
