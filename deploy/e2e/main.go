// Command e2e is Granary's chaos test: it runs the three-silo cluster of
// deploy/compose.yaml in Docker, calls its Counter grains from many
// workers at once, injects faults one after another, and checks that the
// cluster recovers within a bound and loses no acknowledged write. It
// writes what it measured to docs/resilience.md (make soak: docs/soak.md)
// and a screenshot of the dashboard beside it. make e2e builds the image and prepares the host's
// PostgreSQL first; then it runs
//
//	go run ./deploy/e2e -compose deploy/compose.yaml -secrets deploy/secrets -out docs/resilience.md
//
// The cluster is the secured one of the compose file: mutual TLS between
// silos, TLS and a token on the gateways, HTTPS and an admin token on the
// admin servers. The run speaks to it with the CA and the tokens that make
// certs wrote into -secrets, and first checks that the gateway and the
// admin server refuse whoever comes without them.
//
// In turn: the steady state is watched; silo-b is killed (docker kill)
// and started again; silo-c is cut off the network (docker network
// disconnect) and reconnected; every silo is restarted gracefully, one at
// a time, each ready again before the next. For each fault it counts the
// failed calls, the time until every worker's calls succeed again, the
// duplicate activations the replies reveal and the lost writes. At the end
// it reads every counter and compares it with the Adds acknowledged.
//
// With -overload, the overload soak follows (overload.go, soak.go): a
// closed-loop burst
// measures the calls a second the cluster serves, and for
// -overload-duration an open loop offers twice that, a share of the calls
// to one hot counter and the rest to keys never called before. Every
// call that is not served must be refused with ResourceExhausted, never
// time out; the admitted calls' p99 latency and every silo's memory
// (docker stats, once a second) stay under their bounds; once the load
// drops to a modest rate, every worker's calls succeed again within
// -overload-recovery; and no acknowledged Add is lost. The silos' overload
// settings are those of the compose file, which the faults run with too.
//
// The report (docs/resilience.md, or docs/soak.md) defines each measure
// and the rules.
//
// The compose project (-project, default granary-e2e) is torn down at the
// end, on failure and on interrupt too; a previous run's leftovers are
// removed first. The exit status is 0 when every assertion held, 1 when
// one failed or the run could not be made, 2 for bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/internal/chromium"
	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/grpc/keepalive"
)

// silos are the compose services of the cluster, in the order the faults
// use them: silo-b is killed, silo-c partitioned.
var silos = []string{"silo-a", "silo-b", "silo-c"}

// Container ports the silos publish on the host.
const (
	gatewayPort = 30000
	adminPort   = 8080
)

// options are the program's flags.
type options struct {
	compose      string
	secrets      string
	project      string
	out          string
	screenshot   string
	image        string
	dsn          string
	chromium     string
	bound        time.Duration
	startTimeout time.Duration
	load         loadConfig
	chaos        chaosConfig
	overload     overloadConfig
	soak         bool
}

// bytesFlag is a flag of a size written as Docker writes sizes: 512MiB.
type bytesFlag struct{ p *uint64 }

func (b bytesFlag) String() string {
	if b.p == nil {
		return ""
	}
	return fmt.Sprintf("%dMiB", *b.p>>20)
}

