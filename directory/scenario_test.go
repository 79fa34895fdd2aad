package directory_test

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/directory/directorytest"
	"github.com/granaryio/granary/grain"
)

// TestScenarios plays the scripts in testdata/*.txt. A script drives a
// cluster of directories on a directorytest.Network line by line, and the
// test delivers every message by hand, so a script pins down one
// interleaving of requests, replies and membership changes. Blank lines
// and comments, from a '#' followed by a space to the end of the line, are
// ignored. Silos are named by single words; a
// grain is named by a word too (see grain), and an entry is written
// silo:activation, or none.
//
// Setting up:
//
//	config maxhops=N vnodes=N batch=N recoveryms=N   Config fields, before silos
//	silos a b c                         start directories a, b and c, in no view yet
//	grain g1 a,b=a a,b,c=c              let g1 be a grain that a owns on the ring
//	                                    of a and b, and c on that of a, b and c
//	                                    (a grain not declared is t/<name>)
//
// Acting (the silo's part):
//
//	members a b c      every live silo installs the view [a b c] (SetMembers,
//	                   with its activations); "members" alone is the empty view
//	members@a,b a b c  only silos a and b install it
//	register a g1 1    a activates g1 as activation 1 and registers a:1; a drops
//	                   the activation if it loses or the registration fails
//	lookup b g1        b looks g1 up
//	unregister a g1 1  a deactivates its activation 1 of g1 and unregisters a:1
//	unregister b g1 a:1  b unregisters a:1 (it found no activation there)
//	handoff c          c.HandOffAll()
//	crash c            c stops: requests it serves or is sent fail, replies to it are lost
//	dead c             every live silo: SiloDead(c)
//	dead@a,b c         only silos a and b: SiloDead(c)
//	retry c            c.RetryRegistrations()
//	registerall c      c.RegisterAll()
//	advance 600        move the directories' clock on by 600 ms
//
// The network:
//
//	deliver            deliver the oldest message; "deliver N" the N oldest, one by one
//	deliver all        deliver the oldest until none is left
//	deliver to c       deliver the oldest addressed to c until none is (also "from c")
//	deliver #2         deliver the message at position 2 (0 is the oldest)
//	fail #2            lose that message: its asker is answered Unavailable
//	fail to c          lose every message queued to c
//	print              log the queue, every partition and the silos' activations
//
// Checking:
//
//	expect queue 2                 two messages are queued
//	expect msg #0 a->c Register g1=a:1   the message at position 0, as printed
//	expect lookup b g1 a:1         b's last lookup of g1 answered a:1 (or none,
//	                               pending, or err=<gRPC code>)
//	expect register a g1 b:2       a's last registration of g1: the winner (or
//	                               pending, or err=<gRPC code>)
//	expect entry g1 a:1            the one entry for g1 among live silos is a:1,
//	                               held by its owner (or none: there is none)
//	expect cached b g1 a:1         b.CachedLookup(g1) (or none)
//	expect local a g1 1            a holds activation 1 of g1 (or none)
//	expect lost a g1 1 winner=b:2  a was told a:1 of g1 lost to b:2: consumes
//	                               every such report, and wants at least one
//	expect no lost                 every report of Config.Lost was consumed
//	expect owner g1 c              every live silo believes c owns g1
//	expect stats c entries=1 forwarded=0   fields of c.Stats(): entries, cache,
//	                               silos, dead, forwarded, refused, handedoff,
//	                               dropped, lost, retrying
//	expect converged               nothing queued, views agree, one entry per
//	                               grain at its owner, every activation holds it
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenarios in testdata")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			runScenario(t, f)
		})
	}
}

type scenario struct {
	*cluster
	t      *testing.T
	cfg    directory.Config
	grains map[string]grain.ID
	names  *strings.Replacer // resolved grain IDs back to their names
}

