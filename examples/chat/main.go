// Command chat is a chat service on a Granary cluster, in one binary with
// two modes. "chat silo" runs one silo of the cluster, which hosts the
// chat rooms: each room is a durable stream of posts, which a Room grain
// checks and publishes. "chat client" is a member of one room: it
// connects through the silos' gateways, follows the room's stream, from
// an hour back by default so that it sees what was said before it came,
// and posts each line typed on its standard input.
//
// One silo and two members, each in its own terminal:
//
//	go build -o chat ./examples/chat
//	./chat silo -name a -gossip 127.0.0.1:7946 -grpc 127.0.0.1:7947 -gateway 127.0.0.1:30000
//	./chat client -gateways 127.0.0.1:30000 -room lobby -name alice
//	./chat client -gateways 127.0.0.1:30000 -room lobby -name bob
//
// Type a line in either client and both show it, as
//
//	[lobby] alice: hello
//
// in the room's one order. A silo alone keeps the rooms in memory, for as
// long as it runs. The silos of a cluster share the rooms' log in
// PostgreSQL (-postgres on each), so a room's posts outlive any silo:
//
//	./chat silo -name a -gossip 127.0.0.1:7946 -grpc 127.0.0.1:7947 -gateway 127.0.0.1:30000 -postgres postgres://...
//	./chat silo -name b -gossip 127.0.0.1:7956 -grpc 127.0.0.1:7957 -gateway 127.0.0.1:30010 -postgres postgres://... -seeds 127.0.0.1:7946
//
// A client in any language follows a room over plain gRPC, through the
// gateway's stream service; the Python example's client, for one (its
// README shows how to make the message classes it reads):
//
//	python3 examples/python/client.py --pb /tmp/pb --target 127.0.0.1:30000 --timeout 3600 \
//	  granary.v1.StreamGateway/Subscribe '{"stream": "chat/rooms/lobby", "fromUnixNanos": "1"}'
//
// A client that loses its gateway goes on through another, from the post
// after the last it showed. Ctrl-D (the end of standard input) or Ctrl-C
// leaves the room and exits. Ctrl-C stops a silo gracefully: it leaves
// the cluster and hands its clients over; a second Ctrl-C exits at once.
//
// A silo prints machine-readable lines on stdout, for scripts and the
// tests, and logs to stderr:
//
//	ready member=<member ID> gossip=<host:port> grpc=<host:port> gateway=<host:port>
//	stopped member=<member ID>
//
// A client prints the posts, and
//
//	joined room=<room> name=<name>
//	left room=<room>
//
// Port 0 in an address picks a free port, which the ready line names.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/membership"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/pgstore"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// stopTimeout bounds a silo's graceful stop after SIGTERM or SIGINT:
// past it the silo is closed at once and the program exits with an
// error.
const stopTimeout = 10 * time.Second

