// The multi-process test with the counts in PostgreSQL: it needs a server
// (internal/pgtest), and skips without one.

package main

import (
	"context"
	"fmt"
	"github.com/granaryio/granary/examples/cluster/counter"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/pgtest"
	"github.com/granaryio/granary/internal/proctest"
	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
	"github.com/granaryio/granary/silo/storage/pgstore"
	"google.golang.org/protobuf/proto"
)

const (
	// driveCounters is how many counters the driving child calls.
	driveCounters = 20
	// driveRecoveryTimeout bounds the wait, from the SIGKILL, for a drive
	// line in which every call succeeded: the recovery itself
	// (recoveryTimeout), then a whole report interval without a failure,
	// whose line a call in flight may hold up by driveCallTimeout.
	driveRecoveryTimeout = recoveryTimeout + 2*(driveReportInterval+driveCallTimeout)
	// settleLines is how many more drive lines the test reads after the
	// driver's calls all succeed again.
	settleLines = 2
	// driveLineTimeout bounds the wait for the next drive line of a
	// driver that runs: a report interval, plus a call in flight, plus
	// slack.
	driveLineTimeout = 3 * (driveReportInterval + driveCallTimeout)
)

// driveLine is a parsed drive line.
type driveLine struct {
	text             string
	ok, failed, lost int
	silos            map[string]int // successful calls by answering member ID
}

// parseDrive parses a drive line, leaving out its quoted error, which may
// hold anything.
func parseDrive(line string) (driveLine, error) {
	d := driveLine{text: line, silos: map[string]int{}}
	head, _, _ := strings.Cut(line, " err=")
	f := proctest.Fields(head)
	for _, field := range []struct {
		key string
		n   *int
	}{{"ok", &d.ok}, {"failed", &d.failed}, {"lost", &d.lost}} {
		n, err := strconv.Atoi(f[field.key])
		if err != nil {
			return driveLine{}, fmt.Errorf("drive line %q: %s: %v", line, field.key, err)
		}
		*field.n = n
	}
	if f["silos"] == "" {
		return d, nil
	}
	for part := range strings.SplitSeq(f["silos"], ",") {
		i := strings.LastIndexByte(part, ':')
		n, err := strconv.Atoi(part[i+1:])
		if i <= 0 || err != nil {
			return driveLine{}, fmt.Errorf("drive line %q: silos: %q is not <member ID>:<calls>", line, part)
		}
		d.silos[part[:i]] = n
	}
	return d, nil
}

// waitDrive waits, within ctx, for the first drive line of c from index
// skip on that until accepts, and returns it and its index.
func waitDrive(ctx context.Context, c *child, skip int, until func(driveLine) bool) (driveLine, int, error) {
	last := "none"
	for {
		line, i, err := c.Out.WaitLine(ctx, c.Done, "drive ", skip)
		if err != nil {
			return driveLine{}, 0, fmt.Errorf("silo %s: %w (the last drive line: %s)", c.Name, err, last)
		}
		d, err := parseDrive(line)
		if err != nil {
			return driveLine{}, 0, fmt.Errorf("silo %s: %w", c.Name, err)
		}
		if until(d) {
			return d, i, nil
		}
		last, skip = strconv.Quote(line), i+1
	}
}

// busiestOther is the member ID, other than self, that answered the most
// calls of d; "" when only self answered.
func busiestOther(d driveLine, self string) string {
	busiest := ""
	for _, m := range slices.Sorted(maps.Keys(d.silos)) {
		if m != self && d.silos[m] > 0 && (busiest == "" || d.silos[m] > d.silos[busiest]) {
			busiest = m
		}
	}
	return busiest
}

