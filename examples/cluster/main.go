// Command cluster runs one silo of a Granary cluster. Start several, on
// one machine or many, and they gossip, find each other, and share the
// Counter grains between them: a call to a counter from any silo goes to
// its one activation, wherever in the cluster that is. Kill a silo and its
// counters activate again on the survivors at their next call, once the
// others have declared it dead (about 2.5 s with the lan profile).
//
// Three silos on one machine, each in its own terminal:
//
//	go build -o silo ./examples/cluster
//	./silo -name a -gossip 127.0.0.1:7946 -grpc 127.0.0.1:7947
//	./silo -name b -gossip 127.0.0.1:7956 -grpc 127.0.0.1:7957 -seeds 127.0.0.1:7946
//	./silo -name c -gossip 127.0.0.1:7966 -grpc 127.0.0.1:7967 -seeds 127.0.0.1:7946,127.0.0.1:7956 -drive 20
//
// Silo c calls 20 counters in a loop and prints, once a second, how many
// calls succeeded and failed and which silos answered them. Press Ctrl-C
// in a (or kill -9 it) and watch its counters fail for a few seconds and
// then answer from b and c. Ctrl-C stops a silo gracefully: it tells the
// cluster, deactivates its grains and leaves; a second Ctrl-C exits at
// once.
//
// Seeds are the gossip addresses of silos to join through; a silo that
// lists none founds a cluster. Listing every silo on each, itself
// included, lets them start in any order.
//
// The counts live in memory, each as long as its activation: a counter
// activated again after its silo died starts from zero. With -postgres
// they are persistent state in PostgreSQL instead (silo/storage/pgstore),
// in a database every silo of the cluster names, read when a counter
// activates and written on every Add, so a counter activated again on a
// survivor goes on from its stored count. -service separates the rows of
// clusters that share a database; every silo of one cluster gives the same
// (default "cluster-example"). For example, with the local server of
// scripts/postgres-test.sh, add to each of the three commands above
//
//	-postgres 'postgres://granary:granary@127.0.0.1:5432/granary_test?sslmode=disable'
//
// On stdout the program prints machine-readable lines, for scripts and
// the tests:
//
//	ready member=<member ID> grpc=<host:port> gossip=<host:port>
//	drive ok=<n> failed=<n> silos=<member ID>:<n>,... lost=<n> [err=<last error>]
//	stopped member=<member ID>
//
// A drive line counts the calls of the last second: those that succeeded,
// those that failed, and the successful ones by the silo that answered;
// err quotes the last failure. lost counts from the driver's start. The
// driver adds 1 per call and tracks, per counter, the Adds it sent, the
// Adds acknowledged and the last count acknowledged. If the counter
// forgets no acknowledged Add, a reply's count is at least one more than
// both the Adds acknowledged before it and the last count acknowledged
// (more when a failed Add was counted anyway) and, when the count started
// from zero and this driver alone adds to it, at most the Adds sent: a
// count above that is logged, once. lost is the number of replies whose
// count fell below the lower bound: a count that went back, an
// acknowledged Add forgotten. With -postgres it stays 0 when a silo dies;
// in memory it need not, as every later reply of a counter that started
// again from zero counts.
//
// Its logs go to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/granaryio/granary/examples/cluster/counter"
	"github.com/granaryio/granary/grain"
	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/membership"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/pgstore"
	"go.uber.org/zap"
)

// stopTimeout bounds the graceful stop after SIGTERM or SIGINT: past it
// the silo is closed at once and the program exits with an error.
const stopTimeout = 10 * time.Second

// storeOpenTimeout bounds opening the PostgreSQL store: connecting (which
// pgstore bounds by its ConnectTimeout, 10 s by default) and creating or
// migrating its tables.
const storeOpenTimeout = 20 * time.Second

// defaultService is the default of -service.
const defaultService = "cluster-example"

// options are the program's flags.
type options struct {
	name    string   // the silo's name; its member ID adds a generation
	cluster string   // the cluster ID: silos of other clusters are refused
	gossip  string   // host:port the gossip listeners bind to
	grpc    string   // host:port the silo-to-silo gRPC server listens on
	seeds   []string // gossip addresses to join through
	drive   int      // counters to call in a loop; 0 calls none
	profile string   // failure-detection profile: "lan" or "local"
	// postgres is the DSN of the PostgreSQL database that keeps the
	// counts; "" keeps them in memory.
	postgres string
	service  string // the pgstore service ID of the counts' rows
}