func runScenario(t *testing.T, path string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg := directory.DefaultConfig()
	cfg.Clock = clockwork.NewFakeClock()
	cfg.Logger = zap.NewNop()
	s := &scenario{t: t, cfg: cfg, grains: make(map[string]grain.ID)}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := stripComment(sc.Text())
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		if err := s.step(fields); err != nil {
			if s.cluster != nil {
				s.print(t)
			}
			t.Fatalf("%s:%d: %s: %v", path, line, strings.TrimSpace(text), err)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// stripComment cuts a line at a '#' that ends it or is followed by a
// space: "#2" names a queued message.
func stripComment(line string) string {
	for i := 0; i < len(line); i++ {
		if line[i] == '#' && (i+1 == len(line) || line[i+1] == ' ' || line[i+1] == '\t') {
			return line[:i]
		}
	}
	return line
}

func (s *scenario) step(f []string) error {
	cmd, args := f[0], f[1:]
	if s.cluster == nil && cmd != "config" && cmd != "silos" {
		return fmt.Errorf("%s before silos", cmd)
	}
	switch {
	case cmd == "config":
		if s.cluster != nil {
			return fmt.Errorf("config after silos: it would not reach them")
		}
		return s.config(args)
	case cmd == "silos":
		if s.cluster != nil {
			return fmt.Errorf("silos twice")
		}
		s.cluster = newCluster(s.t, s.cfg)
		for _, name := range args {
			s.add(name)
		}
		s.names = strings.NewReplacer()
	case cmd == "grain":
		return s.declareGrain(args)
	case cmd == "advance" && len(args) == 1:
		ms, err := strconv.Atoi(args[0])
		if err != nil {
			return err
		}
		s.cfg.Clock.(*clockwork.FakeClock).Advance(time.Duration(ms) * time.Millisecond)
	case cmd == "members":
		for _, silo := range s.live() {
			s.setMembers(silo, args)
		}
	case strings.HasPrefix(cmd, "members@"):
		for _, silo := range strings.Split(strings.TrimPrefix(cmd, "members@"), ",") {
			if err := s.known(silo); err != nil {
				return err
			}
			s.setMembers(silo, args)
		}
	case cmd == "register" && len(args) == 3:
		act, err := strconv.ParseUint(args[2], 10, 64)
		if err != nil {
			return err
		}
		s.register(args[0], s.grain(args[1]), act)
	case cmd == "lookup" && len(args) == 2:
		s.lookup(args[0], s.grain(args[1]))
	case cmd == "unregister" && len(args) == 3:
		e, err := parseEntry(args[2])
		if err != nil {
			if act, aerr := strconv.ParseUint(args[2], 10, 64); aerr == nil {
				e, err = directory.Entry{Silo: args[0], Activation: act}, nil
			}
		}
		if err != nil {
			return err
		}
		s.deactivate(args[0], s.grain(args[1]), e)
	case cmd == "handoff" && len(args) == 1:
		s.dirs[args[0]].HandOffAll()
	case cmd == "crash" && len(args) == 1:
		s.crash(args[0])
	case cmd == "dead" && len(args) == 1:
		s.dead(args[0])
	case strings.HasPrefix(cmd, "dead@") && len(args) == 1:
		for _, silo := range strings.Split(strings.TrimPrefix(cmd, "dead@"), ",") {
			if err := s.known(silo); err != nil {
				return err
			}
			s.dirs[silo].SiloDead(args[0])
		}
	case cmd == "retry" && len(args) == 1:
		if err := s.known(args[0]); err != nil {
			return err
		}
		s.dirs[args[0]].RetryRegistrations()
	case cmd == "registerall" && len(args) == 1:
		if err := s.known(args[0]); err != nil {
			return err
		}
		s.dirs[args[0]].RegisterAll()
	case cmd == "deliver":
		return s.deliver(args)
	case cmd == "fail":
		return s.fail(args)
	case cmd == "print":
		s.print(s.t)
	case cmd == "expect" && len(args) > 0:
		return s.expect(args[0], args[1:])
	default:
		return fmt.Errorf("unknown command")
	}
	return nil
}

func (s *scenario) config(args []string) error {
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		switch k {
		case "maxhops":
			s.cfg.MaxHops = n
		case "vnodes":
			s.cfg.VirtualNodes = n
		case "batch":
			s.cfg.HandoffBatch = n
		case "recoveryms":
			s.cfg.RecoveryWindow = time.Duration(n) * time.Millisecond
		default:
			return fmt.Errorf("unknown setting %q", k)
		}
	}
	return nil
}

// declareGrain finds a key whose owners on the given rings are the given
// silos.
func (s *scenario) declareGrain(args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("grain needs a name")
	}
	name := args[0]
	type want struct {
		ring  *directory.Ring
		owner string
	}
	var wants []want
	for _, a := range args[1:] {
		silos, owner, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%q is not silos=owner", a)
		}
		wants = append(wants, want{directory.NewRing(strings.Split(silos, ","), s.cfg.VirtualNodes), owner})
	}