// usage is the program's synopsis, for a command line without a mode.
const usage = `usage:
  chat silo [-name n] [-gossip host:port] [-grpc host:port] [-gateway host:port] [-postgres dsn [-seeds a,b]] [-cluster id] [-profile lan|local]
  chat client [-gateways a,b] [-room r] -name n [-history 1h]
"chat silo -h" and "chat client -h" describe the flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	// The first SIGTERM or SIGINT stops the program gracefully; stop then
	// restores the default action, so a second one ends the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)

	var err error
	switch mode, args := os.Args[1], os.Args[2:]; mode {
	case "silo":
		var o siloOptions
		if o, err = parseSiloFlags(args, os.Stderr); err == nil {
			err = runSilo(ctx, o, os.Stdout, os.Stderr)
		}
	case "client":
		var o clientOptions
		if o, err = parseClientFlags(args, os.Stderr); err == nil {
			err = runClient(ctx, o, os.Stdin, os.Stdout, os.Stderr)
		}
	case "-h", "-help", "--help", "help":
		fmt.Fprint(os.Stderr, usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "chat: unknown mode %q\n%s", mode, usage)
		os.Exit(2)
	}
	var flagErr *flagError
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, &flagErr):
		fmt.Fprintln(os.Stderr, "chat:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "chat:", err)
		os.Exit(1)
	}
}

// flagError is a command line that does not parse or make sense: the
// program exits with status 2.
type flagError struct{ err error }

func (e *flagError) Error() string { return e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }

func badFlags(format string, args ...any) error {
	return &flagError{fmt.Errorf(format, args...)}
}

// siloOptions are the flags of chat silo.
type siloOptions struct {
	name    string   // the silo's name; its member ID adds a generation
	cluster string   // the cluster ID: silos of other clusters are refused
	gossip  string   // host:port the gossip listeners bind to
	grpc    string   // host:port the silo-to-silo gRPC server listens on
	gateway string   // host:port the gateway for clients listens on
	seeds   []string // gossip addresses to join through
	profile string   // failure-detection profile: "lan" or "local"
	// postgres names the database that keeps the rooms' log and
	// subscriptions, shared by the cluster's silos; "" keeps them in
	// this silo's memory.
	postgres string
}

// parseSiloFlags reads the flags of chat silo. Usage and flag errors go
// to stderr.
func parseSiloFlags(args []string, stderr io.Writer) (siloOptions, error) {
	fs := flag.NewFlagSet("chat silo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o siloOptions
	var seeds string
	fs.StringVar(&o.name, "name", "silo", "the silo's `name`, in logs and member IDs")
	fs.StringVar(&o.cluster, "cluster", "granary-chat", "the cluster `ID`; every silo of a cluster uses the same")
	fs.StringVar(&o.gossip, "gossip", "127.0.0.1:7946", "`host:port` to gossip on (UDP and TCP); host is an IP")
	fs.StringVar(&o.grpc, "grpc", "127.0.0.1:7947", "`host:port` of the gRPC server other silos call")
	fs.StringVar(&o.gateway, "gateway", "127.0.0.1:30000", "`host:port` of the gateway clients connect to")
	fs.StringVar(&seeds, "seeds", "", "comma-separated gossip `addresses` of silos to join through; none founds a cluster")
	fs.StringVar(&o.profile, "profile", "lan", "failure-detection `profile`: lan (dead in ~2.5 s) or local (~1 s, loopback tests)")
	fs.StringVar(&o.postgres, "postgres", "", "the PostgreSQL `database` (a URL or key=value words) that keeps the rooms, shared by the cluster's silos; none keeps them in this silo's memory")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return siloOptions{}, err
		}
		return siloOptions{}, &flagError{err}
	}
	if fs.NArg() > 0 {
		return siloOptions{}, badFlags("unexpected arguments %q", fs.Args())
	}
	o.seeds = splitList(seeds)
	if len(o.seeds) > 0 && o.postgres == "" {
		return siloOptions{}, badFlags("-seeds: a silo that joins others needs -postgres, the database they share the rooms in")
	}
	return o, nil
}

// parseClientFlags reads the flags of chat client. Usage and flag errors
// go to stderr.
func parseClientFlags(args []string, stderr io.Writer) (clientOptions, error) {
	fs := flag.NewFlagSet("chat client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o clientOptions
	var gateways string
	fs.StringVar(&gateways, "gateways", "127.0.0.1:30000", "comma-separated gateway `addresses` to learn the cluster from")
	fs.StringVar(&o.room, "room", "lobby", "the `room` to join")
	fs.StringVar(&o.name, "name", "", "your display `name` (required; at most 64 bytes)")
	fs.DurationVar(&o.history, "history", defaultHistory, "show the room's posts of this long ago on, then new ones")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return clientOptions{}, err
		}
		return clientOptions{}, &flagError{err}
	}
	o.gateways = splitList(gateways)
	switch {
	case fs.NArg() > 0:
		return clientOptions{}, badFlags("unexpected arguments %q", fs.Args())
	case len(o.gateways) == 0:
		return clientOptions{}, badFlags("-gateways: name at least one gateway")
	case o.room == "":
		return clientOptions{}, badFlags("-room: must not be empty")
	case o.history < 0:
		return clientOptions{}, badFlags("-history %v: must not be negative", o.history)
	}
	if err := checkName(o.name); err != nil {
		return clientOptions{}, badFlags("-name %q: must not be empty, nor longer than %d bytes", o.name, maxNameBytes)
	}
	return o, nil
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// runSilo starts a silo that hosts the Room grains and serves a gateway,
// joins the cluster, prints the ready line on stdout, and stops the silo
// gracefully when ctx ends. It logs to stderr.
func runSilo(ctx context.Context, o siloOptions, stdout, stderr io.Writer) error {
	cfg, err := siloConfig(o)
	if err != nil {
		return err
	}
	logger := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(stderr), zap.InfoLevel),
		zap.AddCaller(), zap.Fields(zap.String("name", o.name)))
	defer func() { _ = logger.Sync() }() // syncing stderr may fail; nothing to do about it
	cfg.Logger = logger

	store, err := openStore(ctx, o)
	if err != nil {
		return err
	}
	defer store.close()
	cfg.Storage = map[string]storage.Provider{grain.DefaultStorage: store.p}
	s, err := silo.New(cfg)
	if err != nil {
		return err
	}
	if err := registerRoom(s, time.Now); err != nil {
		return err
	}
	// Start returns once the silo has joined through a seed (it retries
	// until one answers) or founded the cluster, and serves its gateway.
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("joining cluster %q: %w", o.cluster, err)
	}
	defer s.Close() // a no-op after a graceful Stop; stops the silo on an early return
	gossip, grpcAddr := s.ClusterAddrs()
	fmt.Fprintf(stdout, "ready member=%s gossip=%s grpc=%s gateway=%s\n", s.Member(), gossip, grpcAddr, s.GatewayAddr())
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
func siloConfig(o siloOptions) (silo.Config, error) {
	cc := silo.DefaultClusterConfig()
	switch o.profile {
	case "lan":
		cc.Membership = membership.DefaultLANConfig()
	case "local":
		cc.Membership = membership.DefaultLocalConfig()
	default:
		return silo.Config{}, badFlags("-profile %q: want lan or local", o.profile)
	}
	host, port, err := splitPort("-gossip", o.gossip)
	if err != nil {
		return silo.Config{}, err
	}
	if _, _, err := splitPort("-grpc", o.grpc); err != nil {
		return silo.Config{}, err
	}
	if _, _, err := splitPort("-gateway", o.gateway); err != nil {
		return silo.Config{}, err
	}
	cc.Membership.ClusterID = o.cluster
	cc.Membership.BindAddr = host
	cc.Membership.BindPort = port
	cc.Membership.Seeds = o.seeds
	cc.GRPCListen = o.grpc

	gc := silo.DefaultGatewayConfig()
	gc.Listen = o.gateway

	cfg := silo.DefaultConfig()
	cfg.Name = o.name
	cfg.Cluster = &cc
	cfg.Gateway = &gc
	// The rooms are the durable provider's streams, whose log is the
	// default storage provider (openStore).
	cfg.Streams = &silo.StreamsConfig{Providers: map[string]silo.StreamProviderConfig{streamProvider: {Kind: "durable"}}}
	return cfg, nil
}

// store is the silo's storage provider, and how to close it.
type store struct {
	p     storage.Provider
	close func()
}

// openStore opens the database o names, with the cluster ID as its
// service ID, or makes a memory store for a silo alone.
func openStore(ctx context.Context, o siloOptions) (store, error) {
	if o.postgres == "" {
		return store{p: storage.NewMemory(0), close: func() {}}, nil
	}
	pg, err := pgstore.Open(ctx, pgstore.Config{DSN: o.postgres, ServiceID: o.cluster})
	if err != nil {
		return store{}, fmt.Errorf("opening the database (-postgres): %w", err)
	}
	return store{p: pg, close: pg.Close}, nil
}

// splitPort splits a listen address, defaulting the host to every
// interface. Port 0 picks a free port, which the ready line names.
func splitPort(flagName, addr string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, badFlags("%s %q: %v", flagName, addr, err)
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, badFlags("%s %q: the port must be in [0, 65535]", flagName, addr)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}
