package silo

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The chaos test of the issue: load runs while silos are stopped, started
// and killed every second or two. It reports the failed calls and the
// duplicate activations it saw, and checks that every duplicate resolves
// to one activation once the chaos ends.
//
// GRANARY_CHAOS_DURATION (a time.Duration) sets how long the chaos runs,
// GRANARY_CHAOS_SEED (a uint64) replays a run's choices: the actions, the
// silos they hit, and each caller's keys and silos. Scheduling is not
// replayed, so a replay explores the same schedule of actions, not the
// same interleaving.

const (
	chaosDefaultDuration = 8 * time.Second
	chaosCallers         = 32
	chaosKeys            = 200
	chaosMinSilos        = 2 // stop and kill leave at least this many
	chaosMaxSilos        = 5 // start adds silos up to this many
	chaosPaceMin         = time.Second
	chaosPaceMax         = 2 * time.Second
	// chaosCallTimeout bounds each load call: a call still unanswered
	// then is counted as DeadlineExceeded.
	chaosCallTimeout = 5 * time.Second
	// chaosResolveTimeout is how long the cluster has, once it converged
	// after the chaos, to answer every key from one activation.
	chaosResolveTimeout = 5 * time.Second
)

// chaosSettings reads the duration and seed from the environment.
func chaosSettings(t *testing.T) (time.Duration, uint64) {
	t.Helper()
	dur := chaosDefaultDuration
	if v := os.Getenv("GRANARY_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("GRANARY_CHAOS_DURATION=%q: want a positive duration such as 60s", v)
		}
		dur = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("GRANARY_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("GRANARY_CHAOS_SEED=%q: want an unsigned integer", v)
		}
		seed = s
	}
	return dur, seed
}

// actSpan is what one caller, or all of them merged, saw of one
// activation, relative to the test's start: when the last call it
// answered started, and when the calls it answered ended.
type actSpan struct {
	lastStart         time.Duration
	firstEnd, lastEnd time.Duration
	n                 int
}

func (s *actSpan) add(start, end time.Duration) {
	s.merge(&actSpan{lastStart: start, firstEnd: end, lastEnd: end, n: 1})
}

func (s *actSpan) merge(o *actSpan) {
	if s.n == 0 {
		*s = *o
		return
	}
	s.lastStart = max(s.lastStart, o.lastStart)
	s.firstEnd, s.lastEnd = min(s.firstEnd, o.firstEnd), max(s.lastEnd, o.lastEnd)
	s.n += o.n
}

// overlaps reports whether two activations of one grain certainly lived
// at the same time: each answered a call that started after the other
// had answered one. Activations that follow each other (the first one's
// silo stopped or died) never do: every answer of the first comes before
// every answer of the second. A late reply seen by a slow caller does
// not count, since only the start of the later call matters.
func (s *actSpan) overlaps(o *actSpan) bool {
	return s.lastStart > o.firstEnd && o.lastStart > s.firstEnd
}

// chaosFailure counts the failed calls of one reason.
type chaosFailure struct {
	code    codes.Code
	n       int
	example error
	at      []time.Duration // when each failed, since the test started
}

// chaosTally is what callers saw; each caller keeps its own and they are
// merged at the end.
type chaosTally struct {
	calls, ok int
	// gone are the calls that failed because the silo the caller went
	// through was stopping or killed: not failures of the cluster.
	gone map[string]*chaosFailure
	// failed are the other failed calls, by reason.
	failed map[string]*chaosFailure
	// spans holds, by grain key and then by activation (silo#act), when
	// it answered.
	spans map[string]map[string]*actSpan
}

func newChaosTally() *chaosTally {
	return &chaosTally{gone: map[string]*chaosFailure{}, failed: map[string]*chaosFailure{}, spans: map[string]map[string]*actSpan{}}
}

func (ct *chaosTally) answered(key, act string, start, end time.Duration) {
	m := ct.spans[key]
	if m == nil {
		m = map[string]*actSpan{}
		ct.spans[key] = m
	}
	sp := m[act]
	if sp == nil {
		sp = &actSpan{}
		m[act] = sp
	}
	sp.add(start, end)
}

