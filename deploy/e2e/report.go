package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/granaryio/granary/internal/refusal"
)

// result is everything a run found, for the verdict and the report.
type result struct {
	Started  time.Time
	Elapsed  time.Duration
	Compose  string // the compose command and file, as run
	Image    string
	Load     loadConfig
	Chaos    chaosConfig
	Client   string // the client's options, in words
	Bound    time.Duration
	Phases   []phase
	Final    finalCheck
	Restarts map[string]int // restarts by the restart policy, by service
	// Security are the checks that the cluster refuses callers without
	// its credentials, in the order made.
	Security []check
	// Nice is the test process's nice value, when NiceKnown.
	Nice      int
	NiceKnown bool
	// Protection are the silos' overload settings in the compose file,
	// NAME=value, for the report.
	Protection []string
	// Overload is the overload soak's outcome; nil when it did not run,
	// because the faults did not all run.
	Overload *overloadResult
	// Screenshot is the dashboard's screenshot, relative to the report;
	// ScreenshotErr says why there is none.
	Screenshot    string
	ScreenshotErr error
	// RunErr is the error that cut the run short, if any.
	RunErr error
	// Failures are the assertions that failed, in words; evaluate fills
	// them.
	Failures []string
}

// evaluate sums each phase's window of tl and checks the assertions:
// every phase recovered within the bound, no reply or final count
// revealed a forgotten or doubled Add, every counter was read, and no
// silo exited on its own.
func (r *result) evaluate(tl *timeline) {
	for i := range r.Phases {
		p := &r.Phases[i]
		p.Stats = tl.window(p.Start, p.End)
		switch {
		case p.End <= p.Start:
			r.fail("%s: the run ended before the phase was watched", p.Name)
		case !p.Stats.Recovered:
			r.fail("%s: calls were still failing or stalled when the phase ended, %v after the fault", p.Name, p.Stats.Recovery)
		case p.Stats.Recovery > r.Bound:
			r.fail("%s: recovered after %v, over the %v bound", p.Name, p.Stats.Recovery, r.Bound)
		}
		if p.Stats.Lost > 0 {
			r.fail("%s: %d replies carried a count below an acknowledged one: acknowledged Adds were forgotten", p.Name, p.Stats.Lost)
		}
		if p.Stats.Over > 0 {
			r.fail("%s: %d replies carried a count above the Adds sent: an Add was counted twice", p.Name, p.Stats.Over)
		}
	}
	f := r.Final
	if f.LostCounters > 0 {
		r.fail("final read: %d counters lost %d acknowledged Adds", f.LostCounters, f.LostAdds)
	}
	if f.OverCounters > 0 {
		r.fail("final read: %d counters exceed the Adds sent to them", f.OverCounters)
	}
	if len(f.Unread) > 0 {
		r.fail("final read: %d counters could not be read, the first: %s", len(f.Unread), f.Unread[0])
	}
	for _, s := range slices.Sorted(maps.Keys(r.Restarts)) {
		if n := r.Restarts[s]; n > 0 {
			r.fail("%s exited on its own and was restarted %d times by its restart policy", s, n)
		}
	}
	if r.RunErr != nil {
		r.fail("the run stopped early: %v", r.RunErr)
	}
	if r.Overload != nil {
		r.Overload.evaluate(r.fail)
	}
}

// addSecurity records the security checks, and fails the run for each
// that did not hold.
func (r *result) addSecurity(checks []check) {
	r.Security = checks
	for _, c := range checks {
		if c.Err != nil {
			r.fail("security: %s: %v", c.Name, c.Err)
		}
	}
}

func (r *result) fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// passed reports whether every assertion held.
func (r *result) passed() bool { return len(r.Failures) == 0 }

// duplicates sums the duplicate activations the replies revealed.
func (r *result) duplicates() int {
	n := 0
	for _, p := range r.Phases {
		n += p.Stats.Duplicates
	}
	return n
}

// peakActivations is the most Counter activations sampled in the run.
func (r *result) peakActivations() int {
	peak := -1
	for _, p := range r.Phases {
		peak = max(peak, p.Stats.PeakActivations)
	}
	return peak
}