func main() {
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(2)
	}
	// The first SIGTERM or SIGINT stops the silo gracefully; stop then
	// restores the default action, so a second one ends the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
	if err := run(ctx, opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// parseFlags reads the command line. Usage and flag errors go to stderr.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var seeds string
	fs.StringVar(&o.name, "name", "silo", "the silo's `name`, in logs and member IDs")
	fs.StringVar(&o.cluster, "cluster", "granary-example", "the cluster `ID`; every silo of a cluster uses the same")
	fs.StringVar(&o.gossip, "gossip", "127.0.0.1:7946", "`host:port` to gossip on (UDP and TCP); host is an IP")
	fs.StringVar(&o.grpc, "grpc", "127.0.0.1:7947", "`host:port` of the gRPC server other silos call")
	fs.StringVar(&seeds, "seeds", "", "comma-separated gossip `addresses` of silos to join through; none founds a cluster")
	fs.IntVar(&o.drive, "drive", 0, "after joining, call `n` counters in a loop and print a summary every second")
	fs.StringVar(&o.profile, "profile", "lan", "failure-detection `profile`: lan (dead in ~2.5 s) or local (~1 s, loopback tests)")
	fs.StringVar(&o.postgres, "postgres", "", "keep the counts in the PostgreSQL database this `DSN` names, shared by every silo of the cluster; empty keeps them in memory")
	fs.StringVar(&o.service, "service", defaultService, "with -postgres, the service `ID` that separates this cluster's counts from others' in the database")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for s := range strings.SplitSeq(seeds, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.seeds = append(o.seeds, s)
		}
	}
	if o.drive < 0 {
		return options{}, fmt.Errorf("-drive %d: must not be negative", o.drive)
	}
	return o, nil
}

// run opens the counts' store if o names one, starts a silo that hosts
// Counter grains and joins the cluster, prints the ready line, drives
// counters if asked to, and stops the silo gracefully when ctx ends, then
// closes the store.
func run(ctx context.Context, o options, stdout io.Writer) error {
	cfg, err := siloConfig(o)
	if err != nil {
		return err
	}
	lcfg := zap.NewDevelopmentConfig() // console encoding, to stderr
	lcfg.Level = zap.NewAtomicLevelAt(zap.InfoLevel)
	logger, err := lcfg.Build(zap.Fields(zap.String("name", o.name)))
	if err != nil {
		return err
	}
	defer func() { _ = logger.Sync() }() // syncing stderr may fail; nothing to do about it
	cfg.Logger = logger

	persistent := o.postgres != ""
	if persistent {
		openCtx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
		store, err := pgstore.Open(openCtx, pgstore.Config{DSN: o.postgres, ServiceID: o.service})
		cancel()
		if err != nil {
			return fmt.Errorf("opening the counts' store: %w", err)
		}
		// Deferred before the silo's Close, so run after it: the store
		// closes once the silo, and every write of its counters, has
		// stopped.
		defer store.Close()
		cfg.Storage = map[string]storage.Provider{grain.DefaultStorage: store}
		logger.Info("counts kept in PostgreSQL", zap.String("service", o.service))
	}

	s, err := silo.New(cfg)
	if err != nil {
		return err
	}
	if err := counter.Register(s, persistent); err != nil {
		return err
	}
	// Start returns once the silo has joined through a seed (it retries
	// until one answers) or founded the cluster.
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("joining cluster %q: %w", o.cluster, err)
	}
	defer s.Close() // a no-op after a graceful Stop; stops the silo on an early return
	gossip, grpcAddr := s.ClusterAddrs()
	fmt.Fprintf(stdout, "ready member=%s grpc=%s gossip=%s\n", s.Member(), grpcAddr, gossip)

	if o.drive > 0 {
		drive(ctx, s, o.drive, stdout, logger)
	}
	<-ctx.Done()

	logger.Info("stopping gracefully", zap.Duration("timeout", stopTimeout))
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		return fmt.Errorf("graceful stop: %w", err)
	}
	fmt.Fprintf(stdout, "stopped member=%s\n", s.Member())
	return nil
}

// siloConfig is the configuration of a silo in the cluster o describes.
func siloConfig(o options) (silo.Config, error) {
	cc := silo.DefaultClusterConfig()
	switch o.profile {
	case "lan":
		cc.Membership = membership.DefaultLANConfig()
	case "local":
		cc.Membership = membership.DefaultLocalConfig()
	default:
		return silo.Config{}, fmt.Errorf("-profile %q: want lan or local", o.profile)
	}
	host, port, err := splitPort("-gossip", o.gossip)
	if err != nil {
		return silo.Config{}, err
	}
	if _, _, err := splitPort("-grpc", o.grpc); err != nil {
		return silo.Config{}, err
	}
	cc.Membership.ClusterID = o.cluster
	cc.Membership.BindAddr = host
	cc.Membership.BindPort = port
	cc.Membership.Seeds = o.seeds
	cc.GRPCListen = o.grpc

	cfg := silo.DefaultConfig()
	cfg.Name = o.name
	cfg.Cluster = &cc
	return cfg, nil
}

