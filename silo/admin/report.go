package admin

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/granaryio/granary/silo/metrics"
	"github.com/jonboulle/clockwork"
)

// sampler takes, every interval, the silo's hottest grains and the change
// of its per-type call and error counts, and keeps the rates of the last
// interval for the reports. It owns one goroutine, ended by stop.
type sampler struct {
	sl       *silo.Silo
	m        *metrics.Metrics // may be nil: no per-type rates
	clock    clockwork.Clock
	interval time.Duration
	stopc    chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	// prevAt, prevTotals and prevStreams are the previous sample's time
	// and counts: the sampler goroutine's alone.
	prevAt      time.Time
	prevTotals  map[string]metrics.TypeCalls
	prevStreams silo.StreamStats

	mu   sync.Mutex
	last sample // guarded by mu
}

// sample is what one sampling interval measured.
type sample struct {
	hot     []adminapi.HotGrain // Silo left empty
	rates   map[string]rate     // by grain type
	streams streamRates
}

// rate is a grain type's calls and failed calls per second.
type rate struct{ calls, errors float64 }

// streamRates are the streams' events published, delivered and dropped
// per second.
type streamRates struct{ published, delivered, dropped float64 }

// newSampler starts a sampler of sl. Its first interval begins now: the
// calls counted so far are taken as the baseline.
func newSampler(sl *silo.Silo, m *metrics.Metrics, clock clockwork.Clock, interval time.Duration) *sampler {
	sp := &sampler{
		sl: sl, m: m, clock: clock, interval: interval,
		stopc: make(chan struct{}), done: make(chan struct{}),
		prevAt: clock.Now(),
	}
	sl.HotGrains(HotLimit) // restarts the silo's per-activation counts
	sp.prevTotals = sp.totals()
	sp.prevStreams, _ = sl.StreamStats()
	// The ticker is made before the goroutine starts, so that a test that
	// advances a fake clock right after Attach reaches it.
	tk := clock.NewTicker(interval)
	go sp.run(tk)
	return sp
}

func (sp *sampler) run(tk clockwork.Ticker) {
	defer close(sp.done)
	defer tk.Stop()
	for {
		select {
		case <-sp.stopc:
			return
		case <-tk.Chan():
			sp.take()
		}
	}
}

// take measures one interval. Sampler goroutine only.
func (sp *sampler) take() {
	now := sp.clock.Now()
	secs := now.Sub(sp.prevAt).Seconds()
	if secs <= 0 {
		secs = sp.interval.Seconds()
	}
	loads := sp.sl.HotGrains(HotLimit)
	hot := make([]adminapi.HotGrain, 0, len(loads))
	for _, l := range loads { // only activations that took calls
		hot = append(hot, adminapi.HotGrain{Grain: l.ID.String(), CallRate: float64(l.Calls) / secs})
	}
	totals := sp.totals()
	rates := make(map[string]rate, len(totals))
	for typ, t := range totals {
		prev := sp.prevTotals[typ]
		rates[typ] = rate{
			calls:  float64(delta(t.Calls, prev.Calls)) / secs,
			errors: float64(delta(t.Errors, prev.Errors)) / secs,
		}
	}
	st, _ := sp.sl.StreamStats()
	prev := sp.prevStreams
	streams := streamRates{
		published: float64(delta(st.Published, prev.Published)) / secs,
		delivered: float64(delta(st.Delivered, prev.Delivered)) / secs,
		dropped:   float64(delta(st.Dropped, prev.Dropped)) / secs,
	}
	sp.prevAt, sp.prevTotals, sp.prevStreams = now, totals, st
	sp.mu.Lock()
	sp.last = sample{hot: hot, rates: rates, streams: streams}
	sp.mu.Unlock()
}

// delta is cur - prev for a counter, 0 if it went back.
func delta(cur, prev uint64) uint64 {
	if cur < prev {
		return 0
	}
	return cur - prev
}

// totals returns the metrics' cumulative counts by grain type.
func (sp *sampler) totals() map[string]metrics.TypeCalls {
	out := map[string]metrics.TypeCalls{}
	if sp.m == nil {
		return out
	}
	for _, t := range sp.m.CallTotals() {
		out[t.Type] = t
	}
	return out
}

