package client

import (
	"errors"
	"slices"
	"testing"
)

// TestSeedsResolveTheDNSName: the DNS name's addresses join the static
// seeds, resolved each time, and a failed lookup leaves the static ones.
func TestSeedsResolveTheDNSName(t *testing.T) {
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