func (ct *chaosTally) fail(into map[string]*chaosFailure, err error, at time.Duration) {
	reason := failureReason(err)
	f := into[reason]
	if f == nil {
		f = &chaosFailure{code: status.Code(err), example: err}
		into[reason] = f
	}
	f.n++
	f.at = append(f.at, at)
}

func (ct *chaosTally) merge(o *chaosTally) {
	ct.calls += o.calls
	ct.ok += o.ok
	for _, pair := range [][2]map[string]*chaosFailure{{ct.gone, o.gone}, {ct.failed, o.failed}} {
		for r, f := range pair[1] {
			if g := pair[0][r]; g != nil {
				g.n += f.n
				g.at = append(g.at, f.at...)
			} else {
				pair[0][r] = &chaosFailure{code: f.code, n: f.n, example: f.example, at: slices.Clone(f.at)}
			}
		}
	}
	for key, acts := range o.spans {
		for act, sp := range acts {
			m := ct.spans[key]
			if m == nil {
				m = map[string]*actSpan{}
				ct.spans[key] = m
			}
			if m[act] == nil {
				m[act] = &actSpan{}
			}
			m[act].merge(sp)
		}
	}
}

var (
	reMember = regexp.MustCompile(`\bs\d+(-\d+)?\b`)
	reGrain  = regexp.MustCompile(`probe\.Probe/c\d+`)
	reNumber = regexp.MustCompile(`\d+`)
)

// failureReason names why a call failed: its code and the start of its
// message, with silo names, grain IDs and numbers taken out so that the
// failures of one kind count together.
func failureReason(err error) string {
	st := status.Convert(err)
	msg := reGrain.ReplaceAllString(st.Message(), "<grain>")
	msg = reMember.ReplaceAllString(msg, "<silo>")
	msg = reNumber.ReplaceAllString(msg, "N")
	if len(msg) > 72 {
		msg = msg[:72] + "…"
	}
	return st.Code().String() + " " + msg
}

// chaosLogger counts the warnings and errors the silos log, by message,
// and prints them when the test runs verbose. The duplicate activations
// the directory finds show up here.
type chaosLogger struct {
	mu     sync.Mutex
	counts map[string]int
}

func (cl *chaosLogger) tweak(cfg *Config) {
	out := zapcore.AddSync(io.Discard)
	if testing.Verbose() {
		out = zapcore.Lock(os.Stderr)
	}
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), out, zap.WarnLevel)
	cfg.Logger = zap.New(core, zap.Hooks(func(e zapcore.Entry) error {
		cl.mu.Lock()
		cl.counts[e.Message]++
		cl.mu.Unlock()
		return nil
	})).Named(cfg.Name)
}

// sortedLive returns the running silos sorted by name, so that a seeded
// choice among them is replayed.
func (tc *testCluster) sortedLive() []*Silo {
	ss := tc.live()
	slices.SortFunc(ss, func(a, b *Silo) int { return cmp.Compare(a.cfg.Name, b.cfg.Name) })
	return ss
}

// chaosCall calls probe key through via, bounded by ctx and
// chaosCallTimeout.
func chaosCall(ctx context.Context, via *Silo, key string) (*probe.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, chaosCallTimeout)
	defer cancel()
	return probe.NewProbeRef(via, key).Call(ctx, &probe.Request{})
}

// runChaosCaller calls random keys through random live silos until stop
// closes.
func runChaosCaller(tc *testCluster, rng *rand.Rand, ks []string, t0 time.Time, stop <-chan struct{}) *chaosTally {
	ct := newChaosTally()
	for {
		select {
		case <-stop:
			return ct
		default:
		}
		ss := tc.sortedLive()
		via := ss[rng.IntN(len(ss))]
		key := ks[rng.IntN(len(ks))]
		start := time.Since(t0)
		r, err := chaosCall(context.Background(), via, key)
		end := time.Since(t0)
		ct.calls++
		switch {
		case err == nil:
			ct.ok++
			ct.answered(key, where(r), start, end)
		case via.Ready() != nil: // stopping, or stopped
			ct.fail(ct.gone, err, end)
		default:
			ct.fail(ct.failed, err, end)
		}
	}
}

// chaosAction is one change the chaos made to the cluster.
type chaosAction struct {
	at   time.Duration // since the test started
	what string        // stop, kill or start
	silo string
	s    *Silo
	took time.Duration
	live int // silos running after it
}