// TestClusterCountersSurviveKillPostgres runs a cluster of three silo
// processes whose counts are persistent state in PostgreSQL, one of them
// driving counters, and kills another with SIGKILL once the driver has
// seen counters answer from it. The driver's calls must all succeed again,
// answered by the survivors, and no count may go back: its drive lines
// say lost=0. The survivors then stop with SIGTERM, and the store holds
// at least every acknowledged Add.
func TestClusterCountersSurviveKillPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program and runs a cluster of processes: skipped with -short")
	}
	if runtime.GOOS == "windows" {
		t.Skip("stops processes with SIGTERM")
	}
	dsn := pgtest.DSN(t)
	service := pgtest.ServiceID(t) // the counts of no other run
	bin := buildSilo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*defaultTestTimeout)
	defer cancel()

	// The last silo to start drives: by then the others have joined, or
	// are joining, so its counters spread over all three.
	clusterID := proctest.ClusterID("cluster-test")
	readyCtx, readyCancel := context.WithTimeout(ctx, defaultTestTimeout)
	defer readyCancel()
	const driverIndex = clusterSilos - 1
	children, byMember := startCluster(t, readyCtx, bin, clusterID, func(i int) []string {
		args := []string{"-postgres", dsn, "-service", service}
		if i == driverIndex {
			args = append(args, "-drive", strconv.Itoa(driveCounters))
		}
		return args
	})
	drv := children[driverIndex]

	// The victim is the other silo that answered the driver most in the
	// first drive line that names one.
	seenCtx, seenCancel := context.WithTimeout(ctx, defaultTestTimeout)
	defer seenCancel()
	seen, _, err := waitDrive(seenCtx, drv, 0, func(d driveLine) bool { return busiestOther(d, drv.member) != "" })
	if err != nil {
		t.Fatalf("the driver never saw a counter answer from another silo: %v", err)
	}
	victim := busiestOther(seen, drv.member)

	killedAt := time.Now()
	afterKill := len(drv.Out.Lines("", 0)) // the index of the first line printed after the SIGKILL
	if err := byMember[victim].kill(); err != nil {
		t.Fatal(err)
	}
	// Recovered: a whole interval in which every call succeeded, each
	// counter called at least once, none answered by the victim.
	recCtx, recCancel := context.WithTimeout(ctx, driveRecoveryTimeout)
	defer recCancel()
	_, recIndex, err := waitDrive(recCtx, drv, afterKill, func(d driveLine) bool {
		return d.failed == 0 && d.ok >= driveCounters && d.silos[victim] == 0
	})
	if err != nil {
		t.Fatalf("within %v of the SIGKILL of %s, the driver never printed a line in which all its calls succeeded: %v",
			driveRecoveryTimeout, victim, err)
	}
	recoveredAfter := time.Since(killedAt)
	lastIndex := recIndex
	for range settleLines {
		lineCtx, lineCancel := context.WithTimeout(ctx, driveLineTimeout)
		_, lastIndex, err = waitDrive(lineCtx, drv, lastIndex+1, func(driveLine) bool { return true })
		lineCancel()
		if err != nil {
			t.Fatal(err)
		}
	}

	var okAfter, failedAfter int
	var final driveLine
	for i, line := range drv.Out.Lines("drive ", afterKill) {
		d, err := parseDrive(line)
		if err != nil {
			t.Fatal(err)
		}
		okAfter += d.ok
		failedAfter += d.failed
		final = d
		if i == 0 {
			continue // its interval began before the SIGKILL
		}
		for m := range d.silos {
			if m == victim || byMember[m] == nil {
				t.Errorf("after the SIGKILL of %s, calls were answered by %s, which is not a survivor: %q", victim, m, line)
			}
		}
	}
	t.Logf("SIGKILL of %s, which answered %d of the driver's calls in %q: the driver printed a line with every call ok %v after; since the SIGKILL %d calls succeeded and %d failed",
		victim, seen.silos[victim], seen.text, recoveredAfter.Round(time.Millisecond), okAfter, failedAfter)
	if final.lost != 0 {
		t.Errorf("the driver saw %d replies with a count that went back, an acknowledged Add forgotten: %q", final.lost, final.text)
	}
	for _, line := range drv.Out.Lines("drive ", recIndex+1) {
		if d, _ := parseDrive(line); d.failed != 0 || d.ok == 0 {
			t.Errorf("after the driver's calls had all succeeded again: %q, want calls ok and none failed", line)
		}
	}

	// The survivors stop gracefully and exit 0.
	stopCtx, stopCancel := context.WithTimeout(ctx, exitTimeout)
	defer stopCancel()
	if err := terminateSurvivors(stopCtx, children, victim); err != nil {
		t.Error(err)
	}

	// The counts started from zero, with the driver their only caller: no
	// count was above the Adds it sent, which would have been an Add
	// counted twice.
	logs, err := os.ReadFile(drv.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(logs)) {
		if strings.Contains(l, "above the Adds this driver sent") {
			t.Errorf("the driver logged a count above the Adds it sent: %s", strings.TrimSpace(l))
		}
	}

	// Every Add a drive line counted as ok is in the store, under the
	// test's service ID.
	var acked int
	for _, line := range drv.Out.Lines("drive ", 0) {
		d, err := parseDrive(line)
		if err != nil {
			t.Fatal(err)
		}
		acked += d.ok
	}
	storeCtx, storeCancel := context.WithTimeout(ctx, defaultTestTimeout)
	defer storeCancel()
	store, err := pgstore.Open(storeCtx, pgstore.Config{DSN: dsn, ServiceID: service})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var stored int64
	for i := range driveCounters {
		key := fmt.Sprintf("counter-%d", i)
		rec, err := store.ReadState(storeCtx, grain.NewID(clusterpb.CounterGrainType, key), counter.State.StateName())
		if err != nil {
			t.Fatalf("reading the count of %s: %v", key, err)
		}
		var st clusterpb.CounterState
		if err := proto.Unmarshal(rec.Data, &st); err != nil || !rec.Exists {
			t.Fatalf("the stored count of %s: %+v, %v; want a CounterState", key, rec, err)
		}
		stored += st.GetValue()
	}
	t.Logf("the store holds a total count of %d; the drive lines counted %d Adds ok", stored, acked)
	if stored < int64(acked) {
		t.Errorf("the store holds a total count of %d, below the %d Adds the drive lines counted ok", stored, acked)
	}
}
