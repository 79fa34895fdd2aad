package directory_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/directory/directorytest"
	"github.com/granaryio/granary/grain"
)

func testConfig() directory.Config {
	cfg := directory.DefaultConfig()
	cfg.Clock = clockwork.NewFakeClock()
	cfg.Logger = zap.NewNop()
	return cfg
}

func TestConfigErrorsNameField(t *testing.T) {
	tests := []struct {
		field string
		edit  func(*directory.Config)
	}{
		{"VirtualNodes", func(c *directory.Config) { c.VirtualNodes = 0 }},
		{"VirtualNodes", func(c *directory.Config) { c.VirtualNodes = 5000 }},
		{"CacheSize", func(c *directory.Config) { c.CacheSize = -1 }},
		{"CacheTTL", func(c *directory.Config) { c.CacheTTL = 0 }},
		{"MaxHops", func(c *directory.Config) { c.MaxHops = -1 }},
		{"MaxHops", func(c *directory.Config) { c.MaxHops = 17 }},
		{"HandoffBatch", func(c *directory.Config) { c.HandoffBatch = 0 }},
		{"Logger", func(c *directory.Config) { c.Logger = nil }},
		{"Clock", func(c *directory.Config) { c.Clock = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			cfg := directory.DefaultConfig()
			tt.edit(&cfg)
			_, err := directory.New(cfg, "a", senderFunc(nil))
			var ce *directory.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("New = %v, want a ConfigError naming %s", err, tt.field)
			}
			if !strings.HasPrefix(err.Error(), "directory: config: "+tt.field+": ") {
				t.Errorf("error %q does not begin with the package and field", err)
			}
		})
	}
	if _, err := directory.New(directory.DefaultConfig(), "a", senderFunc(nil)); err != nil {
		t.Errorf("New(DefaultConfig()) = %v", err)
	}
	if _, err := directory.New(directory.DefaultConfig(), "", senderFunc(nil)); err == nil {
		t.Error("New with an empty silo ID succeeded")
	}
	if _, err := directory.New(directory.DefaultConfig(), "a", nil); err == nil {
		t.Error("New with a nil Sender succeeded")
	}
}

// senderFunc is a Sender made of a function; nil answers Unavailable.
type senderFunc func(to string, req *directory.Request, done func(*directory.Response, error))

func (f senderFunc) Send(to string, req *directory.Request, done func(*directory.Response, error)) {
	if f == nil {
		done(nil, status.Error(codes.Unavailable, "no network"))
		return
	}
	f(to, req, done)
}

func TestHandleBadRequests(t *testing.T) {
	id := grain.NewID("t", "k")
	tests := []struct {
		name string
		req  *directory.Request
	}{
		{"nil", nil},
		{"no op", &directory.Request{Items: []directory.Item{{ID: id}}}},
		{"unknown op", &directory.Request{Op: 99, Items: []directory.Item{{ID: id}}}},
		{"lookup without items", &directory.Request{Op: directory.OpLookup}},
		{"lookup with two items", &directory.Request{Op: directory.OpLookup, Items: []directory.Item{{ID: id}, {ID: id}}}},
		{"lookup of the zero ID", &directory.Request{Op: directory.OpLookup, Items: []directory.Item{{}}}},
		{"register without items", &directory.Request{Op: directory.OpRegister}},
		{"register naming no silo", &directory.Request{Op: directory.OpRegister, Items: []directory.Item{{ID: id, Entry: directory.Entry{Activation: 1}}}}},
		{"unregister naming no silo", &directory.Request{Op: directory.OpUnregister, Items: []directory.Item{{ID: id}}}},
		{"handoff of the zero ID", &directory.Request{Op: directory.OpHandoff, Items: []directory.Item{{ID: id, Entry: ent("a", 1)}, {Entry: ent("a", 1)}}}},
		{"handoff naming no silo", &directory.Request{Op: directory.OpHandoff, Items: []directory.Item{{ID: id}}}},
		{"negative hops", &directory.Request{Op: directory.OpLookup, Items: []directory.Item{{ID: id}}, Hops: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := directory.New(testConfig(), "a", senderFunc(nil))
			if err != nil {
				t.Fatal(err)
			}
			d.SetMembers([]string{"a"}, nil)
			calls := 0
			d.Handle("b", tt.req, func(resp *directory.Response, err error) {
				calls++
				if status.Code(err) != codes.InvalidArgument || resp != nil {
					t.Errorf("reply(%v, %v), want an InvalidArgument error", resp, err)
				}
				if !strings.HasPrefix(status.Convert(err).Message(), "directory: ") {
					t.Errorf("error %q does not begin with the package name", err)
				}
			})
			if calls != 1 {
				t.Errorf("reply called %d times", calls)
			}
			if n := len(d.Entries()); n != 0 {
				t.Errorf("a bad request left %d entries", n)
			}
		})
	}
}