// runChaos stops, kills and starts silos at random every chaosPaceMin to
// chaosPaceMax until dur has passed. The test's goroutine: the harness
// may fail the test.
func runChaos(tc *testCluster, rng *rand.Rand, dur time.Duration, t0 time.Time, next int) []chaosAction {
	var actions []chaosAction
	pace := func() time.Duration {
		return chaosPaceMin + time.Duration(rng.Int64N(int64(chaosPaceMax-chaosPaceMin)+1))
	}
	end := time.NewTimer(dur)
	defer end.Stop()
	tick := time.NewTimer(pace())
	defer tick.Stop()
	for {
		select {
		case <-end.C:
			return actions
		case <-tick.C:
		}
		ss := tc.sortedLive()
		var can []string
		if len(ss) > chaosMinSilos {
			can = append(can, "stop", "kill")
		}
		if len(ss) < chaosMaxSilos {
			can = append(can, "start")
		}
		a := chaosAction{at: time.Since(t0), what: can[rng.IntN(len(can))]}
		begin := time.Now()
		switch a.what {
		case "start":
			a.silo = "s" + strconv.Itoa(next)
			next++
			a.s = tc.start(a.silo)
		case "stop":
			a.s = ss[rng.IntN(len(ss))]
			a.silo = a.s.cfg.Name
			tc.stop(a.silo)
		case "kill":
			a.s = ss[rng.IntN(len(ss))]
			a.silo = a.s.cfg.Name
			tc.kill(a.silo)
		}
		a.took = time.Since(begin)
		a.live = len(tc.live())
		actions = append(actions, a)
		tick.Reset(pace())
	}
}

// chaosDuplicate is a grain that certainly answered from two activations
// at once.
type chaosDuplicate struct {
	key  string
	acts []string // silo#act [first answer, last answer], in order
}

// findDuplicates lists, per grain, the activations that overlapped.
func findDuplicates(spans map[string]map[string]*actSpan) []chaosDuplicate {
	var dups []chaosDuplicate
	for key, acts := range spans {
		names := make([]string, 0, len(acts))
		for a := range acts {
			names = append(names, a)
		}
		slices.SortFunc(names, func(a, b string) int { return cmp.Compare(acts[a].firstEnd, acts[b].firstEnd) })
		in := map[string]bool{}
		for i, a := range names {
			for _, b := range names[i+1:] {
				if acts[a].overlaps(acts[b]) {
					in[a], in[b] = true, true
				}
			}
		}
		if len(in) == 0 {
			continue
		}
		d := chaosDuplicate{key: key}
		for _, a := range names {
			if in[a] {
				sp := acts[a]
				d.acts = append(d.acts, fmt.Sprintf("%s [%.2fs..%.2fs, %d calls]", a, sp.firstEnd.Seconds(), sp.lastEnd.Seconds(), sp.n))
			}
		}
		dups = append(dups, d)
	}
	slices.SortFunc(dups, func(a, b chaosDuplicate) int { return cmp.Compare(a.key, b.key) })
	return dups
}

// chaosRound calls every key from every live silo and returns what is
// wrong: a key that fails, answers from more than one activation, or is
// held by more than one silo's catalog. Calls still to make when ctx
// ends fail.
func chaosRound(ctx context.Context, tc *testCluster, ks []string) []string {
	ss := tc.sortedLive()
	answers := make([][]string, len(ss)) // by silo, by key: silo#act or the error
	var wg sync.WaitGroup
	for i, s := range ss {
		answers[i] = make([]string, len(ks))
		wg.Go(func() {
			for j, k := range ks {
				r, err := chaosCall(ctx, s, k)
				if err != nil {
					answers[i][j] = "error: " + err.Error()
				} else {
					answers[i][j] = where(r)
				}
			}
		})
	}
	wg.Wait()
	var bad []string
	for j, k := range ks {
		seen := map[string][]string{} // answer → the silos that got it
		for i, s := range ss {
			seen[answers[i][j]] = append(seen[answers[i][j]], s.cfg.Name)
		}
		var held []string
		for _, s := range ss {
			if a := localActivation(s, probe.ProbeGrainType, k); a != nil {
				held = append(held, fmt.Sprintf("%s#%d", s.cfg.Name, a.ActID))
			}
		}
		single := len(seen) == 1
		for a := range seen {
			single = single && !strings.HasPrefix(a, "error: ")
		}
		if single && len(held) <= 1 {
			continue
		}
		var parts []string
		for a, via := range seen {
			parts = append(parts, fmt.Sprintf("%s (via %s)", a, strings.Join(via, ",")))
		}
		slices.Sort(parts)
		bad = append(bad, fmt.Sprintf("%s: answers %s; catalogs hold %v", k, strings.Join(parts, "; "), held))
	}
	return bad
}

