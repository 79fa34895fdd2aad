package overload

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
)

// DefaultSamples is how many samples a window holds when Config.Samples
// is zero.
const DefaultSamples = 5

// Config configures a Monitor. Zero fields take the defaults given.
type Config struct {
	// CPULimit is the process's CPU use, as a fraction of Cores, over
	// which the monitor sheds; 0 never sheds for CPU.
	CPULimit float64
	// HeapLimit is the Go heap, in bytes, over which the monitor sheds; 0
	// never sheds for memory.
	HeapLimit uint64
	// LatencyLimit is the mean latency of the requests (see Latencies)
	// that the monitor's Limiter keeps them under; 0 makes no Limiter.
	// The monitor does not shed for latency: it limits the requests in
	// progress instead. One of the three limits must be set.
	LatencyLimit time.Duration
	// MinLimit is the floor of the Limiter's limit. Default
	// DefaultMinLimit.
	MinLimit int
	// Window is the span the averages cover. It must be positive.
	Window time.Duration
	// Hysteresis, in (0, 1]: once shedding, the monitor stops only when
	// every measure is under Hysteresis times its limit.
	Hysteresis float64
	// Samples is how many samples make a window: the monitor samples
	// every Window/Samples. Default DefaultSamples.
	Samples int

	// Clock paces and times the samples. Default: the real clock.
	Clock clockwork.Clock
	// CPUTime returns the CPU time the process has used since it
	// started. Default ProcessCPUTime.
	CPUTime func() time.Duration
	// Cores returns how many cores the process may use, of which
	// CPULimit is a fraction. Default runtime.GOMAXPROCS(0).
	Cores func() int
	// Heap returns the size of the Go heap in bytes. Default LiveHeap.
	Heap func() uint64
	// Latencies returns, for every request that has ended so far, the sum
	// of the time each took, and how many there are. Both only grow: the
	// monitor takes the mean latency of a window from their change across
	// it. Required when LatencyLimit is set; no default, since only the
	// silo knows its requests.
	Latencies func() (total time.Duration, ended uint64)
	// GCCycles returns how many garbage collections have completed, and
	// CollectGarbage runs one. While the monitor sheds for its heap and no
	// collection has completed for a whole window, it runs one: the live
	// heap changes only when a collection ends, and a silo that refuses
	// new work allocates so little that the next may be minutes away,
	// which would keep it shedding long after its memory fell. Defaults
	// GCCount and runtime.GC.
	GCCycles       func() uint64
	CollectGarbage func()

	// Flag is raised while the monitor sheds: a reader pays one atomic
	// load to know. Default: one of the monitor's own.
	Flag *atomic.Bool
	// Logger is told when shedding starts and when it stops, with the
	// measures. Default: no logs.
	Logger *zap.Logger
}

// Measures are a window's averages.
type Measures struct {
	CPU  float64 // CPU time used per unit of time, as a fraction of the cores
	Heap uint64  // the Go heap, in bytes
	// Latency is the mean time the requests that ended during the window
	// took; 0 when none ended. It counts a request only once it ends, so
	// a silo that has stalled reads 0, not high: a stall is caught by the
	// per-request wait limit and the calls' deadlines, not by this
	// measure.
	Latency time.Duration
}