// formatRecovery renders a phase's recovery time.
func formatRecovery(s windowStats) string {
	if !s.Recovered {
		return fmt.Sprintf("not within %v", s.Recovery)
	}
	if s.Recovery == 0 {
		return "0 s (no failure)"
	}
	return fmt.Sprintf("%d s", int(s.Recovery/time.Second))
}

// formatExcess renders the activations the silos reported beyond one
// per counter, at their peak: "-" when none was sampled.
func formatExcess(peak, counters int) string {
	if peak < 0 {
		return "-"
	}
	return fmt.Sprintf("%d (%d for %d counters)", max(peak-counters, 0), peak, counters)
}

// makeTarget is the make target that runs what r records.
func (r *result) makeTarget() string {
	if r.Overload != nil {
		return "make soak"
	}
	return "make e2e"
}

// writeMarkdown writes the report: the table of faults, the final check,
// the verdict, and how the run was made and measured.
func writeMarkdown(w io.Writer, r *result) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Resilience under chaos\n\n")
	p("This page is written by `%s` (the program `deploy/e2e`); do not edit it by hand.\n", r.makeTarget())
	p("It records the last run: %s, %v long.\n\n", r.Started.UTC().Format(time.RFC3339), r.Elapsed.Round(time.Second))
	if r.passed() {
		p("**Verdict: passed.** Every fault recovered within %v, and no acknowledged write was lost.", r.Bound)
		if o := r.Overload; o != nil {
			p(" Offered %g times its capacity for %v, the cluster refused the excess with ResourceExhausted only, kept its admitted calls' p99 latency under %v and every silo's memory under %s, and served normally again %s after the load dropped.",
				o.Config.Factor, o.Config.Duration, o.Config.P99Bound, formatBytes(o.Config.RSSBound), formatRecovery(o.Recovery))
		}
		p("\n\n")
	} else {
		p("**Verdict: failed.**\n\n")
		for _, f := range r.Failures {
			p("- %s\n", f)
		}
		p("\n")
	}

	p("## Faults\n\n")
	p("| fault | injected by | calls | failed calls | recovery time | duplicates seen in replies | excess activations in silo reports | lost writes |\n")
	p("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |\n")
	for _, ph := range r.Phases {
		s := ph.Stats
		p("| %s | `%s` | %d | %d | %s | %d | %s | %d |\n", ph.Name, ph.Action, s.Calls, s.Failed, formatRecovery(s), s.Duplicates, formatExcess(s.PeakActivations, r.Load.Counters), s.Lost)
	}
	p("\n")
	for _, ph := range r.Phases {
		if s := ph.Stats; s.TopCount > 0 {
			p("- %s: %s for %d of the %d failed calls, such as `%s`\n", ph.Name, s.TopCode, s.TopCount, s.Failed, oneLine(s.TopExample, 240))
		}
	}
	f := r.Final
	p("\n## Final read\n\n")
	p("After the load stopped, every counter was read (an Add of 0): %d of %d counters read, %d Adds sent, %d acknowledged, counts summing to %d.\n",
		f.Counters, r.Load.Counters, f.Sent, f.Acked, f.Final)
	p("Counters below their acknowledged Adds: %d (%d Adds lost). Counters above the Adds sent: %d.\n", f.LostCounters, f.LostAdds, f.OverCounters)
	p("Duplicate activations revealed by the replies over the whole run: %d. Most activations the silos reported at once: %s.\n\n", r.duplicates(), formatExcess(r.peakActivations(), r.Load.Counters))

	writeOverload(&b, r)

	if len(r.Security) > 0 {
		p("## Security\n\n")
		p("The cluster ran secured: mutual TLS between silos, an encrypted gossip, TLS and a gateway token on the gateways, HTTPS and an admin token on the admin servers. Before the load, the run checked on silo-a:\n\n")
		for _, c := range r.Security {
			if c.Err != nil {
				p("- %s: **failed**: %s\n", c.Name, oneLine(c.Err.Error(), 240))
			} else {
				p("- %s: held\n", c.Name)
			}
		}
		p("\n")
	}
	p("## The dashboard\n\n")
	if r.Screenshot != "" {
		p("The dashboard of silo-a after the faults, under the load, signed in with the admin token, once its silos table listed all three silos as active:\n\n![dashboard](%s)\n\n", r.Screenshot)
	} else {
		p("No screenshot was taken: %v.\n\n", r.ScreenshotErr)
	}

	writeMethod(&b, r)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMethod explains how the run was made and what each column means.
