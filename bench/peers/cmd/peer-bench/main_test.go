package main

import (
	"slices"
	"testing"

	"github.com/granaryio/granary/bench/scenario"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSectionsCoverEveryScenarioOnce: -docs rewrites each comparison whose
// scenarios all ran, so every scenario must belong to exactly one, or its
// figures would never be written, or be written twice.
func TestSectionsCoverEveryScenarioOnce(t *testing.T) {
	seen := map[string]string{}
	for _, sec := range sections() {
		if len(sec.scenarios) == 0 {
			t.Errorf("section %s has no scenario", sec.marker)
		}
		for _, n := range sec.scenarios {
			if prev, dup := seen[n]; dup {
				t.Errorf("%s is in sections %s and %s", n, prev, sec.marker)
			}
			seen[n] = sec.marker
		}
	}
	for _, n := range scenario.Names() {
		if seen[n] == "" {
			t.Errorf("%s is in no section", n)
		}
	}
	if len(seen) != len(scenario.Names()) {
		t.Errorf("sections name %d scenarios, the suite has %d", len(seen), len(scenario.Names()))
	}
	streams := sections()[1]
	if streams.marker != "streams" || !slices.Equal(streams.scenarios, scenario.StreamNames()) {
		t.Errorf("the streams' section is %+v, want marker streams and %v", streams, scenario.StreamNames())
	}
}

func TestOnlyKeepsTheNamedScenariosInOrder(t *testing.T) {
	rs := []scenario.Result{{Scenario: "a", System: "x"}, {Scenario: "b"}, {Scenario: "a", System: "y"}, {Scenario: "c"}}
	got := only(rs, []string{"c", "a"})
	if len(got) != 3 || got[0].System != "x" || got[1].System != "y" || got[2].Scenario != "c" {
		t.Errorf("only = %+v", got)
	}
	if !containsAll([]string{"a", "b", "c"}, []string{"c", "a"}) || containsAll([]string{"a"}, []string{"a", "b"}) {
		t.Error("containsAll is wrong")
	}
}