// A Monitor samples the process's load on its own goroutine from Start to
// Close and raises its flag while the silo should shed. Its methods may
// be called from any goroutine.
type Monitor struct {
	cfg      Config
	interval time.Duration
	flag     *atomic.Bool
	log      *zap.Logger

	// ring holds the last Samples+1 samples: Samples intervals, which
	// span a window. taken counts the samples, so the oldest one is at
	// taken%len(ring) once the ring is full. since is when shedding
	// started. All three belong to sample, which runs on one goroutine
	// at a time.
	ring  []point
	taken int
	since time.Time

	// last is the latest window's outcome, for Measures and Reason.
	last atomic.Pointer[outcome]
	// limiter is adjusted each sample; nil without a LatencyLimit.
	limiter *Limiter

	gc       gcWatch
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// gcWatch is when the monitor last saw the count of completed garbage
// collections change. Monitor's goroutine only.
type gcWatch struct {
	cycles uint64
	at     time.Time
}

type point struct {
	at    time.Time
	cpu   time.Duration
	heap  uint64
	spent time.Duration // Latencies' total
	ended uint64        // Latencies' count
}

type outcome struct {
	m      Measures
	reason string // why the monitor sheds; "" when it does not
}

// New checks cfg and makes a Monitor; Start starts it.
func New(cfg Config) (*Monitor, error) {
	switch {
	case cfg.CPULimit < 0:
		return nil, fmt.Errorf("overload: CPULimit %v is negative", cfg.CPULimit)
	case cfg.LatencyLimit < 0:
		return nil, fmt.Errorf("overload: LatencyLimit %v is negative", cfg.LatencyLimit)
	case cfg.CPULimit == 0 && cfg.HeapLimit == 0 && cfg.LatencyLimit == 0:
		return nil, errors.New("overload: none of CPULimit, HeapLimit and LatencyLimit is set")
	case cfg.LatencyLimit > 0 && cfg.Latencies == nil:
		return nil, errors.New("overload: LatencyLimit is set but Latencies is nil: it has no default")
	case cfg.Window <= 0:
		return nil, fmt.Errorf("overload: Window %v is not positive", cfg.Window)
	case cfg.Hysteresis <= 0 || cfg.Hysteresis > 1:
		return nil, fmt.Errorf("overload: Hysteresis %v is not in (0, 1]", cfg.Hysteresis)
	case cfg.Samples < 0:
		return nil, fmt.Errorf("overload: Samples %d is negative", cfg.Samples)
	case cfg.MinLimit < 0:
		return nil, fmt.Errorf("overload: MinLimit %d is negative", cfg.MinLimit)
	}
	if cfg.MinLimit == 0 {
		cfg.MinLimit = DefaultMinLimit
	}
	if cfg.Samples == 0 {
		cfg.Samples = DefaultSamples
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.CPUTime == nil {
		cfg.CPUTime = ProcessCPUTime
	}
	if cfg.Cores == nil {
		cfg.Cores = func() int { return runtime.GOMAXPROCS(0) }
	}
	if cfg.Heap == nil {
		cfg.Heap = LiveHeap
	}
	if cfg.GCCycles == nil {
		cfg.GCCycles = GCCount
	}
	if cfg.CollectGarbage == nil {
		cfg.CollectGarbage = runtime.GC
	}
	if cfg.Flag == nil {
		cfg.Flag = new(atomic.Bool)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	m := &Monitor{
		cfg:      cfg,
		interval: max(cfg.Window/time.Duration(cfg.Samples), time.Nanosecond),
		flag:     cfg.Flag,
		log:      cfg.Logger,
		ring:     make([]point, cfg.Samples+1),
		stop:     make(chan struct{}),
	}
	if cfg.LatencyLimit > 0 {
		m.limiter = newLimiter(cfg.LatencyLimit, cfg.MinLimit, cfg.Samples, cfg.Logger)
	}
	return m, nil
}

// Limiter returns the limiter of new requests in progress that the
// monitor adjusts each sample, or nil when LatencyLimit is 0.
func (m *Monitor) Limiter() *Limiter { return m.limiter }

// Config returns the monitor's configuration, defaults filled in.
func (m *Monitor) Config() Config { return m.cfg }

// Start takes the first sample and starts sampling every Window/Samples
// until Close, or until ctx ends. The first decision comes when a whole
// window has been sampled. Call it once.
func (m *Monitor) Start(ctx context.Context) {
	m.sample()
	m.wg.Add(1)
	go m.run(ctx)
}

func (m *Monitor) run(ctx context.Context) {
	defer m.wg.Done()
	// A timer set again after each sample, rather than a ticker: a
	// sample the goroutine was late for is not followed by a burst, and
	// the time between samples is measured, not assumed.
	t := m.cfg.Clock.NewTimer(m.interval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-ctx.Done():
			return
		case <-t.Chan():
			m.sample()
			t.Reset(m.interval)
		}
	}
}

// Close stops sampling, waits for the monitor's goroutine and lowers the
// flag: a monitor that no longer measures sheds nothing. Idempotent.
func (m *Monitor) Close() {
	m.stopOnce.Do(func() { close(m.stop) })
	m.wg.Wait()
	m.flag.Store(false)
}

// Shedding reports whether the silo should refuse new requests now.
func (m *Monitor) Shedding() bool { return m.flag.Load() }

// Measures returns the averages of the latest whole window, and false
// before a whole window has been sampled.
func (m *Monitor) Measures() (Measures, bool) {
	if o := m.last.Load(); o != nil {
		return o.m, true
	}
	return Measures{}, false
}

// Reason says, for a refusal's message, which measures keep the monitor
// shedding, such as "cpu 97% over limit 95%"; "" when it does not shed.
func (m *Monitor) Reason() string {
	if o := m.last.Load(); o != nil {
		return o.reason
	}
	return ""
}

// sample takes one sample and, once the ring spans a window, decides.
func (m *Monitor) sample() {
	p := point{at: m.cfg.Clock.Now()}
	if m.cfg.CPULimit > 0 {
		p.cpu = m.cfg.CPUTime()
	}
	if m.cfg.HeapLimit > 0 {
		p.heap = m.cfg.Heap()
	}
	if m.cfg.LatencyLimit > 0 {
		p.spent, p.ended = m.cfg.Latencies()
	}
	m.ring[m.taken%len(m.ring)] = p
	m.taken++
	if m.limiter != nil && m.taken >= 2 {
		// The limiter acts on each interval's latency, not the window's:
		// a window's mean lags a change of load by half a window.
		prev := m.ring[(m.taken-2)%len(m.ring)]
		var mean time.Duration
		ended := p.ended - prev.ended
		if ended > 0 {
			mean = (p.spent - prev.spent) / time.Duration(ended)
		}
		m.limiter.adjust(p.at, mean, ended)
	}
	if m.taken < len(m.ring) {
		return
	}
	ms := m.average()
	was := m.flag.Load()
	now := m.decide(was, ms)
	o := &outcome{m: ms}
	if now {
		o.reason = m.reason(ms)
	}
	m.last.Store(o)
	if now && m.cfg.HeapLimit > 0 && float64(ms.Heap) >= m.cfg.Hysteresis*float64(m.cfg.HeapLimit) {
		m.freshenHeap(p.at)
	}
	switch {
	case now && !was:
		m.since = p.at
		m.flag.Store(true)
		m.log.Warn("load shedding started: the silo refuses new requests", m.fields(ms, zap.String("why", o.reason))...)
	case was && !now:
		m.flag.Store(false)
		m.log.Info("load shedding stopped: the silo takes new requests again", m.fields(ms, zap.Duration("shed_for", p.at.Sub(m.since)))...)
	}
}

// average returns the averages over the ring, which is full: the CPU
// time used between its oldest and newest samples per unit of time and
// core, the mean heap of every sample but the oldest (which only opens
// the window's first interval), and the latency summed between the oldest
// and newest samples per request ended in between.
func (m *Monitor) average() Measures {
	n := len(m.ring)
	oldest, newest := m.ring[m.taken%n], m.ring[(m.taken-1)%n]
	var ms Measures
	if m.cfg.CPULimit > 0 {
		elapsed := newest.at.Sub(oldest.at)
		cores := m.cfg.Cores()
		if elapsed > 0 && cores > 0 {
			ms.CPU = float64(newest.cpu-oldest.cpu) / (float64(elapsed) * float64(cores))
		}
	}
	if m.cfg.HeapLimit > 0 {
		var sum float64
		for i := 1; i < n; i++ {
			sum += float64(m.ring[(m.taken+i)%n].heap)
		}
		ms.Heap = uint64(sum / float64(n-1))
	}
	if m.cfg.LatencyLimit > 0 {
		if ended := newest.ended - oldest.ended; ended > 0 {
			ms.Latency = (newest.spent - oldest.spent) / time.Duration(ended)
		}
	}
	return ms
}

// decide returns whether to shed after a window that averaged ms, given
// whether the monitor sheds now: start when any measure is over its
// limit; stop only when every measure is under Hysteresis times its
// limit. Between the two, nothing changes, so a load at a limit does not
// flap.
func (m *Monitor) decide(shedding bool, ms Measures) bool {
	over, calm := false, true
	check := func(v, limit float64) {
		if limit <= 0 {
			return
		}
		if v > limit {
			over = true
		}
		if v >= m.cfg.Hysteresis*limit {
			calm = false
		}
	}
	check(ms.CPU, m.cfg.CPULimit)
	check(float64(ms.Heap), float64(m.cfg.HeapLimit))
	if shedding {
		return !calm
	}
	return over
}

// reason names the measures that keep the monitor shedding after a
// window that averaged ms.
func (m *Monitor) reason(ms Measures) string {
	var parts []string
	h := m.cfg.Hysteresis
	if l := m.cfg.CPULimit; l > 0 {
		switch {
		case ms.CPU > l:
			parts = append(parts, "cpu "+percent(ms.CPU)+" over limit "+percent(l))
		case ms.CPU >= h*l:
			parts = append(parts, "cpu "+percent(ms.CPU)+", not yet under "+percent(h*l))
		}
	}
	if l := m.cfg.HeapLimit; l > 0 {
		v, lf := float64(ms.Heap), float64(l)
		switch {
		case v > lf:
			parts = append(parts, "heap "+bytes(v)+" over limit "+bytes(lf))
		case v >= h*lf:
			parts = append(parts, "heap "+bytes(v)+", not yet under "+bytes(h*lf))
		}
	}
	return strings.Join(parts, ", ")
}

func (m *Monitor) fields(ms Measures, extra zap.Field) []zap.Field {
	f := []zap.Field{extra}
	if m.cfg.CPULimit > 0 {
		f = append(f, zap.Float64("cpu", ms.CPU), zap.Float64("cpu_limit", m.cfg.CPULimit))
	}
	if m.cfg.HeapLimit > 0 {
		f = append(f, zap.Uint64("heap_bytes", ms.Heap), zap.Uint64("heap_limit_bytes", m.cfg.HeapLimit))
	}
	if m.cfg.LatencyLimit > 0 {
		f = append(f, zap.Duration("latency", ms.Latency), zap.Duration("latency_limit", m.cfg.LatencyLimit))
	}
	return append(f, zap.Duration("window", m.cfg.Window))
}

// percent writes a fraction as a percentage with at most one decimal.
func percent(f float64) string { return oneDecimal(f*100) + "%" }

// bytes writes a size in binary units with at most one decimal.
func bytes(v float64) string {
	units := [...]string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return oneDecimal(v) + " " + units[i]
}

func oneDecimal(v float64) string {
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0")
}

// freshenHeap runs a garbage collection when none has completed for a
// whole window while the heap keeps the monitor shedding: the live heap
// it measures changes only when one does. Monitor's goroutine only.
func (m *Monitor) freshenHeap(at time.Time) {
	if c := m.cfg.GCCycles(); c != m.gc.cycles || m.gc.at.IsZero() {
		m.gc = gcWatch{cycles: c, at: at}
		return
	}
	if at.Sub(m.gc.at) < m.cfg.Window {
		return
	}
	m.cfg.CollectGarbage()
	m.gc = gcWatch{cycles: m.cfg.GCCycles(), at: at}
}
