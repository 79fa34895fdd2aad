package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/spf13/cobra"
)

// runE adapts a subcommand's body: whatever error it returns once its
// arguments were accepted (the API's, or writing the output) is a failure,
// not a usage error.
func runE(body func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := body(cmd, args)
		var f *failure
		if err != nil && !errors.As(err, &f) {
			return &failure{err}
		}
		return err
	}
}

// grainArg accepts exactly one argument of the form TYPE/KEY.
func grainArg(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%s takes one argument, TYPE/KEY; got %d", cmd.Name(), len(args))
	}
	if _, err := grain.ParseID(args[0]); err != nil {
		return fmt.Errorf("%s: want TYPE/KEY: %w", cmd.Name(), err)
	}
	return nil
}

// noArgs refuses arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) != 0 {
		return fmt.Errorf("%s takes no arguments; got %q", cmd.Name(), args)
	}
	return nil
}

// ask runs one request of the admin API through o.call and returns its
// answer.
func ask[T any](o *options, cmd *cobra.Command, request func(context.Context, *adminapi.Client) (T, error)) (answer T, err error) {
	err = o.call(cmd, func(ctx context.Context, c *adminapi.Client) (err error) {
		answer, err = request(ctx, c)
		return err
	})
	return answer, err
}

// respond asks the admin API once and prints its answer: as JSON with
// -o json, else through text.
func respond[T any](o *options, cmd *cobra.Command, request func(context.Context, *adminapi.Client) (T, error), text func(io.Writer, T) error) error {
	answer, err := ask(o, cmd, request)
	switch {
	case err != nil:
		return err
	case o.output == outputJSON:
		return printJSON(cmd, answer)
	}
	return text(cmd.OutOrStdout(), answer)
}

// askCluster asks for the cluster report.
func askCluster(ctx context.Context, c *adminapi.Client) (adminapi.ClusterReport, error) {
	return c.Cluster(ctx)
}

func newStatusCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Summarise the cluster: silos by status, activations, call and error rates",
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			return respond(o, cmd, askCluster, func(out io.Writer, r adminapi.ClusterReport) error {
				return printStatus(out, o.admin, r)
			})
		}),
	}
}

func newSilosCmd(o *options) *cobra.Command {
	return newClusterListCmd(o, "silos", "List the cluster's silos with their status, load and addresses",
		func(r adminapi.ClusterReport) any { return nonNil(r.Silos) }, printSilos)
}

func newGrainsCmd(o *options) *cobra.Command {
	return newClusterListCmd(o, "grains", "List grain types with their activations, calls and errors over the cluster",
		func(r adminapi.ClusterReport) any { return nonNil(r.Types) },
		func(out io.Writer, r adminapi.ClusterReport) error { return printGrains(out, r.Types) })
}

// newClusterListCmd makes a command that lists a part of the cluster
// report: list picks what -o json prints, and text prints the table. The
// members that did not answer are named on standard error.
func newClusterListCmd(o *options, use, short string, list func(adminapi.ClusterReport) any, text func(io.Writer, adminapi.ClusterReport) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			r, err := ask(o, cmd, askCluster)
			if err != nil {
				return err
			}
			warnUnreachable(cmd.ErrOrStderr(), r.Unreachable)
			if o.output == outputJSON {
				return printJSON(cmd, list(r))
			}
			return text(cmd.OutOrStdout(), r)
		}),
	}
}

func newLookupCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "lookup TYPE/KEY",
		Short: "Say which silo a grain is active on",
		Args:  grainArg,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return respond(o, cmd, func(ctx context.Context, c *adminapi.Client) (adminapi.Location, error) {
				return c.Lookup(ctx, args[0])
			}, func(out io.Writer, loc adminapi.Location) (err error) {
				if !loc.Active {
					_, err = fmt.Fprintf(out, "%s is not active\n", args[0])
				} else {
					_, err = fmt.Fprintf(out, "%s is active on %s\n", args[0], siloName(loc.Name, loc.Member))
				}
				return err
			})
		}),
	}
}

func newDeactivateCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "deactivate TYPE/KEY",
		Short: "Deactivate a grain wherever it is active",
		Long: `deactivate asks the silo that holds the grain's activation to deactivate
it once its running requests have finished. The next call activates the
grain again, possibly elsewhere.`,
		Args: grainArg,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return respond(o, cmd, func(ctx context.Context, c *adminapi.Client) (adminapi.Deactivation, error) {
				return c.Deactivate(ctx, args[0])
			}, func(out io.Writer, d adminapi.Deactivation) (err error) {
				switch {
				case !d.Deactivated:
					_, err = fmt.Fprintf(out, "%s was not active\n", args[0])
				case d.Member == "":
					_, err = fmt.Fprintf(out, "deactivated %s\n", args[0])
				default:
					_, err = fmt.Fprintf(out, "deactivated %s on %s\n", args[0], d.Member)
				}
				return err
			})
		}),
	}
}

func newDrainCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "drain SILO",
		Short: "Ask a silo (by name or member ID) to hand its grains over and leave",
		Long: `drain asks the silo named SILO, by its name or its member ID, to stop
taking new activations, hand its grains over to the other members and
leave the cluster. It returns once the silo has accepted; the silo then
leaves on its own.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
				return fmt.Errorf("drain takes one argument, the silo's name or member ID")
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return respond(o, cmd, func(ctx context.Context, c *adminapi.Client) (adminapi.DrainReply, error) {
				return c.Drain(ctx, args[0])
			}, func(out io.Writer, r adminapi.DrainReply) error {
				_, err := fmt.Fprintf(out, "%s is draining: it hands its grains over and leaves the cluster\n", siloName(r.Name, r.Member))
				return err
			})
		}),
	}
}

// statusOrder is the order in which status lists silo states; others
// follow in alphabetical order.
var statusOrder = []string{"active", "joining", "shutting-down", "stopped"}

// printStatus writes the cluster summary of r, gathered through admin.
func printStatus(out io.Writer, admin string, r adminapi.ClusterReport) error {
	counts := map[string]int{}
	activations := 0
	for _, s := range r.Silos {
		counts[s.Status]++
		activations += s.Activations
	}
	var calls, errs float64
	for _, t := range r.Types {
		calls += t.CallRate
		errs += t.ErrorRate
	}
	var states []string
	for _, st := range statusOrder {
		if n := counts[st]; n > 0 {
			states = append(states, fmt.Sprintf("%d %s", n, st))
			delete(counts, st)
		}
	}
	var others []string
	for st := range counts {
		others = append(others, st)
	}
	sort.Strings(others)
	for _, st := range others {
		name := st
		if name == "" {
			name = "unknown"
		}
		states = append(states, fmt.Sprintf("%d %s", counts[st], name))
	}
	silos := strconv.Itoa(len(r.Silos))
	if len(states) > 0 {
		silos += " (" + strings.Join(states, ", ") + ")"
	}

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	asked := admin
	if r.Asked != "" {
		asked += " (" + r.Asked + ")"
	}
	fmt.Fprintf(tw, "asked:\t%s\n", asked)
	fmt.Fprintf(tw, "silos:\t%s\n", silos)
	fmt.Fprintf(tw, "activations:\t%d\n", activations)
	fmt.Fprintf(tw, "calls/s:\t%s\n", rate(calls))
	fmt.Fprintf(tw, "errors/s:\t%s\n", rate(errs))
	var shedding []string
	for _, s := range r.Silos {
		if s.Overload.Shedding {
			shedding = append(shedding, siloName(s.Name, s.Member))
		}
	}
	if len(shedding) == 0 {
		shedding = []string{"none"}
	}
	fmt.Fprintf(tw, "shedding:\t%s\n", strings.Join(shedding, ", "))
	var limited []string
	for _, s := range r.Silos {
		if n := s.Overload.ConcurrencyLimit; n > 0 {
			limited = append(limited, fmt.Sprintf("%s to %d new requests at once", siloName(s.Name, s.Member), n))
		}
	}
	if len(limited) > 0 {
		fmt.Fprintf(tw, "limited:\t%s\n", strings.Join(limited, ", "))
	}
	if st := r.Streams; st != nil {
		fmt.Fprintf(tw, "streams:\t%d active, %d subscriptions, %d parked, %d events waiting, %s published/s\n",
			st.Active, st.Subscriptions, st.Parked, st.Lag, rate(st.PublishRate))
	}
	if len(r.Unreachable) == 0 {
		fmt.Fprintf(tw, "unreachable:\tnone\n")
	}
	for i, u := range r.Unreachable {
		key := ""
		if i == 0 {
			key = "unreachable:"
		}
		fmt.Fprintf(tw, "%s\t%s\n", key, describeUnreachable(u))
	}
	return tw.Flush()
}

// printSilos writes a table of r's silos, then a row for each member that
// did not answer.
func printSilos(out io.Writer, r adminapi.ClusterReport) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMEMBER\tSTATUS\tACTIVATIONS\tQUEUED\tUPTIME\tGATEWAY\tADMIN")
	for _, s := range r.Silos {
		status := dash(s.Status)
		if s.Overload.Shedding {
			// One word, as kubectl shows a cordoned node's
			// Ready,SchedulingDisabled, so the column stays one field.
			status += ",shedding"
		}
		if s.Overload.ConcurrencyLimit > 0 {
			status += ",limited" // to keep its new requests' latency under its limit
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n",
			dash(s.Name), dash(s.Member), status, s.Activations, s.QueuedTurns,
			uptime(s.UptimeSeconds), dash(s.Addresses.Gateway), dash(s.Addresses.Admin))
	}
	for _, u := range r.Unreachable {
		fmt.Fprintf(tw, "-\t%s\tunreachable\t-\t-\t-\t-\t%s\n", dash(u.Member), dash(u.Admin))
	}
	return tw.Flush()
}

// printGrains writes a table of the cluster's grain types.
func printGrains(out io.Writer, types []adminapi.TypeReport) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tACTIVATIONS\tCALLS\tCALLS/S\tERRORS\tERRORS/S")
	for _, t := range types {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\n",
			t.Type, t.Activations, t.Calls, rate(t.CallRate), t.Errors, rate(t.ErrorRate))
	}
	return tw.Flush()
}

// warnUnreachable tells the user on w which members left no report, so
// that tables and totals leave them out.
func warnUnreachable(w io.Writer, us []adminapi.Unreachable) {
	for _, u := range us {
		fmt.Fprintf(w, "granaryctl: warning: no report from %s\n", describeUnreachable(u))
	}
}

// describeUnreachable says which member did not answer, where, and why.
func describeUnreachable(u adminapi.Unreachable) string {
	s := dash(u.Member)
	if u.Admin != "" {
		s += " at " + u.Admin
	}
	return s + ": " + u.Error
}

// siloName names a silo by its name and member ID, whichever are known.
func siloName(name, member string) string {
	switch {
	case name != "" && member != "" && name != member:
		return name + " (" + member + ")"
	case member != "":
		return member
	case name != "":
		return name
	default:
		return "an unnamed silo"
	}
}

// rate formats a per-second rate.
func rate(r float64) string { return strconv.FormatFloat(r, 'f', 2, 64) }

// dash stands in for an empty table cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// uptime formats a number of seconds in the two largest units that
// matter: 45s, 12m30s, 5h03m, 3d04h.
func uptime(seconds float64) string {
	if seconds < 0 {
		return "-"
	}
	d := time.Duration(seconds * float64(time.Second)).Truncate(time.Second)
	days := int(d / (24 * time.Hour))
	hours := int(d/time.Hour) % 24
	minutes := int(d/time.Minute) % 60
	secs := int(d/time.Second) % 60
	switch {
	case days > 0:
		return fmt.Sprintf("%dd%02dh", days, hours)
	case hours > 0:
		return fmt.Sprintf("%dh%02dm", hours, minutes)
	case minutes > 0:
		return fmt.Sprintf("%dm%02ds", minutes, secs)
	default:
		return fmt.Sprintf("%ds", secs)
	}
}

// nonNil returns s, or an empty slice for nil, so that JSON shows [] rather
// than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