func (b bytesFlag) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b.p = n
	return nil
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("e2e", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.compose, "compose", "deploy/compose.yaml", "the compose `file` of the three-silo cluster")
	fs.StringVar(&o.secrets, "secrets", "deploy/secrets", "the `directory` of the cluster's CA and tokens, as make certs writes it")
	fs.StringVar(&o.project, "project", "granary-e2e", "the compose project `name`, so the run cannot clash with make cluster-up's")
	fs.StringVar(&o.out, "out", "docs/resilience.md", "the markdown `file` the results are written to")
	fs.StringVar(&o.screenshot, "screenshot", "", "the PNG `file` of the dashboard's screenshot (default: -out's name with -dashboard.png for .md, as resilience-dashboard.png)")
	fs.StringVar(&o.image, "image", "granary/example-silo:dev", "the silo `image` the compose file runs (GRANARY_IMAGE)")
	fs.StringVar(&o.dsn, "dsn", "", "the PostgreSQL `DSN` the silos use, as the containers reach it (GRANARY_POSTGRES_DSN; default: the compose file's, the host's server at host.docker.internal)")
	fs.StringVar(&o.chromium, "chromium", os.Getenv(chromium.Env), "the Chromium `executable` that screenshots the dashboard (default: $GRANARY_CHROMIUM, else chromium on PATH)")
	fs.DurationVar(&o.bound, "recovery", 5*time.Second, "the recovery `bound` every fault must meet")
	fs.DurationVar(&o.startTimeout, "start-timeout", 2*time.Minute, "how long the cluster may take to be ready at the start")
	fs.DurationVar(&o.chaos.Hold, "hold", 10*time.Second, "how long each fault is held (and the steady state watched)")
	fs.DurationVar(&o.chaos.Settle, "settle", 8*time.Second, "how long the cluster is watched after a silo is back, before the next fault")
	fs.DurationVar(&o.chaos.Grace, "grace", 35*time.Second, "docker restart -t: a silo's time to stop after SIGTERM (the compose file's stop_grace_period)")
	fs.DurationVar(&o.chaos.ReadyTimeout, "ready-timeout", 90*time.Second, "how long a silo may take to be ready after it starts")
	fs.IntVar(&o.load.Workers, "workers", 8, "load `workers`, each one call at a time")
	fs.IntVar(&o.load.Counters, "counters", 64, "`counters` the workers share")
	fs.DurationVar(&o.load.CallTimeout, "call-timeout", 2*time.Second, "the bound of each call")
	fs.BoolVar(&o.soak, "overload", false, "run the overload soak after the faults (make soak)")
	fs.DurationVar(&o.overload.Duration, "overload-duration", 2*time.Minute, "how long the overload soak offers Factor times the capacity")
	fs.Float64Var(&o.overload.Factor, "overload-factor", 2, "the soak's offered rate, as a multiple of the capacity measured")
	fs.Float64Var(&o.overload.HotShare, "overload-hot", 0.2, "the `share` of the soak's calls that go to its one hot counter; the rest go to new keys")
	fs.IntVar(&o.overload.CapacityWorkers, "capacity-workers", 256, "`workers` of the closed-loop burst that measures the capacity")
	fs.DurationVar(&o.overload.CapacityWarmup, "capacity-warmup", 5*time.Second, "how long the burst runs before it is measured")
	fs.DurationVar(&o.overload.CapacityMeasure, "capacity-measure", 10*time.Second, "how long the burst is measured")
	fs.IntVar(&o.overload.MaxInFlight, "overload-max-inflight", 0, "the most `calls` the soak has in flight (default: the offered rate times -call-timeout)")
	fs.DurationVar(&o.overload.P99Bound, "overload-p99", defaultP99Bound, "the bound of the 99th percentile latency of the calls admitted during the overload")
	o.overload.RSSBound = defaultRSSBound
	fs.Var(bytesFlag{&o.overload.RSSBound}, "overload-memory", "the `size` (such as 256MiB) no silo's memory may exceed during the soak")
	fs.DurationVar(&o.overload.RecoveryBound, "overload-recovery", 10*time.Second, "the bound of the time from the load's drop until every call succeeds again")
	fs.DurationVar(&o.overload.RecoveryWatch, "overload-watch", 20*time.Second, "how long the modest load after the drop is watched")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.screenshot == "" {
		o.screenshot = strings.TrimSuffix(o.out, filepath.Ext(o.out)) + "-dashboard.png"
	}
	o.chaos.ReadyPoll = 250 * time.Millisecond
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"-recovery", o.bound}, {"-start-timeout", o.startTimeout}, {"-hold", o.chaos.Hold}, {"-settle", o.chaos.Settle}, {"-grace", o.chaos.Grace}, {"-ready-timeout", o.chaos.ReadyTimeout}} {
		if d.v <= 0 {
			return options{}, fmt.Errorf("%s %v: must be positive", d.name, d.v)
		}
	}
	if o.chaos.Settle <= o.bound {
		return options{}, fmt.Errorf("-settle %v must exceed -recovery %v, or a phase could end before it recovers", o.chaos.Settle, o.bound)
	}
	o.load.Prefix = "e2e-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := o.load.validate(); err != nil {
		return options{}, err
	}
	o.overload.CallTimeout = o.load.CallTimeout
	o.overload.Prefix = o.load.Prefix + "-soak"
	o.overload.setDefaults()
	if err := o.overload.validate(); err != nil {
		return options{}, err
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	passed, err := run(ctx, o, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	if !passed {
		os.Exit(1)
	}
}

// teardownTimeout bounds compose down at the end: every container may
// take its grace to stop.
const teardownTimeout = 2 * time.Minute

// run makes the whole run: up, load, faults, checks, report, down. It
// returns whether every assertion held; an error means the run could not
// be made, or its report not written.
func run(ctx context.Context, o options, stdout io.Writer) (passed bool, err error) {
	logf := func(format string, args ...any) {
		fmt.Fprintf(stdout, "e2e: %s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	env := append(os.Environ(), "GRANARY_IMAGE="+o.image)
	if o.dsn != "" {
		env = append(env, "GRANARY_POSTGRES_DSN="+o.dsn)
	}
	sec, err := loadSecrets(o.secrets)
	if err != nil {
		return false, err
	}
	r := execRunner{}
	cmd, err := detectCompose(ctx, r, env)
	if err != nil {
		return false, err
	}
	cp := &compose{r: r, command: cmd, file: o.compose, project: o.project, env: env}
	d := dockerCLI{r: r, env: env}

	// A run interrupted before its teardown may have left the project.
	if err := cp.down(ctx, o.chaos.Grace); err != nil {
		return false, err
	}
	defer func() {
		// Not ctx: the teardown runs on interrupt too.
		downCtx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
		defer cancel()
		if !passed || err != nil {
			if logs, lerr := cp.logs(downCtx, 60); lerr == nil {
				fmt.Fprintf(os.Stderr, "e2e: the silos' last logs:\n%s\n", logs)
			}
		}
		logf("tearing the cluster down")
		if derr := cp.down(downCtx, o.chaos.Grace); derr != nil && err == nil {
			err = derr
		}
	}()
	logf("starting the cluster: %s -f %s -p %s up -d", strings.Join(cmd, " "), o.compose, o.project)
	if err := cp.up(ctx); err != nil {
		return false, err
	}
	cluster, network, err := discover(ctx, cp, d)
	if err != nil {
		return false, err
	}
	admins := map[string]*adminapi.Client{}
	for _, s := range cluster {
		if admins[s.Service], err = sec.adminClient(s.Admin, sec.adminToken); err != nil {
			return false, err
		}
	}
	ready := func(ctx context.Context, s silo) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return admins[s.Service].Ready(ctx)
	}
	clock := clockwork.NewRealClock()
	startup := &chaos{cfg: o.chaos, clock: clock, ready: ready}
	startup.cfg.ReadyTimeout = o.startTimeout
	for _, s := range cluster {
		if err := startup.waitReady(ctx, s); err != nil {
			return false, err
		}
		logf("%s is ready: gateway %s, admin %s", s.Service, s.Gateway, s.Admin)
	}

	security := checkSecured(ctx, cluster[0], sec, o.load.keys()[0])
	for _, c := range security {
		if c.Err != nil {
			logf("security: %s: FAILED: %v", c.Name, c.Err)
		} else {
			logf("security: %s", c.Name)
		}
	}
	res, err := exercise(ctx, o, sec, cluster, network, d, admins, ready, clock, logf)
	if err != nil {
		return false, err
	}
	res.addSecurity(security)
	if err := writeReport(o.out, res); err != nil {
		return false, err
	}
	printSummary(stdout, res)
	return res.passed(), nil
}

// discover finds the silos' containers, published addresses and network.
func discover(ctx context.Context, cp *compose, d dockerCLI) ([]silo, string, error) {
	var out []silo
	network := ""
	for _, name := range silos {
		id, err := cp.container(ctx, name)
		if err != nil {
			return nil, "", err
		}
		gw, err := cp.port(ctx, name, gatewayPort)
		if err != nil {
			return nil, "", err
		}
		admin, err := cp.port(ctx, name, adminPort)
		if err != nil {
			return nil, "", err
		}
		st, err := d.inspect(ctx, id)
		if err != nil {
			return nil, "", err
		}
		if len(st.Networks) != 1 {
			return nil, "", fmt.Errorf("%s is on networks %v; want exactly one, the compose network", name, slices.Sorted(maps.Keys(st.Networks)))
		}
		for n := range st.Networks {
			if network != "" && n != network {
				return nil, "", fmt.Errorf("the silos are on different networks, %s and %s", network, n)
			}
			network = n
		}
		out = append(out, silo{Service: name, Container: id, Admin: admin, Gateway: gw})
	}
	return out, network, nil
}

// clientOptions describes the client's settings in the report.
const clientOptions = "TLS verified against the cluster's CA and a gateway token, call timeout as above, gateway list refreshed every 2 s, keepalive pings every 10 s (the gateway's least allowed interval) failing after 2 s"

// exercise runs the load and the faults, reads the counters back, takes
// the dashboard's screenshot and evaluates the run.
func exercise(ctx context.Context, o options, sec secrets, cluster []silo, network string, d dockerCLI, admins map[string]*adminapi.Client,
	ready func(context.Context, silo) error, clock clockwork.Clock, logf func(string, ...any)) (*result, error) {
	gateways := make([]string, len(cluster))
	for i, s := range cluster {
		gateways[i] = s.Gateway
	}
	logger := zap.NewNop()
	dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := client.Dial(dialCtx, append(sec.clientOptions(), client.WithGateways(gateways...), client.WithLogger(logger),
		client.WithCallTimeout(o.load.CallTimeout), client.WithGatewayRefresh(2*time.Second),
		client.WithKeepalive(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true}))...)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("dialling the gateways %v: %w", gateways, err)
	}
	defer c.Close()
	add := func(ctx context.Context, key string, delta int64) (addReply, error) {
		r, err := clusterpb.NewCounterRef(c, key).Add(ctx, &clusterpb.AddRequest{Delta: delta})
		if err != nil {
			return addReply{}, err
		}
		return addReply{Value: r.GetValue(), Silo: r.GetSilo(), Activation: r.GetActivation()}, nil
	}
	gen, err := newGenerator(o.load, add, clock)
	if err != nil {
		return nil, err
	}
	res := &result{Started: time.Now(), Image: o.image, Load: gen.cfg, Chaos: o.chaos, Client: clientOptions, Bound: o.bound,
		Compose: fmt.Sprintf("compose -f %s -p %s up -d", o.compose, o.project)}
	logf("load: %d workers over %d counters %s-*", gen.cfg.Workers, gen.cfg.Counters, gen.cfg.Prefix)
	gen.start(ctx)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		sample(sampleCtx, clock, admins, gen.tl)
	}()
	ch := &chaos{cfg: o.chaos, d: d, silos: cluster, network: network, ready: ready, clock: clock, tl: gen.tl, logf: logf}
	res.RunErr = ch.run(ctx)
	if res.RunErr == nil {
		// While the load runs, so the page shows the cluster at work.
		logf("screenshot of the dashboard of %s", cluster[0].Service)
		res.Screenshot, res.ScreenshotErr = takeScreenshot(ctx, o, sec, cluster)
	} else {
		res.ScreenshotErr = errors.New("the faults did not all run")
	}
	gen.stop()
	stopSampling()
	<-sampled
	res.Phases = ch.phases
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted: %w", ctx.Err())
	}

	logf("reading every counter back")
	res.Final = gen.readAll(ctx, 10)
	if res.RunErr == nil && o.soak {
		w, method := newWatcher(clock, cluster, d, dockerSocket(os.Getenv("DOCKER_HOST")), sec.tlsConfig())
		res.Overload = runOverload(ctx, o.overload, add, clock, w, logf)
		res.Overload.MemoryMethod = method
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted: %w", ctx.Err())
		}
	}
	res.Nice, res.NiceKnown = niceness()
	if res.Protection, err = composeProtection(o.compose); err != nil {
		return nil, err
	}
	res.Restarts = map[string]int{}
	for _, s := range cluster {
		st, err := d.inspect(ctx, s.Container)
		if err != nil {
			return nil, err
		}
		res.Restarts[s.Service] = st.RestartCount
	}
	res.Elapsed = time.Since(res.Started)
	res.evaluate(gen.tl)
	if res.ScreenshotErr != nil && res.RunErr == nil {
		res.fail("the dashboard: %v", res.ScreenshotErr)
	}
	return res, nil
}