search:
	for i := range 100_000 {
		id := grain.NewID("t", fmt.Sprintf("%s~%d", name, i))
		for _, w := range wants {
			if w.ring.OwnerOf(id) != w.owner {
				continue search
			}
		}
		s.grains[name] = id
		s.names = strings.NewReplacer(namePairs(s.grains)...)
		return nil
	}
	return fmt.Errorf("no key of grain %s has those owners", name)
}

// namePairs returns the old, new pairs of a Replacer that writes grain
// IDs as their names, longest IDs first.
func namePairs(grains map[string]grain.ID) []string {
	names := make([]string, 0, len(grains))
	for n := range grains {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if la, lb := len(grains[a].String()), len(grains[b].String()); la != lb {
			return lb - la
		}
		return strings.Compare(a, b)
	})
	var pairs []string
	for _, n := range names {
		pairs = append(pairs, grains[n].String(), n)
	}
	return pairs
}

func (s *scenario) grain(name string) grain.ID {
	if id, ok := s.grains[name]; ok {
		return id
	}
	return grain.NewID("t", name)
}

func (s *scenario) known(silo string) error {
	if _, ok := s.dirs[silo]; !ok {
		return fmt.Errorf("unknown silo %q", silo)
	}
	return nil
}

func parseEntry(s string) (directory.Entry, error) {
	if s == "none" {
		return directory.Entry{}, nil
	}
	silo, act, ok := strings.Cut(s, ":")
	n, err := strconv.ParseUint(act, 10, 64)
	if !ok || silo == "" || err != nil {
		return directory.Entry{}, fmt.Errorf("%q is not silo:activation", s)
	}
	return directory.Entry{Silo: silo, Activation: n}, nil
}