// TestAlone: a silo alone owns everything; its calls answer at once, from
// its own partition, without a message.
func TestAlone(t *testing.T) {
	d, err := directory.New(testConfig(), "a", senderFunc(func(to string, _ *directory.Request, _ func(*directory.Response, error)) {
		t.Errorf("a silo alone sent a request to %s", to)
	}))
	if err != nil {
		t.Fatal(err)
	}
	if d.Self() != "a" {
		t.Errorf("Self() = %q", d.Self())
	}
	var (
		winner directory.Entry
		found  bool
	)
	var early error
	d.Register(g1, ent("b", 1), func(_ directory.Entry, err error) { early = err }) // before any view
	if early != directory.ErrNoSilos {
		t.Fatalf("Register before any view = %v, want ErrNoSilos", early)
	}
	d.SetMembers([]string{"a"}, nil)
	d.Register(g1, ent("a", 1), func(w directory.Entry, err error) { winner = w })
	if winner != ent("a", 1) {
		t.Fatalf("Register answered %v before returning, want a:1", winner)
	}
	d.Register(g1, ent("a", 2), func(w directory.Entry, err error) { winner = w })
	d.Lookup(g1, func(e directory.Entry, f bool, err error) { found = f && e == ent("a", 1) && err == nil })
	if winner != ent("a", 1) || !found {
		t.Fatalf("second Register answered %v, Lookup found a:1: %t", winner, found)
	}
	if e, ok := d.CachedLookup(g1); !ok || e != ent("a", 1) {
		t.Errorf("CachedLookup(g1) = %v, %t", e, ok)
	}
	d.Unregister(g1, ent("a", 1))
	if e, ok := d.CachedLookup(g1); ok {
		t.Errorf("after Unregister, CachedLookup(g1) = %v", e)
	}
	d.Lookup(g1, func(e directory.Entry, f bool, err error) { found = f })
	if found {
		t.Error("Lookup found g1 after Unregister")
	}
	st := d.Stats()
	if st.Entries != 0 || st.Silos != 1 || st.Share != 1 {
		t.Errorf("Stats() = %+v", st)
	}
	for _, bad := range []struct {
		id grain.ID
		e  directory.Entry
	}{{grain.ID{}, ent("a", 1)}, {g1, directory.Entry{Activation: 3}}} {
		var err error
		d.Register(bad.id, bad.e, func(_ directory.Entry, e error) { err = e })
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("Register(%v, %v) = %v, want InvalidArgument", bad.id, bad.e, err)
		}
	}
	var lerr error
	d.Lookup(grain.ID{}, func(_ directory.Entry, _ bool, err error) { lerr = err })
	if status.Code(lerr) != codes.InvalidArgument {
		t.Errorf("Lookup of the zero ID = %v, want InvalidArgument", lerr)
	}
}

