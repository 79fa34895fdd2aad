package metrics

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/granaryio/granary/grain"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// numCodes is the number of gRPC codes with a name: OK to
// Unauthenticated. A call that ends with another code is counted as
// Unknown, so the code label has at most these values whatever grains
// return; RecentErrors keeps its own code.
const numCodes = int(codes.Unauthenticated) + 1

// maxErrorMessage bounds the message a CallError keeps, in bytes.
const maxErrorMessage = 512

// methodStats holds the counts of one method, by the code its calls
// ended with. Made on the method's first call and kept for the life of
// the Metrics: a grain type's methods are a small fixed set.
type methodStats struct {
	typ, method string
	byCode      [numCodes]atomic.Pointer[callStats]
}

// callStats is the duration histogram of one method's calls that ended
// with one code. Its bucket counts are the calls; sum is in nanoseconds.
// Any goroutine.
type callStats struct {
	counts []atomic.Uint64 // len(bounds)+1, the last the overflow
	sum    atomic.Int64
}

// observe records a call of d nanoseconds: a binary search over bounds
// and two atomic adds, no lock and no allocation.
func (cs *callStats) observe(d int64, bounds []int64) {
	lo, hi := 0, len(bounds)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if bounds[mid] < d {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	cs.counts[lo].Add(1)
	cs.sum.Add(d)
}

// snapshot returns the calls counted, their total duration in seconds,
// and the cumulative bucket counts keyed by upper bound, as Prometheus
// wants them.
func (cs *callStats) snapshot(secs []float64) (count uint64, sum float64, buckets map[float64]uint64) {
	counts := make([]uint64, len(cs.counts))
	for i := range cs.counts {
		counts[i] = cs.counts[i].Load()
	}
	count, buckets = cumulative(secs, counts, func(s float64) float64 { return s })
	return count, float64(cs.sum.Load()) / 1e9, buckets
}

func (m *Metrics) newCallStats() *callStats {
	return &callStats{counts: make([]atomic.Uint64, len(m.bounds)+1)}
}

// forCode returns the counts of ms's calls that ended with code (Unknown
// for a code without a name), making them on first use. Any goroutine;
// lock-free.
func (m *Metrics) forCode(ms *methodStats, code codes.Code) *callStats {
	if int(code) >= numCodes {
		code = codes.Unknown
	}
	slot := &ms.byCode[code]
	if cs := slot.Load(); cs != nil {
		return cs
	}
	slot.CompareAndSwap(nil, m.newCallStats())
	return slot.Load()
}

// each calls fn with each code ms has counted calls for and their stats.
func (ms *methodStats) each(fn func(code codes.Code, cs *callStats)) {
	for i := range ms.byCode {
		if cs := ms.byCode[i].Load(); cs != nil {
			fn(codes.Code(i), cs)
		}
	}
}

// methodFor returns the stats of md, making them on md's first call.
// Any goroutine.
func (m *Metrics) methodFor(ctx grain.Context, md *grain.MethodDesc) *methodStats {
	if v, ok := m.methods.Load(md); ok {
		return v.(*methodStats)
	}
	v, _ := m.methods.LoadOrStore(md, &methodStats{typ: ctx.ID().Type, method: md.FullName})
	return v.(*methodStats)
}

// IncomingFilter returns the filter that counts and times each request a
// grain of the silo receives, by grain type, method and the gRPC code it
// ended with, and keeps the failed ones in the recent-errors ring. A
// method that panics is counted with code Internal, which is what its
// caller gets. The time is the filter's own: from when the request's
// turn reaches the filter to when the method returns, so it includes the
// waits of the method's own calls but not the request's time in its
// activation's queue, and a filter placed after this one is timed too.
// Put it first in silo.Config.IncomingFilters to time the others.
//
// On the success path the filter takes no lock and allocates nothing once
// a method has been called: two monotonic clock reads, a map load and
// two atomic adds.
func (m *Metrics) IncomingFilter() grain.IncomingFilter { return m.filter }

func (m *Metrics) filter(ctx grain.Context, md *grain.MethodDesc, req proto.Message, next grain.Invocation) (proto.Message, error) {
	start := m.elapsed()
	returned := false
	defer func() {
		if !returned {
			// The method panicked; the silo recovers and answers Internal.
			m.record(ctx, md, m.elapsed()-start, codes.Internal, nil)
		}
	}()
	resp, err := next(ctx, req)
	returned = true
	code := codes.OK
	if err != nil {
		code = grain.Code(err)
	}
	m.record(ctx, md, m.elapsed()-start, code, err)
	return resp, err
}

// record counts one call of md that took d and ended with code: err, or
// a panic when err is nil and code is not OK.
func (m *Metrics) record(ctx grain.Context, md *grain.MethodDesc, d time.Duration, code codes.Code, err error) {
	ms := m.methodFor(ctx, md)
	m.forCode(ms, code).observe(max(int64(d), 0), m.bounds)
	if code != codes.OK {
		m.keepError(ctx.ID(), md.FullName, code, err)
	}
}

// elapsed returns the time since New. With the real clock it reads only
// the monotonic clock: a full time.Now reads the wall clock too, which is
// slow on some virtual machines, and a call reads the clock twice (see
// BenchmarkClockRead and docs/benchmarks.md#the-metrics-filters-clock).
func (m *Metrics) elapsed() time.Duration {
	if m.realClock {
		return time.Since(m.epoch)
	}
	return m.cfg.Clock.Since(m.epoch)
}

// CallError is a failed call, as RecentErrors reports it.
type CallError struct {
	Time    time.Time // when the call ended, by Config.Clock
	Grain   grain.ID  // the grain that was called
	Method  string    // the method's full name, such as "/bank.Account/Deposit"
	Code    codes.Code
	Message string // the status message, cut to 512 bytes
}

// errorRing keeps the latest failed calls. mu guards it; it is touched
// only on the failure path.
type errorRing struct {
	mu   sync.Mutex
	buf  []CallError
	next int // where the next error goes
	full bool
}

func (m *Metrics) keepError(id grain.ID, method string, code codes.Code, err error) {
	msg := "the method panicked"
	if err != nil {
		msg = cutMessage(status.Convert(err).Message())
	}
	e := CallError{Time: m.cfg.Clock.Now(), Grain: id, Method: method, Code: code, Message: msg}
	r := &m.errors
	r.mu.Lock()
	r.buf[r.next] = e
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
	r.mu.Unlock()
}

// cutMessage cuts s to maxErrorMessage bytes at a character boundary.
func cutMessage(s string) string {
	if len(s) <= maxErrorMessage {
		return s
	}
	cut := maxErrorMessage
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// RecentErrors returns the latest failed calls (at most
// Config.RecentErrors), newest first. Any goroutine.
func (m *Metrics) RecentErrors() []CallError {
	r := &m.errors
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	if r.full {
		n = len(r.buf)
	}
	out := make([]CallError, 0, n)
	for i := range n {
		out = append(out, r.buf[(r.next-1-i+len(r.buf))%len(r.buf)])
	}
	return out
}

// TypeCalls is the number of requests the grains of one type received,
// and how many of them failed (ended with a code other than OK).
type TypeCalls struct {
	Type          string
	Calls, Errors uint64
}

// CallTotals returns the requests counted since New by grain type,
// sorted by type. Any goroutine.
func (m *Metrics) CallTotals() []TypeCalls {
	byType := map[string]*TypeCalls{}
	m.methods.Range(func(_, v any) bool {
		ms := v.(*methodStats)
		tc := byType[ms.typ]
		if tc == nil {
			tc = &TypeCalls{Type: ms.typ}
			byType[ms.typ] = tc
		}
		ms.each(func(code codes.Code, cs *callStats) {
			var n uint64
			for i := range cs.counts {
				n += cs.counts[i].Load()
			}
			tc.Calls += n
			if code != codes.OK {
				tc.Errors += n
			}
		})
		return true
	})
	out := make([]TypeCalls, 0, len(byType))
	for _, tc := range byType {
		out = append(out, *tc)
	}
	slices.SortFunc(out, func(a, b TypeCalls) int { return cmp.Compare(a.Type, b.Type) })
	return out
}

// callCollector exports the grain-call families from the counts the
// filter keeps. Registered by New.
type callCollector struct{ m *Metrics }

// The help of the grain-call families.
const (
	callsHelp        = "Requests the grains of this silo received and finished, by grain type, method (full gRPC name) and the gRPC status code they ended with (a panic ends with Internal)."
	callDurationHelp = "Time in seconds a grain took to answer a request, from the metrics filter to the method's return, by grain type, method and gRPC status code."
)

var (
	callsDesc        = prometheus.NewDesc("granary_grain_calls_total", callsHelp, []string{"type", "method", "code"}, nil)
	callDurationDesc = prometheus.NewDesc("granary_grain_call_duration_seconds", callDurationHelp, []string{"type", "method", "code"}, nil)
)

func (c callCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- callsDesc
	ch <- callDurationDesc
}

func (c callCollector) Collect(ch chan<- prometheus.Metric) {
	secs := c.m.cfg.LatencyBuckets
	c.m.methods.Range(func(_, v any) bool {
		ms := v.(*methodStats)
		ms.each(func(code codes.Code, cs *callStats) {
			count, sum, buckets := cs.snapshot(secs)
			labels := []string{ms.typ, ms.method, code.String()}
			ch <- prometheus.MustNewConstMetric(callsDesc, prometheus.CounterValue, float64(count), labels...)
			ch <- constHistogram(callDurationDesc, count, sum, buckets, labels...)
		})
		return true
	})
}

// constHistogram is prometheus.NewConstHistogram, reporting a failure as
// an invalid metric (which fails the scrape with the reason) instead of
// panicking.
func constHistogram(desc *prometheus.Desc, count uint64, sum float64, buckets map[float64]uint64, labels ...string) prometheus.Metric {
	h, err := prometheus.NewConstHistogram(desc, count, sum, buckets, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return h
}