func (s *scenario) deliver(args []string) error {
	switch {
	case len(args) == 0:
		return s.deliverAt(0)
	case args[0] == "all":
		s.net.DeliverAll(deliveryLimit)
	case len(args) == 2 && (args[0] == "to" || args[0] == "from"):
		match := func(m *directorytest.Message) bool { return m.To == args[1] }
		if args[0] == "from" {
			match = func(m *directorytest.Message) bool { return m.From == args[1] }
		}
		if s.net.Index(match) < 0 {
			return fmt.Errorf("no message %s %s", args[0], args[1])
		}
		for k := 0; ; k++ {
			i := s.net.Index(match)
			if i < 0 {
				break
			}
			if k > deliveryLimit {
				return fmt.Errorf("still delivering after %d messages", k)
			}
			s.net.Deliver(i)
		}
	case strings.HasPrefix(args[0], "#"):
		i, err := strconv.Atoi(args[0][1:])
		if err != nil {
			return err
		}
		return s.deliverAt(i)
	default:
		n, err := strconv.Atoi(args[0])
		if err != nil {
			return err
		}
		for range n {
			if err := s.deliverAt(0); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *scenario) deliverAt(i int) error {
	if !s.net.Deliver(i) {
		return fmt.Errorf("no message #%d: %d queued", i, s.net.Len())
	}
	return nil
}

func (s *scenario) fail(args []string) error {
	switch {
	case len(args) == 1 && strings.HasPrefix(args[0], "#"):
		i, err := strconv.Atoi(args[0][1:])
		if err != nil {
			return err
		}
		if !s.net.Fail(i) {
			return fmt.Errorf("no message #%d", i)
		}
	case len(args) == 2 && args[0] == "to":
		// Failing a message queues its failure reply last, so count first.
		n := 0
		for _, m := range s.net.Messages() {
			if m.To == args[1] {
				n++
			}
		}
		for range n {
			s.net.Fail(s.net.Index(func(m *directorytest.Message) bool { return m.To == args[1] }))
		}
	default:
		return fmt.Errorf("fail what?")
	}
	return nil
}

// msg renders a queued message with grain names.
func (s *scenario) msg(m *directorytest.Message) string { return s.names.Replace(m.String()) }

func (s *scenario) print(t testing.TB) {
	var b strings.Builder
	b.WriteString("queue:\n")
	for i, m := range s.net.Messages() {
		fmt.Fprintf(&b, "  #%d %s\n", i, s.msg(m))
	}
	for _, silo := range slices.Sorted(maps.Keys(s.dirs)) {
		state := ""
		if s.crashed[silo] {
			state = " (crashed)"
		}
		fmt.Fprintf(&b, "%s%s: view %v\n", silo, state, s.dirs[silo].Ring().Silos())
		for _, it := range s.dirs[silo].Entries() {
			fmt.Fprintf(&b, "  entry %s\n", s.names.Replace(it.String()))
		}
		for it := range s.localItems(silo) {
			fmt.Fprintf(&b, "  holds %s\n", s.names.Replace(it.String()))
		}
	}
	for _, l := range s.lost {
		fmt.Fprintf(&b, "lost: %s %s %v winner=%v\n", l.silo, s.names.Replace(l.id.String()), l.local, l.winner)
	}
	t.Log(b.String())
}

// describe renders a Lookup or Register result as a script writes it.
func describe(r result, ok bool) string {
	switch {
	case !ok:
		return "never asked"
	case !r.done:
		return "pending"
	case r.err != nil:
		return "err=" + status.Code(r.err).String()
	case !r.found:
		return "none"
	}
	return r.e.String()
}

func (s *scenario) expect(what string, args []string) error {
	need := func(n int) error {
		if len(args) != n {
			return fmt.Errorf("expect %s takes %d arguments", what, n)
		}
		return nil
	}
	switch what {
	case "queue":
		if err := need(1); err != nil {
			return err
		}
		if got := strconv.Itoa(s.net.Len()); got != args[0] {
			return fmt.Errorf("%s messages queued", got)
		}
	case "msg":
		if len(args) < 2 || !strings.HasPrefix(args[0], "#") {
			return fmt.Errorf("expect msg #N text")
		}
		i, err := strconv.Atoi(args[0][1:])
		msgs := s.net.Messages()
		if err != nil || i < 0 || i >= len(msgs) {
			return fmt.Errorf("no message %s", args[0])
		}
		if got, want := s.msg(msgs[i]), strings.Join(args[1:], " "); got != want {
			return fmt.Errorf("message %s is %q", args[0], got)
		}
	case "lookup", "register":
		if err := need(3); err != nil {
			return err
		}
		results := s.lookups
		if what == "register" {
			results = s.registers
		}
		r, ok := results[call{args[0], s.grain(args[1])}]
		if got := describe(r, ok); got != args[2] {
			return fmt.Errorf("answered %s", got)
		}
	case "entry":
		if err := need(2); err != nil {
			return err
		}
		id := s.grain(args[0])
		hs := s.entries(id)
		if args[1] == "none" {
			if len(hs) != 0 {
				return fmt.Errorf("entries %v", hs)
			}
			return nil
		}
		want, err := parseEntry(args[1])
		if err != nil {
			return err
		}
		if len(hs) != 1 || hs[0].entry != want {
			return fmt.Errorf("entries %v", hs)
		}
		if o := s.dirs[hs[0].silo].Owner(id); o != hs[0].silo {
			return fmt.Errorf("the entry is at %s, which believes %s owns %s", hs[0].silo, o, args[0])
		}
	case "cached":
		if err := need(3); err != nil {
			return err
		}
		e, _ := s.dirs[args[0]].CachedLookup(s.grain(args[1]))
		if e.String() != args[2] {
			return fmt.Errorf("CachedLookup = %v", e)
		}
	case "local":
		if err := need(3); err != nil {
			return err
		}
		got := "none"
		if e, ok := s.locals[args[0]][s.grain(args[1])]; ok {
			got = strconv.FormatUint(e.Activation, 10)
		}
		if got != args[2] {
			return fmt.Errorf("holds %s", got)
		}
	case "lost":
		if len(args) == 0 {
			return fmt.Errorf("expect lost silo grain activation winner=entry, or expect no lost")
		}
		return s.expectLost(args)
	case "no":
		if len(args) != 1 || args[0] != "lost" {
			return fmt.Errorf("expect no what?")
		}
		if len(s.lost) != 0 {
			return fmt.Errorf("%d reports of Lost, the first %s %v lost to %v", len(s.lost), s.lost[0].silo, s.lost[0].local, s.lost[0].winner)
		}
	case "owner":
		if err := need(2); err != nil {
			return err
		}
		for _, silo := range s.live() {
			if o := s.dirs[silo].Owner(s.grain(args[0])); o != args[1] {
				return fmt.Errorf("%s believes %s owns it", silo, o)
			}
		}
	case "stats":
		if len(args) < 2 {
			return fmt.Errorf("expect stats silo field=value...")
		}
		return s.expectStats(args[0], args[1:])
	case "converged":
		return s.checkConverged(true)
	default:
		return fmt.Errorf("unknown expectation %q", what)
	}
	return nil
}

func (s *scenario) expectLost(args []string) error {
	if len(args) != 4 || !strings.HasPrefix(args[3], "winner=") {
		return fmt.Errorf("expect lost silo grain activation winner=entry")
	}
	act, err := strconv.ParseUint(args[2], 10, 64)
	if err != nil {
		return err
	}
	winner, err := parseEntry(strings.TrimPrefix(args[3], "winner="))
	if err != nil {
		return err
	}
	want := lostEvent{args[0], s.grain(args[1]), directory.Entry{Silo: args[0], Activation: act}, winner}
	n := len(s.lost)
	s.lost = slices.DeleteFunc(s.lost, func(l lostEvent) bool { return l == want })
	if len(s.lost) == n {
		return fmt.Errorf("no such report among %d", n)
	}
	return nil
}

func (s *scenario) expectStats(silo string, fields []string) error {
	if err := s.known(silo); err != nil {
		return err
	}
	st := s.dirs[silo].Stats()
	values := map[string]uint64{
		"entries": uint64(st.Entries), "cache": uint64(st.CacheEntries), "silos": uint64(st.Silos),
		"dead": uint64(st.DeadSilos), "forwarded": st.Forwarded, "refused": st.Refused,
		"handedoff": st.HandedOff, "dropped": st.Dropped, "lost": st.Lost,
		"retrying": uint64(st.Retrying),
	}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		got, ok := values[k]
		if !ok {
			return fmt.Errorf("unknown stat %q", k)
		}
		if strconv.FormatUint(got, 10) != v {
			return fmt.Errorf("%s is %d", k, got)
		}
	}
	return nil
}
