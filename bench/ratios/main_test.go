package main

import (
	"strings"
	"testing"
)

func TestParseAndMedian(t *testing.T) {
	out := `goos: linux
BenchmarkRoundTrip-2   	 1000000	       500.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkRoundTrip-2   	 1000000	       300.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkRoundTrip-2   	 1000000	       400.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkThroughput/groups=1000-2 	 16434312	 76.46 ns/op	 13.08 Mturns/s	 0 B/op	 0 allocs/op
PASS`
	s, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if got := median(s["RoundTrip"]); got != 400 {
		t.Errorf("median RoundTrip = %v; want 400", got)
	}
	if got := s["Throughput/groups=1000"]; len(got) != 1 || got[0] != 76.46 {
		t.Errorf("Throughput/groups=1000 samples = %v", got)
	}
	if got := median([]float64{1, 2, 3, 10}); got != 2.5 {
		t.Errorf("median of even count = %v; want 2.5", got)
	}
}