func writeMethod(b *strings.Builder, r *result) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## How it was run\n\n")
	p("- The cluster: three silos of the image `%s` (deploy/Dockerfile: the example silo, FROM scratch), started by `%s`. ", r.Image, r.Compose)
	p("Their certificates, tokens and gossip key are those of `make certs` (deploy/mksecrets, with granaryctl certs). ")
	p("They keep the Counter grains' state in PostgreSQL on the Docker host, reached at `host.docker.internal` (scripts/postgres-test.sh up --docker).\n")
	p("- The load: %d workers in the test process, each calling `Counter.Add(1)` one call at a time over %d counters shared by all (each worker walks them all from its own offset), ", r.Load.Workers, r.Load.Counters)
	p("through one Go client (`client.Dial` with the three published gateways; %s). ", r.Client)
	p("Each call is bounded by %v; a worker waits %v after a failure. The counters' keys are new to the run. ", r.Load.CallTimeout, r.Load.Backoff)
	if r.NiceKnown {
		p("The test process ran at nice %d. `make e2e` asks for -10, so that the load generator, which shares the machine's cores with the silos and PostgreSQL, runs ahead of them and its own delays are not charged to the cluster; without the privilege, it runs at 0.\n", r.Nice)
	} else {
		p("The test process's nice value is not known.\n")
	}
	p("- The faults, in order, each starting on a whole second of the run's clock: the steady state is watched for %v; ", r.Chaos.Hold)
	p("silo-b is killed (SIGKILL, no goodbye) and started again %v later; silo-c is disconnected from the compose network, which cuts it off from the other silos and from the host, and reconnected %v later with its address unchanged; ", r.Chaos.Hold, r.Chaos.Hold)
	p("then every silo in turn is restarted gracefully (`docker restart -t %d`: SIGTERM, and SIGKILL only past %v). ", int(r.Chaos.Grace.Seconds()), r.Chaos.Grace)
	p("After each silo is back and its /readyz answers 200 (within %v), the run watches for %v before the next fault.\n\n", r.Chaos.ReadyTimeout, r.Chaos.Settle)

	p("### What the columns mean\n\n")
	p("- A row covers the seconds from its fault to the next row's fault. **Calls** and **failed calls** count the calls that completed in those seconds; a call that failed includes one that ran out its %v.\n", r.Load.CallTimeout)
	p("- **Recovery time**: the run is cut into seconds. A second is clean when no call failed in it and every worker completed at least one call in it (a worker stalled on a slow call is not served). ")
	p("The recovery time is the time from the fault to the start of the first clean second after the row's last unclean one, so a later relapse within the row counts too; 0 when every second was clean. The bound is %v; a row that still ends unclean has not recovered.\n", r.Bound)
	p("- The partition rule: while silo-c is cut off, nothing can reach it, the host included, so a client that knew only silo-c's gateway would fail for the whole partition. ")
	p("The load generator's client knows all three gateways, as every Go client does, and the bound applies to it in full: its calls first routed to silo-c's gateway, and its calls to counters active on silo-c, count as failures until it has moved to the other gateways and the others have declared silo-c dead and activated its counters again. ")
	p("Only clients that can reach no gateway but silo-c's are set aside, and the run has none.\n")
	p("- **Lost writes**: every Add adds 1 and only this run adds to its counters, so a reply to an Add sent after k Adds were acknowledged (or after a reply with count v) must carry a count above max(k, v). A reply below that bound is a lost write. ")
	p("At the end every counter must hold at least its acknowledged Adds and at most the Adds sent (an Add that failed may have been counted).\n")
	p("- **Duplicates seen in replies**: each reply names the silo and activation that ran it. An activation X is a duplicate when another activation Y of the same counter received its first call after X's first reply arrived, answered it, and X then answered a call sent after that: X and Y were alive at the same time. ")
	p("Each activation counts once. The persistent state's ETags keep such a duplicate from losing writes (its stale write fails and it deactivates); the number is reported, not asserted.\n")
	p("- **Excess activations in silo reports**: once a second the run asks every silo's admin server (GET /api/v1/silo on its published port, over HTTPS with the admin token) how many Counter activations it holds, and sums the answers. ")
	p("With %d counters, a sum above %d means some counter is active on two silos at once, whether or not calls reach the second activation; the column gives the excess at its peak in the row, then the peak sum. ", r.Load.Counters, r.Load.Counters)
	p("A silo the host cannot reach (killed, or partitioned) is left out of the sum.\n")
	p("- A silo that exits on its own is restarted by its compose restart policy; any such restart fails the run.\n\n")
	writeOverloadMethod(b, r)
	p("Reproduce with `%s` (needs Docker; see docs/deploy.md). The program's flags change the hold and settle times, the load, the soak and the bounds: `go run ./deploy/e2e -help`.\n", r.makeTarget())
}