// splitPort splits a listen address, defaulting the host to every
// interface. Port 0 picks a free port, which the ready line names.
func splitPort(flagName, addr string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: %w", flagName, addr, err)
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%s %q: the port must be in [0, 65535]", flagName, addr)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

const (
	// driveCallTimeout bounds each call of the driver, so a call stuck
	// on a dead silo counts as failed rather than stalling the loop.
	driveCallTimeout = time.Second
	// driveReportInterval is how often the driver prints a summary.
	driveReportInterval = time.Second
	// driveBackoff is how long the driver waits after a failed call: a
	// dead silo refuses at once, and the loop should not spin.
	driveBackoff = 50 * time.Millisecond
)

// driveStats counts the calls of one report interval, and the lost
// replies of every interval so far.
type driveStats struct {
	ok, failed int
	silos      map[string]int // successful calls per answering member ID
	lost       int            // since the driver started: see counterTally.ack
	lastErr    error
}

// next returns the stats of the next interval, which carry lost over.
func (d *driveStats) next() driveStats {
	return driveStats{silos: map[string]int{}, lost: d.lost}
}

// line is the summary printed for the interval, for example
//
//	drive ok=120 failed=0 silos=a-1f3e:40,b-77c0:80 lost=0
func (d *driveStats) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "drive ok=%d failed=%d silos=", d.ok, d.failed)
	for i, id := range slices.Sorted(maps.Keys(d.silos)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%d", id, d.silos[id])
	}
	fmt.Fprintf(&b, " lost=%d", d.lost)
	if d.lastErr != nil {
		b.WriteString(" err=" + strconv.Quote(d.lastErr.Error()))
	}
	return b.String()
}

// counterTally is what the driver knows of one counter's count: how many
// Adds of 1 it sent, how many of them were acknowledged, and the count of
// the last acknowledged one.
type counterTally struct {
	sent, acked, last int64
}

// ack records the reply to the Add sent last, whose count is value. If
// the counter forgot no acknowledged Add, the count is above both the
// Adds acknowledged before and the count of the last acknowledged reply:
// lost reports a count below that. If the count started from zero and
// this driver alone adds to it, the count is at most the Adds sent: over
// reports a count above that, which another driver, counts left from an
// earlier run, or an Add counted twice would explain.
func (c *counterTally) ack(value int64) (lost, over bool) {
	lost, over = value < max(c.acked, c.last)+1, value > c.sent
	c.acked++
	c.last = value
	return lost, over
}

// drive calls counters "counter-0" to "counter-<n-1>" in turn, one call
// at a time through caller, until ctx ends, and writes a summary line to
// stdout every driveReportInterval. It logs, once, a count above the Adds
// it sent.
func drive(ctx context.Context, caller grain.Caller, n int, stdout io.Writer, logger *zap.Logger) {
	refs := make([]clusterpb.CounterRef, n)
	for i := range refs {
		refs[i] = clusterpb.NewCounterRef(caller, fmt.Sprintf("counter-%d", i))
	}
	tallies := make([]counterTally, n)
	warned := false
	tick := time.NewTicker(driveReportInterval)
	defer tick.Stop()
	stats := driveStats{silos: map[string]int{}}
	for i := 0; ; i = (i + 1) % n {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fmt.Fprintln(stdout, stats.line())
			stats = stats.next()
		default:
		}
		callCtx, cancel := context.WithTimeout(ctx, driveCallTimeout)
		tallies[i].sent++
		reply, err := refs[i].Add(callCtx, &clusterpb.AddRequest{Delta: 1})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return // stopping: not a failure of the cluster
			}
			stats.failed++
			stats.lastErr = err
			sleep(ctx, driveBackoff)
			continue
		}
		stats.ok++
		stats.silos[reply.GetSilo()]++
		lost, over := tallies[i].ack(reply.GetValue())
		if lost {
			stats.lost++
		}
		if over && !warned {
			warned = true
			logger.Warn("a count is above the Adds this driver sent it: another driver adds to the counters too, "+
				"their counts are left from an earlier run (the same -postgres and -service), or an Add was counted twice",
				zap.String("counter", refs[i].ID().Key), zap.Int64("count", reply.GetValue()), zap.Int64("sent", tallies[i].sent))
		}
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