// latest returns the last sample. Any goroutine.
func (sp *sampler) latest() sample {
	if sp == nil {
		return sample{}
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.last
}

// stop ends the sampler's goroutine and waits for it. Idempotent.
func (sp *sampler) stop() {
	sp.stopOnce.Do(func() { close(sp.stopc) })
	<-sp.done
}

// siloReport is what this silo says of itself.
func (s *Server) siloReport(a *attachment) adminapi.SiloReport {
	info := a.sl.Info()
	st := a.sl.Stats()
	self := selfName(info)
	r := adminapi.SiloReport{
		Name:    info.Name,
		Member:  info.Member,
		Status:  info.Status,
		Started: info.Started,
		Addresses: adminapi.Addresses{
			Gossip:  info.GossipAddr,
			GRPC:    info.GRPCAddr,
			Gateway: info.GatewayAddr,
			Admin:   info.AdminAddr,
		},
		Activations:  st.Activations,
		QueuedTurns:  st.Scheduler.QueuedGroups,
		BlockedTurns: st.Scheduler.BlockedTurns,
		Processors:   st.Scheduler.Processors,
		Overload: adminapi.Overload{
			Shedding:          st.Overload.Shedding,
			ShedRequests:      st.Overload.Shed,
			QueueWarnings:     st.Overload.QueueWarnings,
			QueueRefusals:     st.Overload.QueueRefusals,
			WaitRefusals:      st.Overload.WaitRefusals,
			LimitRefusals:     st.Overload.LimitRefusals,
			ConcurrencyLimit:  st.Overload.ConcurrencyLimit,
			Concurrency:       st.Overload.Concurrency,
			MemoryCollections: st.Overload.MemoryCollections,
			AbandonedTurns:    st.Overload.AbandonedTurns,
		},
		Types:  []adminapi.TypeReport{},
		Hot:    []adminapi.HotGrain{},
		Errors: []adminapi.CallError{},
	}
	if r.Addresses.Admin == "" {
		r.Addresses.Admin = s.Addr()
	}
	if !info.Started.IsZero() {
		r.UptimeSeconds = max(0, s.clock.Since(info.Started).Seconds())
	}
	last := a.sampler.latest()

	index := map[string]int{} // type -> its place in r.Types
	for _, ts := range a.sl.TypeStats() {
		index[ts.Type] = len(r.Types)
		r.Types = append(r.Types, adminapi.TypeReport{Type: ts.Type, Activations: ts.Activations})
	}
	if a.m != nil {
		for _, tc := range a.m.CallTotals() {
			i, ok := index[tc.Type]
			if !ok {
				// Counted but not registered here: shown all the same.
				i = len(r.Types)
				index[tc.Type] = i
				r.Types = append(r.Types, adminapi.TypeReport{Type: tc.Type})
			}
			r.Types[i].Calls, r.Types[i].Errors = tc.Calls, tc.Errors
		}
	}
	for i := range r.Types {
		rt := last.rates[r.Types[i].Type]
		r.Types[i].CallRate, r.Types[i].ErrorRate = rt.calls, rt.errors
	}
	slices.SortFunc(r.Types, func(x, y adminapi.TypeReport) int { return cmp.Compare(x.Type, y.Type) })

	for _, h := range last.hot {
		h.Silo = self
		r.Hot = append(r.Hot, h)
	}
	if a.m != nil {
		for _, e := range a.m.RecentErrors() {
			if len(r.Errors) == ErrorLimit {
				break
			}
			r.Errors = append(r.Errors, adminapi.CallError{
				Time:    e.Time,
				Grain:   e.Grain.String(),
				Method:  e.Method,
				Code:    e.Code.String(),
				Message: e.Message,
				Silo:    self,
			})
		}
	}
	r.Streams = streamsSummary(a, self)
	return r
}

// selfName is how reports name a silo: its member ID in a cluster, its
// name alone.
func selfName(info silo.Info) string {
	if info.Member != "" {
		return info.Member
	}
	return info.Name
}