// oneLine shortens s to one line of at most n bytes, for a table.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "`", "'")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// writeOverload writes the overload soak's section.
func writeOverload(b *strings.Builder, r *result) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Overload\n\n")
	o := r.Overload
	if o == nil {
		p("The soak did not run: it runs with `-overload` (`make soak`), or the faults did not all run.\n\n")
		return
	}
	c := o.Config
	if o.Offered == 0 {
		p("The soak stopped before the overload: %v.\n\n", o.Err)
	} else {
		p("The cluster served **%.0f calls/s** in the capacity burst; for %v it was then offered **%.0f calls/s**, %g times that, open loop: %.0f%% of the calls to one hot counter, each of the others to a counter never called before.\n\n",
			o.Capacity, c.Duration, o.Offered, c.Factor, 100*c.HotShare)
	}
	if o.Err != nil && o.Offered != 0 {
		p("The soak stopped early: %v.\n\n", o.Err)
	}

	p("| calls | capacity burst | overload |\n| --- | ---: | ---: |\n")
	p("| ended | %d | %d |\n", o.Burst.Calls(), o.Overload.Calls())
	for oc := range numOutcomes {
		p("| %s | %d | %d |\n", oc, o.Burst.Outcomes[oc], o.Overload.Outcomes[oc])
	}
	p("| not sent by the load generator | - | %d |\n", o.Loop.NotSent)
	p("| admitted: p50 / p99 / max latency | %s / %s / %s | %s / %s / %s |\n\n",
		formatLatency(o.Burst.P50), formatLatency(o.Burst.P99), formatLatency(o.Burst.Max),
		formatLatency(o.Overload.P50), formatLatency(o.Overload.P99), formatLatency(o.Overload.Max))
	p("The admitted calls' p99 latency during the overload was %s, against a bound of %v; that of the %d calls to the hot counter alone was %s. ",
		formatLatency(o.Overload.P99), c.P99Bound, o.Overload.HotOK, formatLatency(o.Overload.HotP99))
	if n := o.Overload.Outcomes[outDeadline]; n > 0 {
		p("Of the %d calls that timed out, %d went to the hot counter. ", n, o.Overload.HotDeadline)
	}
	p("The load generator started %d of the %d calls that fell due (at most %d in flight at once, of %d allowed), %s late at the 99th percentile and %s at most.\n\n",
		o.Loop.Sent, o.Loop.Scheduled, o.Loop.MaxSeen, o.MaxInFlight, formatLatency(o.Overload.LagP99), formatLatency(o.Overload.LagMax))
	if o.Sched.Known {
		p("Its own goroutines waited for a processor up to %s at the 99.9th percentile and %s at most (the Go runtime's %s, by the upper bound of each bucket but the last, unbounded one), with its collector at GOGC=%d: a reply can be read that much late.\n\n",
			formatLatency(o.Sched.P999), formatLatency(o.Sched.Max), schedLatencies, soakGOGC)
	}
	for _, st := range []struct {
		name string
		s    stageStats
	}{{"capacity burst", o.Burst}, {"overload", o.Overload}} {
		for oc := outShed; oc < numOutcomes; oc++ {
			if e := st.s.Examples[oc]; e != "" {
				p("- %s, %s: `%s`\n", st.name, oc, oneLine(e, 240))
			}
		}
	}
	p("\n")

	p("| silo | memory at most (bound %s) | process RSS at most | Go heap at most | activations at most | CPU at most / mean | seconds shedding | shed requests | queue-limit refusals | wait-limit refusals | concurrency-limit refusals | memory collections |\n", formatBytes(c.RSSBound))
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, w := range o.Silos {
		mem, cpu := "no sample", "-"
		if w.MemSamples > 0 {
			mem = formatBytes(w.MemMax)
		}
		if w.CPUSamples > 0 {
			cpu = fmt.Sprintf("%.0f%% / %.0f%%", w.CPUMax, w.CPUSum/float64(w.CPUSamples))
		}
		p("| %s | %s | %s | %s | %d | %s | %d of %d | %s | %s | %s | %s | %s |\n", w.Service, mem, formatBytes(w.RSSMax), formatBytes(w.HeapMax), w.ActivationsMax, cpu,
			w.SheddingSamples, w.Scrapes-w.Missed, formatDelta(&w, metricShed), formatDelta(&w, metricQueueRefusals), formatDelta(&w, metricWaitRefusals),
			formatDelta(&w, metricLimitRefusals), formatDelta(&w, metricMemoryCollections))
	}
	p("\n")
	if o.MemErr != nil {
		p("A memory sample failed: %s.\n\n", oneLine(o.MemErr.Error(), 240))
	}

	if o.Offered != 0 && o.Err == nil {
		rc := o.Recovery
		p("After the drop to %d workers at %.0f calls/s at most, ", c.RecoveryWorkers, o.RecoveryRate)
		if rc.Recovered {
			p("every worker's calls succeeded again after **%s** (bound %v)", formatRecovery(rc), c.RecoveryBound)
		} else {
			p("calls were **still failing or stalled at the end of the %v watch** (bound %v)", c.RecoveryWatch, c.RecoveryBound)
		}
		p(": %d calls in %v, %d failed", rc.Calls, c.RecoveryWatch, rc.Failed)
		if rc.TopCount > 0 {
			p(", %s for %d of them, such as `%s`", rc.TopCode, rc.TopCount, oneLine(rc.TopExample, 240))
		}
		p(".\n\n")
		f := o.Final
		p("Final read: %d counters read (the hot one, every new one an Add to which was acknowledged, and the modest load's %d), %d Adds sent to them, %d acknowledged, counts summing to %d. ",
			f.Counters, o.RecoveryLoad.Counters, f.Sent, f.Acked, f.Final)
		p("Counters below their acknowledged Adds: %d (%d Adds lost). Counters above the Adds sent: %d. Unread: %d.\n\n", f.LostCounters, f.LostAdds, f.OverCounters, len(f.Unread))
	}
}