// TestClusterChaos runs a load of chaosCallers callers over chaosKeys
// grains while silos are stopped, killed and started, then checks that
// only the departure of silos failed calls and that every grain answers
// from one activation once the cluster converged.
func TestClusterChaos(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("chaos test: skipped with -short")
	}
	dur, seed := chaosSettings(t)
	t.Logf("chaos: seed %d, duration %v (replay with GRANARY_CHAOS_SEED=%d GRANARY_CHAOS_DURATION=%v)", seed, dur, seed, dur)
	logs := &chaosLogger{counts: map[string]int{}}
	tc := newTestCluster(t, []string{"s1", "s2", "s3", "s4"}, clusterOpt{tweak: logs.tweak})
	all := tc.sortedLive() // every silo that ran, for the directory counters
	ks := keys("c", chaosKeys)
	t0 := time.Now()

	stop := make(chan struct{})
	tallies := make([]*chaosTally, chaosCallers)
	var wg sync.WaitGroup
	endLoad := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	t.Cleanup(endLoad) // before the silos stop, should the harness fail the test
	for i := range chaosCallers {
		rng := rand.New(rand.NewPCG(seed, uint64(i)+1))
		wg.Go(func() { tallies[i] = runChaosCaller(tc, rng, ks, t0, stop) })
	}
	actions := runChaos(tc, rand.New(rand.NewPCG(seed, 0)), dur, t0, 5)
	endLoad()
	loadEnd := time.Since(t0)

	total := newChaosTally()
	for _, ct := range tallies {
		total.merge(ct)
	}
	dups := findDuplicates(total.spans)

	tc.waitConverged()
	converged := time.Since(t0)
	var bad []string
	rounds := 0
	deadline := time.Now().Add(chaosResolveTimeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(chaosCallTimeout))
	defer cancel()
	for {
		rounds++
		if bad = chaosRound(ctx, tc, ks); len(bad) == 0 || time.Now().After(deadline) {
			break
		}
	}
	resolved := time.Since(t0)

	for _, a := range actions {
		if a.what == "start" {
			all = append(all, a.s)
		}
	}
	var dir directory.Stats
	for _, s := range all {
		st := s.Stats().Cluster.Directory
		dir.Forwarded += st.Forwarded
		dir.Refused += st.Refused
		dir.HandedOff += st.HandedOff
		dir.Dropped += st.Dropped
		dir.Lost += st.Lost
	}

	logChaosSummary(t, total, dups, actions, logs, loadEnd)
	t.Logf("directory counters over the %d silos that ran: forwarded %d, refused %d, handed off %d, dropped %d, lost %d",
		len(all), dir.Forwarded, dir.Refused, dir.HandedOff, dir.Dropped, dir.Lost)
	t.Logf("after the chaos: converged at %.2fs; %d rounds over %d keys × %d silos, done at %.2fs",
		converged.Seconds(), rounds, len(ks), len(tc.live()), resolved.Seconds())

	if len(bad) > 0 {
		t.Errorf("%d grains did not resolve to one activation within %v of convergence:\n\t%s",
			len(bad), chaosResolveTimeout, strings.Join(bad[:min(len(bad), 10)], "\n\t"))
	}
	for _, m := range []map[string]*chaosFailure{total.gone, total.failed} {
		for r, f := range m {
			if f.code != codes.Unavailable && f.code != codes.DeadlineExceeded {
				t.Errorf("%d calls failed with %s, which no silo's departure explains; e.g. %v", f.n, r, f.example)
			}
		}
	}
	// Each caller has one call in flight, so a silo that goes away can
	// fail about one call per caller; twice that, and one more round
	// for the whole run, leaves room for calls sent on stale routes.
	departures := 0
	for _, a := range actions {
		if a.what != "start" {
			departures++
		}
	}
	failed := 0
	for _, f := range total.failed {
		failed += f.n
	}
	if limit := chaosCallers * (2*departures + 1); failed > limit {
		t.Errorf("%d calls through live silos failed, more than %d for %d departures", failed, limit, departures)
	}
	if total.ok == 0 {
		t.Errorf("no call succeeded in %d", total.calls)
	}
}