// TestRemoteAnswersCached: a found answer from the owner is cached until
// its TTL; a failed or empty one is not.
func TestRemoteAnswersCached(t *testing.T) {
	clock := clockwork.NewFakeClock()
	cfg := testConfig()
	cfg.Clock = clock
	asked := 0
	answer := &directory.Response{Found: true, Entry: ent("b", 7)}
	d, _ := directory.New(cfg, "a", senderFunc(func(to string, req *directory.Request, done func(*directory.Response, error)) {
		asked++
		done(answer, nil) // before Send returns
	}))
	d.SetMembers([]string{"b"}, nil) // a is not on the ring: b owns everything
	look := func() (e directory.Entry) {
		d.Lookup(g1, func(got directory.Entry, _ bool, _ error) { e = got })
		return e
	}
	if e := look(); e != ent("b", 7) || asked != 1 {
		t.Fatalf("Lookup = %v after %d requests", e, asked)
	}
	look()
	if asked != 1 {
		t.Errorf("a cached answer was asked again")
	}
	clock.Advance(cfg.CacheTTL)
	look()
	if asked != 2 {
		t.Errorf("an expired answer was not asked again")
	}
	d.Invalidate(g1, ent("b", 7))
	answer = &directory.Response{}
	look()
	look()
	if asked != 4 {
		t.Errorf("asked %d times, want 4: a not-found answer is not cached", asked)
	}
}

// TestSenderWithoutAnswer: a Sender that answers neither a response nor an
// error yields Internal, not a panic.
func TestSenderWithoutAnswer(t *testing.T) {
	d, _ := directory.New(testConfig(), "a", senderFunc(func(_ string, _ *directory.Request, done func(*directory.Response, error)) {
		done(nil, nil)
	}))
	d.SetMembers([]string{"b"}, slices.Values([]directory.Item{{ID: g1, Entry: ent("a", 1)}}))
	var errs []error
	d.Lookup(g1, func(_ directory.Entry, _ bool, err error) { errs = append(errs, err) })
	d.Register(g1, ent("a", 1), func(_ directory.Entry, err error) { errs = append(errs, err) })
	for _, err := range errs {
		if status.Code(err) != codes.Internal {
			t.Errorf("err = %v, want Internal", err)
		}
	}
	if len(errs) != 2 {
		t.Errorf("%d answers, want 2", len(errs))
	}
}

// TestCallbacksWithoutLock: done, reply and Lost may call back into the
// directories, with a Sender that delivers inline; a lock held around any
// of them would deadlock here.
func TestCallbacksWithoutLock(t *testing.T) {
	dirs := make(map[string]*directory.Directory)
	inline := func(from string) directory.Sender {
		return senderFunc(func(to string, req *directory.Request, done func(*directory.Response, error)) {
			dirs[to].Handle(from, req, func(resp *directory.Response, err error) {
				dirs[from].Stats()
				done(resp, err)
			})
		})
	}
	var lost []string
	for _, name := range []string{"a", "b", "c"} {
		cfg := testConfig()
		cfg.Lost = func(id grain.ID, local, winner directory.Entry) {
			dirs[name].Entries()
			dirs[name].Lookup(id, func(directory.Entry, bool, error) {})
			lost = append(lost, fmt.Sprint(name, " ", local, " ", winner))
		}
		d, err := directory.New(cfg, name, inline(name))
		if err != nil {
			t.Fatal(err)
		}
		dirs[name] = d
	}
	gb := findGrain(t, map[string]string{"a,b": "a", "a,b,c": "c"})
	for _, name := range []string{"a", "b"} {
		dirs[name].SetMembers([]string{"a", "b"}, nil)
	}
	dirs["b"].Register(gb, ent("b", 1), func(w directory.Entry, err error) {
		dirs["b"].CachedLookup(gb)
		if w != ent("b", 1) || err != nil {
			t.Errorf("Register = %v, %v", w, err)
		}
	})
	// c joins and activates gb before the others know: a duplicate.
	dirs["c"].SetMembers([]string{"a", "b", "c"}, nil)
	dirs["c"].Register(gb, ent("c", 2), func(directory.Entry, error) {})
	dirs["a"].SetMembers([]string{"a", "b", "c"}, nil)
	dirs["b"].SetMembers([]string{"a", "b", "c"}, slices.Values([]directory.Item{{ID: gb, Entry: ent("b", 1)}}))
	if len(lost) != 1 || lost[0] != "b b:1 c:2" {
		t.Errorf("Lost reports %q, want [b b:1 c:2]", lost)
	}
}