// takeScreenshot saves the dashboard of the first silo, signed in with
// the admin token, and returns the
// screenshot's path relative to the report.
func takeScreenshot(ctx context.Context, o options, sec secrets, cluster []silo) (string, error) {
	browser, err := chromium.Find(o.chromium)
	if err != nil {
		return "", err
	}
	url := "https://" + cluster[0].Admin + "/"
	if err := screenshotDashboard(ctx, browser, url, sec.adminToken, len(cluster), o.screenshot, 90*time.Second); err != nil {
		return "", err
	}
	rel, err := filepath.Rel(filepath.Dir(o.out), o.screenshot)
	if err != nil {
		return o.screenshot, nil
	}
	return filepath.ToSlash(rel), nil
}

// sample asks every silo's admin server for its Counter activations once a
// second until ctx ends, and records their sum on tl.
func sample(ctx context.Context, clock clockwork.Clock, admins map[string]*adminapi.Client, tl *timeline) {
	tk := clock.NewTicker(time.Second)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.Chan():
		}
		sum, answered := 0, 0
		for _, name := range slices.Sorted(maps.Keys(admins)) {
			reqCtx, cancel := context.WithTimeout(ctx, 800*time.Millisecond)
			rep, err := admins[name].Silo(reqCtx)
			cancel()
			if err != nil {
				continue
			}
			answered++
			sum += counterActivations(rep)
		}
		if answered > 0 {
			tl.sample(clock.Now(), sum)
		}
	}
}

