package client

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/hashmix"
)

// TestSeedsResolveTheDNSName: the DNS name's addresses join the static
// seeds, resolved each time, and a failed lookup leaves the static ones.
func TestSeedsResolveTheDNSName(t *testing.T) {
	t.Parallel()
	o := defaultOptions()
	WithGateways("static:1")(&o)
	WithGatewayDNS("silos.example:30000")(&o)
	answers := [][]string{{"10.0.0.1", "10.0.0.2"}, {"10.0.0.3"}}
	var asked []string
	o.lookupHost = func(host string) ([]string, error) {
		asked = append(asked, host)
		if len(answers) == 0 {
			return nil, errors.New("no such host")
		}
		a := answers[0]
		answers = answers[1:]
		return a, nil
	}
	c := &Client{o: o, log: o.log}
	for _, want := range [][]string{
		{"10.0.0.1:30000", "10.0.0.2:30000", "static:1"},
		{"10.0.0.3:30000", "static:1"},
		{"static:1"},
	} {
		got := c.seeds()
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("seeds %v, want %v", got, want)
		}
	}
	if !slices.Equal(asked, []string{"silos.example", "silos.example", "silos.example"}) {
		t.Fatalf("looked up %v", asked)
	}
}

// TestPickSpreadsGrains: the gateway for a grain is the same each time,
// grains spread evenly over the gateways, a gateway already tried is
// skipped, and one marked down is taken only when no other is left.
func TestPickSpreadsGrains(t *testing.T) {
	t.Parallel()
	c := &Client{o: defaultOptions()}
	gws := []*gatewayRef{
		{silo: "a-1", hash: hashmix.FNV1a("a-1")},
		{silo: "b-2", hash: hashmix.FNV1a("b-2")},
		{silo: "c-3", hash: hashmix.FNV1a("c-3")},
	}
	c.gws.Store(&gws)
	count := map[string]int{}
	for i := range 3000 {
		id := grain.NewID("t.T", strconv.Itoa(i))
		g := c.pick(id, nil)
		if again := c.pick(id, nil); again != g {
			t.Fatalf("grain %v went to %s, then %s", id, g.silo, again.silo)
		}
		if other := c.pick(id, []*gatewayRef{g}); other == g || other == nil {
			t.Fatalf("grain %v: with %s tried, picked %v", id, g.silo, other)
		}
		count[g.silo]++
	}
	for _, g := range gws {
		if n := count[g.silo]; n < 800 || n > 1200 {
			t.Fatalf("gateway %s got %d of 3000 grains: %v", g.silo, n, count)
		}
	}
	id := grain.NewID("t.T", "x")
	first := c.pick(id, nil)
	c.markDown(first)
	if g := c.pick(id, nil); g == first {
		t.Fatalf("picked %s, marked down, while others are up", first.silo)
	}
	if g := c.pick(id, []*gatewayRef{gws[0], gws[1], gws[2]}); g != nil {
		t.Fatalf("picked %s with every gateway tried", g.silo)
	}
	others := []*gatewayRef{}
	for _, g := range gws {
		if g != first {
			others = append(others, g)
		}
	}
	if g := c.pick(id, others); g != first {
		t.Fatalf("with the others tried, picked %v, want the one marked down", g)
	}
}