// TestConcurrentUse lets the race detector watch directories used from
// many goroutines while their views change.
func TestConcurrentUse(t *testing.T) {
	dirs := make(map[string]*directory.Directory) // filled before any use
	names := []string{"a", "b", "c"}
	for _, name := range names {
		d, err := directory.New(testConfig(), name, senderFunc(func(to string, req *directory.Request, done func(*directory.Response, error)) {
			dirs[to].Handle(name, req, done)
		}))
		if err != nil {
			t.Fatal(err)
		}
		dirs[name] = d
	}
	for _, name := range names {
		dirs[name].SetMembers(names, nil)
	}
	ids := sampleIDs(64)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			d := dirs[names[w%3]]
			for i := range 300 {
				id := ids[(i*7+w)%len(ids)]
				e := ent(d.Self(), uint64(i))
				switch i % 4 {
				case 0:
					d.Register(id, e, func(directory.Entry, error) {})
				case 1:
					d.Lookup(id, func(directory.Entry, bool, error) {})
				case 2:
					d.Unregister(id, e)
				default:
					d.CachedLookup(id)
					d.Stats()
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 30 {
			view := names[:2+i%2]
			for _, name := range names {
				dirs[name].SetMembers(view, nil)
			}
		}
	})
	wg.Wait()
}

// findGrain returns a grain whose owners on the given rings (keyed by
// comma-separated silos) are the given silos.
func findGrain(t *testing.T, owners map[string]string) grain.ID {
	t.Helper()
	for i := range 100_000 {
		id := grain.NewID("t", fmt.Sprint("k", i))
		ok := true
		for silos, owner := range owners {
			if directory.NewRing(strings.Split(silos, ","), 64).OwnerOf(id) != owner {
				ok = false
				break
			}
		}
		if ok {
			return id
		}
	}
	t.Fatal("no such grain")
	return grain.ID{}
}

// Two silos activate the same grain at once. Its owner, a, records its own
// activation at once; b's registration reaches a later and is told the
// winner, so b discards its activation and forwards to a:1.
func Example() {
	net := directorytest.NewNetwork()
	dirs := make(map[string]*directory.Directory)
	for _, name := range []string{"a", "b"} {
		d, err := directory.New(directory.DefaultConfig(), name, net.Sender(name))
		if err != nil {
			panic(err)
		}
		net.Attach(name, d)
		dirs[name] = d
	}
	for _, d := range dirs {
		d.SetMembers([]string{"a", "b"}, nil)
	}

	alice := grain.NewID("bank.Account", "alice")
	fmt.Println("owner:", dirs["b"].Owner(alice))
	dirs["a"].Register(alice, directory.Entry{Silo: "a", Activation: 1}, func(winner directory.Entry, err error) {
		fmt.Println("a registered:", winner, err)
	})
	dirs["b"].Register(alice, directory.Entry{Silo: "b", Activation: 7}, func(winner directory.Entry, err error) {
		fmt.Println("b registered:", winner, err)
	})
	net.DeliverAll(100)

	e, ok := dirs["b"].CachedLookup(alice)
	fmt.Println("b's cache:", e, ok)
	// Output:
	// owner: a
	// a registered: a:1 <nil>
	// b registered: a:1 <nil>
	// b's cache: a:1 true
}