// counterActivations returns the Counter activations a silo reports.
func counterActivations(rep adminapi.SiloReport) int {
	n := 0
	for _, t := range rep.Types {
		if t.Type == clusterpb.CounterGrainType {
			n += t.Activations
		}
	}
	return n
}

// writeReport writes the markdown report at path.
func writeReport(path string, res *result) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeMarkdown(f, res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// printSummary prints the verdict and the table's figures.
func printSummary(w io.Writer, res *result) {
	for _, p := range res.Phases {
		s := p.Stats
		fmt.Fprintf(w, "%-18s calls=%-6d failed=%-5d recovery=%-16s duplicates=%d lost=%d excess-activations=%s\n",
			p.Name, s.Calls, s.Failed, formatRecovery(s), s.Duplicates, s.Lost, formatExcess(s.PeakActivations, res.Load.Counters))
	}
	held := 0
	for _, c := range res.Security {
		if c.Err == nil {
			held++
		}
	}
	fmt.Fprintf(w, "security: %d of %d checks held\n", held, len(res.Security))
	f := res.Final
	fmt.Fprintf(w, "final read: %d counters, %d sent, %d acknowledged, %d counted; lost %d Adds on %d counters\n",
		f.Counters, f.Sent, f.Acked, f.Final, f.LostAdds, f.LostCounters)
	if o := res.Overload; o != nil {
		s := o.Overload
		fmt.Fprintf(w, "overload: capacity %.0f/s, offered %.0f/s; ok=%d shed=%d queue-refused=%d deadline=%d unavailable=%d other=%d not-sent=%d; p50=%s p99=%s max=%s\n",
			o.Capacity, o.Offered, s.Outcomes[outOK], s.Outcomes[outShed], s.Outcomes[outRefused], s.Outcomes[outDeadline], s.Outcomes[outUnavailable], s.Outcomes[outOther],
			o.Loop.NotSent, formatLatency(s.P50), formatLatency(s.P99), formatLatency(s.Max))
		for _, sw := range o.Silos {
			fmt.Fprintf(w, "overload: %s memory<=%s rss<=%s heap<=%s activations<=%d shedding %ds shed=%s queue+wait+concurrency-refusals=%s memory-collections=%s\n",
				sw.Service, formatBytes(sw.MemMax), formatBytes(sw.RSSMax), formatBytes(sw.HeapMax), sw.ActivationsMax, sw.SheddingSamples,
				formatDelta(&sw, metricShed), formatDelta(&sw, metricQueueRefusals)+"+"+formatDelta(&sw, metricWaitRefusals)+"+"+formatDelta(&sw, metricLimitRefusals),
				formatDelta(&sw, metricMemoryCollections))
		}
		fmt.Fprintf(w, "overload: recovery %s; final read %d counters, lost %d Adds on %d counters, %d unread\n",
			formatRecovery(o.Recovery), o.Final.Counters, o.Final.LostAdds, o.Final.LostCounters, len(o.Final.Unread))
	}
	if res.passed() {
		fmt.Fprintln(w, "PASS")
		return
	}
	for _, msg := range res.Failures {
		fmt.Fprintln(w, "FAIL:", msg)
	}
}