// logChaosSummary prints what the load saw.
func logChaosSummary(t *testing.T, ct *chaosTally, dups []chaosDuplicate, actions []chaosAction, logs *chaosLogger, loadEnd time.Duration) {
	t.Helper()
	var b strings.Builder
	pct := func(n int) float64 { return 100 * float64(n) / float64(max(ct.calls, 1)) }
	fmt.Fprintf(&b, "chaos summary (%d callers, %d keys, load ran %.2fs)\n", chaosCallers, chaosKeys, loadEnd.Seconds())
	// after returns the index of the last action begun by at, or -1.
	after := func(at time.Duration) int {
		i, _ := slices.BinarySearchFunc(actions, at, func(a chaosAction, at time.Duration) int { return cmp.Compare(a.at, at) })
		return i - 1
	}
	byAction := func(m map[string]*chaosFailure) []int {
		n := make([]int, len(actions)+1) // by action index + 1
		for _, f := range m {
			for _, at := range f.at {
				n[after(at)+1]++
			}
		}
		return n
	}
	gone, failed := byAction(ct.gone), byAction(ct.failed)
	fmt.Fprintf(&b, "  actions: %d (and the calls that failed until the next: through a live silo / the caller's silo went away)\n", len(actions))
	fmt.Fprintf(&b, "    %6.2fs  %-34s  %4d / %d\n", 0.0, "(the load starts)", failed[0], gone[0])
	for i, a := range actions {
		what := fmt.Sprintf("%-5s %-4s took %-8v → %d live", a.what, a.silo, a.took.Round(time.Millisecond), a.live)
		fmt.Fprintf(&b, "    %6.2fs  %-34s  %4d / %d\n", a.at.Seconds(), what, failed[i+1], gone[i+1])
	}
	sum := func(m map[string]*chaosFailure) int {
		n := 0
		for _, f := range m {
			n += f.n
		}
		return n
	}
	// kinds says after which kinds of action the failures of f came.
	kinds := func(f *chaosFailure) string {
		n := map[string]int{}
		for _, at := range f.at {
			if i := after(at); i >= 0 {
				n[actions[i].what]++
			} else {
				n["none"]++
			}
		}
		var parts []string
		for _, k := range []string{"kill", "stop", "start", "none"} {
			if n[k] > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", k, n[k]))
			}
		}
		return strings.Join(parts, ", ")
	}
	fmt.Fprintf(&b, "  calls: %d, ok %d (%.2f%%)\n", ct.calls, ct.ok, pct(ct.ok))
	for _, part := range []struct {
		title string
		m     map[string]*chaosFailure
	}{{"failed, the caller's silo went away", ct.gone}, {"failed, through a live silo", ct.failed}} {
		n := sum(part.m)
		fmt.Fprintf(&b, "  %s: %d (%.2f%%)\n", part.title, n, pct(n))
		rs := make([]string, 0, len(part.m))
		for r := range part.m {
			rs = append(rs, r)
		}
		slices.SortFunc(rs, func(x, y string) int { return cmp.Or(cmp.Compare(part.m[y].n, part.m[x].n), cmp.Compare(x, y)) })
		for _, r := range rs {
			fmt.Fprintf(&b, "    %6d  %s  (after %s)\n", part.m[r].n, r, kinds(part.m[r]))
		}
	}
	fmt.Fprintf(&b, "  duplicate activations seen: %d grains\n", len(dups))
	for i, d := range dups {
		if i == 20 {
			fmt.Fprintf(&b, "    ... and %d more\n", len(dups)-20)
			break
		}
		fmt.Fprintf(&b, "    %s: %s\n", d.key, strings.Join(d.acts, ", "))
	}
	logs.mu.Lock()
	msgs := make([]string, 0, len(logs.counts))
	for m := range logs.counts {
		msgs = append(msgs, m)
	}
	slices.Sort(msgs)
	fmt.Fprintf(&b, "  silo warnings and errors: %d kinds\n", len(msgs))
	for _, m := range msgs {
		fmt.Fprintf(&b, "    %6d  %s\n", logs.counts[m], m)
	}
	logs.mu.Unlock()
	t.Log(b.String())
}

