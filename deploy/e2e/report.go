package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
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

// writeMarkdown writes the report: the table of faults, the final check,
// the verdict, and how the run was made and measured.
func writeMarkdown(w io.Writer, r *result) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Resilience under chaos\n\n")
	p("This page is written by `make e2e` (the program `deploy/e2e`); do not edit it by hand.\n")
	p("It records the last run: %s, %v long.\n\n", r.Started.UTC().Format(time.RFC3339), r.Elapsed.Round(time.Second))
	if r.passed() {
		p("**Verdict: passed.** Every fault recovered within %v, and no acknowledged write was lost.\n\n", r.Bound)
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
	p("Each call is bounded by %v; a worker waits %v after a failure. The counters' keys are new to the run.\n", r.Load.CallTimeout, r.Load.Backoff)
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
	p("Reproduce with `make e2e` (needs Docker; see docs/deploy.md). The program's flags change the hold and settle times, the load and the bound: `go run ./deploy/e2e -help`.\n")
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