// formatLatency renders a latency to a tenth of a millisecond.
func formatLatency(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// formatDelta renders how much counter name grew on w over the soak.
func formatDelta(w *siloWatch, name string) string {
	d, ok := w.delta(name)
	if !ok {
		return "not exported"
	}
	return fmt.Sprintf("%.0f", d)
}

// writeOverloadMethod explains how the soak was made and what its
// figures mean.
func writeOverloadMethod(b *strings.Builder, r *result) {
	o := r.Overload
	if o == nil {
		return
	}
	c := o.Config
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("### The overload soak\n\n")
	p("After the faults and their final read, on the same client, the run measures what the cluster serves and then offers it more than that:\n\n")
	p("- The capacity: %d workers each call one call at a time, without pause, for %v; the calls that succeed in the last %v, per second, are the capacity. ",
		c.CapacityWorkers, c.CapacityWarmup+c.CapacityMeasure, c.CapacityMeasure)
	p("Every call of the burst goes to a new key: with the hot counter among them, the workers would queue behind its one activation, and the burst would measure the hot counter, not the cluster.\n")
	p("- The overload: for %v an open loop offers %g times the capacity. Every %v it starts the calls that fell due since, whether or not earlier ones returned, ", c.Duration, c.Factor, c.Tick)
	p("with at most %d in flight: the offered rate times the call timeout of %v, which is what would be in flight if every call took its whole timeout, so the bound cannot hide a queue shorter than the timeout (such a queue ends calls with DeadlineExceeded first). ",
		o.MaxInFlight, c.CallTimeout)
	p("A call that falls due while that many are in flight is not sent, and is counted apart: it is the load generator's, not a refusal by a silo. ")
	p("%.0f%% of the calls add 1 to one hot counter, which one activation serves one call at a time, so its queue limit decides what waits; ", 100*c.HotShare)
	p("each of the others adds 1 to a counter never called before, which a silo activates, reads from PostgreSQL and holds in memory until it is collected, so the silos' memory grows unless memory collection keeps up.\n")
	p("- The drop: at the end of the overload the load falls to %d workers, each paced to a call every %v at most (%.0f calls/s in all, %.0f%% of the capacity), over %d new counters, watched for %v.\n",
		c.RecoveryWorkers, o.RecoveryLoad.Pace.Round(time.Millisecond), o.RecoveryRate, 100*c.RecoveryShare, o.RecoveryLoad.Counters, c.RecoveryWatch)
	p("- The silos' protection, deploy/compose.yaml's environment for every silo, which the faults above ran with too: %s.\n\n", formatSettings(r.Protection))

	p("What the overload figures mean:\n\n")
	p("- **Outcomes**: each call ends in one class. OK. ResourceExhausted (shed): refused with a google.rpc.ErrorInfo of reason %s, by a silo whose CPU or heap is over its load-shedding limit, or by the client when every gateway's silo asked it to wait. ", refusal.Overloaded)
	p("ResourceExhausted (queue limit): any other ResourceExhausted, from an activation whose queue is at its hard limit, a request that waited past the queue wait limit, or a silo that runs as many new requests at once as its latency limit allows. DeadlineExceeded: the call waited out its %v timeout, in a queue somewhere (the client, a gateway, a silo, the database). Unavailable. Other. ", c.CallTimeout)
	p("A ResourceExhausted refusal is the cluster protecting itself and passes; any call of the last three classes, in the burst or the overload, fails the run: a timeout hides a queue, and Unavailable would mean a silo or a gateway was gone, which none may be. ")
	p("The overload must also refuse some calls: one that refused none did not overload the cluster.\n")
	p("- **Admitted latency**: from a call's start to its reply, of the calls that succeeded, kept in an HDR histogram (1 µs to 1 min, 3 significant figures); the p99 of the overload's is bounded by %v (-overload-p99). ", c.P99Bound)
	p("How late the load generator started calls against their schedule is reported apart, neither charged to the cluster nor hidden. The generator must send at least %.0f%% of the calls due, or it did not offer the rate claimed.\n", 100*minSentShare)
	p("- **Memory**: %s, of each silo's container, once a second from the start of the burst to the end of the watch after the drop; the most seen is bounded by %s (-overload-memory). ", o.MemoryMethod, formatBytes(c.RSSBound))
	p("It is what a container memory limit and the OOM killer go by; the image is FROM scratch, so nothing inside a container can read /proc for the run. ")
	p("**CPU** is the container's CPU time between successive samples, in percent of one core: the most, and the mean. ")
	p("Process RSS (process_resident_memory_bytes), Go heap (%s) and activations (%s, all types) are the most the silo's own /metrics reported in the same seconds.\n", metricHeap, metricActivations)
	p("- **Seconds shedding** counts the once-a-second scrapes of /metrics that found %s at 1, of those that answered. ", metricShedding)
	p("**Shed requests**, **queue-limit refusals**, **wait-limit refusals**, **concurrency-limit refusals** and **memory collections** are how much %s, %s, %s, %s and %s grew from a scrape before the burst to one after the watch; \"not exported\" when the silo's /metrics lacks the metric.\n",
		metricShed, metricQueueRefusals, metricWaitRefusals, metricLimitRefusals, metricMemoryCollections)
	p("- **Recovery time**: as for the faults, on the modest load's own seconds, counted from the drop: the start of the first clean second after the last unclean one, where a clean second has no failed call (a refusal is a failure here) and a call completed by every worker. The bound is %v (-overload-recovery).\n", c.RecoveryBound)
	p("- **Lost writes**: the rule of the faults, with the soak's own ledger: every reply must carry a count above what was acknowledged before its call, and at the end every counter an Add to which was acknowledged is read, the hot one, each new one and the modest load's, and must hold at least its acknowledged Adds and at most the Adds sent. A new counter none of whose Adds was acknowledged has nothing to lose and is not read. ")
	p("The read makes %d reads at once, tries a refused one again a second later up to %d times, and ends after %v: a counter still unread then fails the run.\n\n", readConcurrency, readAttempts, readBudget)
}

// formatSettings renders the silos' protection settings for the report.
func formatSettings(env []string) string {
	if len(env) == 0 {
		return "none found"
	}
	quoted := make([]string, len(env))
	for i, e := range env {
		quoted[i] = "`" + e + "`"
	}
	return strings.Join(quoted, ", ")
}