// TestClusterReregistrationThroughStaleOwnerKeepsOneActivation: a
// registration that a silo sends again after a kill, and that the new
// owner cannot place yet because its own view is stale, is reported back
// (Unplaced) and sent again until it lands, so the grain keeps its one
// activation, named by its entry at the new owner.
//
// Silo X owns grain g's directory entry; g's activation A lives on silo
// S1; without X, silo O owns the entry. X dies. S1 installs the view
// without X first and registers A again at O (a handoff); O, whose view
// still has X, passes the item on to X, and the send fails. Once O
// installs the new view it owns g: calls through every silo must reach
// A, and O's entry must name it.
func TestClusterReregistrationThroughStaleOwnerKeepsOneActivation(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b", "c", "d"}, clusterOpt{})
	byMember := map[string]*Silo{}
	for _, s := range tc.live() {
		byMember[s.Member()] = s
	}
	home := map[string]*Silo{} // key → the silo its activation is on
	for _, k := range keys("o", 100) {
		r, err := tc.call(tc.silo("a"), k, nil)
		if err != nil {
			t.Fatal(err)
		}
		home[k] = tc.silo(r.Text)
	}
	ring := ringOf(tc.silo("a"))
	var key string
	var x, s1, o *Silo
	for _, k := range keys("o", 100) {
		id := grain.NewID(probe.ProbeGrainType, k)
		owner := ring.OwnerOf(id)
		after := ring.Without(owner).OwnerOf(id)
		if owner != home[k].Member() && after != home[k].Member() {
			key, x, s1, o = k, byMember[owner], home[k], byMember[after]
			break
		}
	}
	if key == "" {
		t.Fatal("no grain whose activation, owner and next owner are on three silos")
	}
	t.Logf("%s: activation on %s, entry on %s, next owner %s", key, s1.cfg.Name, x.cfg.Name, o.cfg.Name)

	// Only S1 learns of X's death at first, so that what O drops is S1's.
	var held []string
	for _, s := range tc.live() {
		if s != s1 && s != x {
			held = append(held, s.Member())
			tc.hub.Hold(s.Member())
		}
	}
	dropped := o.Stats().Cluster.Directory.Dropped
	tc.kill(x.cfg.Name)
	testwait.For(t, defaultTestTimeout, "O to drop the handoff of S1", func() bool { return o.Stats().Cluster.Directory.Dropped > dropped })
	for _, id := range held {
		tc.hub.Release(id)
	}
	tc.waitConverged()

	// Give the cluster chaosResolveTimeout to find the duplicate, calling
	// the grain through every silo meanwhile. (Placement may pick S1 for
	// every call that finds no entry, and A answers them all; so the
	// entry at O must name the activation too.)
	id := grain.NewID(probe.ProbeGrainType, key)
	var seen map[string][]string // activation → the silos that reached it
	entry := "none"
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s answered last from %v; its entry at %s: %s", key, seen, o.cfg.Name, entry)
		}
	})
	testwait.For(t, chaosResolveTimeout, key+" to answer from the one activation its entry at O names", func() bool {
		seen = map[string][]string{}
		for _, via := range tc.sortedLive() {
			r, err := tc.call(via, key, nil)
			if err != nil {
				t.Fatalf("calling %s through %s: %v", key, via.cfg.Name, err)
			}
			seen[where(r)] = append(seen[where(r)], via.cfg.Name)
		}
		entry = "none"
		for _, it := range entriesOf(o) {
			if it.ID == id {
				entry = fmt.Sprintf("%s#%d", byMember[it.Entry.Silo].cfg.Name, it.Entry.Activation)
			}
		}
		return len(seen) == 1 && len(seen[entry]) > 0
	})
}
