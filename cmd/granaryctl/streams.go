package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/granaryio/granary/grain/streams"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/spf13/cobra"
)

// streamsFlags are the flags of streams list and streams lag, which pick
// the streams the admin API lists.
type streamsFlags struct {
	prefix string
	parked bool
	limit  int
}

func (f *streamsFlags) add(cmd *cobra.Command) {
	flags := cmd.Flags()
	flags.StringVar(&f.prefix, "prefix", "", "only the streams whose name (PROVIDER/NAMESPACE/KEY) starts with this")
	flags.BoolVar(&f.parked, "parked", false, "only the streams with a parked subscription")
	flags.IntVar(&f.limit, "limit", adminapi.DefaultStreamLimit,
		fmt.Sprintf("list at most this many streams, those that most need an operator first (1 to %d)", adminapi.MaxStreamLimit))
}

// query checks the flags and returns the query they make.
func (f *streamsFlags) query() (adminapi.StreamsQuery, error) {
	if f.limit < 1 || f.limit > adminapi.MaxStreamLimit {
		return adminapi.StreamsQuery{}, fmt.Errorf("--limit %d: want 1 to %d", f.limit, adminapi.MaxStreamLimit)
	}
	return adminapi.StreamsQuery{Prefix: f.prefix, Parked: f.parked, Limit: f.limit}, nil
}

func newStreamsCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "streams",
		Short: "List streams and their subscriptions' lag, and unpark subscriptions",
		Long: `streams shows the streams active in the cluster, gathered from every silo,
those that most need an operator first: streams with parked subscriptions,
then those with the most events waiting for their subscribers.

A subscription is parked when delivering to its subscriber failed past its
provider's retries: it gets no events until it is unparked. A memory
stream drops the events published meanwhile for it; a durable stream keeps
them, and delivers them once it is unparked.`,
		// Without a command it prints its help; an unknown one is a usage
		// error, as at the top level.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newStreamsListCmd(o), newStreamsLagCmd(o), newStreamsUnparkCmd(o))
	return cmd
}

// askStreams asks for the streams q picks, and warns on standard error
// of the members that did not answer and of streams left out by the
// limit.
func askStreams(o *options, cmd *cobra.Command, f *streamsFlags) (adminapi.StreamsReport, error) {
	q, err := f.query()
	if err != nil {
		return adminapi.StreamsReport{}, err // a usage error: no request sent
	}
	r, err := ask(o, cmd, func(ctx context.Context, c *adminapi.Client) (adminapi.StreamsReport, error) {
		return c.Streams(ctx, q)
	})
	if err != nil {
		return r, err // a failure, from call
	}
	warnUnreachable(cmd.ErrOrStderr(), r.Unreachable)
	if r.Total > len(r.Streams) {
		fmt.Fprintf(cmd.ErrOrStderr(), "granaryctl: warning: listing %d of %d streams; narrow with --prefix or --parked, or raise --limit\n", len(r.Streams), r.Total)
	}
	return r, nil
}

func newStreamsListCmd(o *options) *cobra.Command {
	var f streamsFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List active streams: silo, event type, subscriptions, parked ones, events waiting",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := askStreams(o, cmd, &f)
			switch {
			case err != nil:
				return err
			case o.output == outputJSON:
				return asFailure(printJSON(cmd, r))
			}
			return asFailure(printStreams(cmd.OutOrStdout(), r))
		},
	}
	f.add(cmd)
	return cmd
}

func newStreamsLagCmd(o *options) *cobra.Command {
	var f streamsFlags
	var all bool
	cmd := &cobra.Command{
		Use:   "lag",
		Short: "List the subscriptions that are parked or have events waiting",
		Long: `lag lists, one row a subscription, those of the streams listed that are
parked or have events waiting for their subscriber, with how many wait
and, for a parked one, why it was parked; --all lists every subscription.
With -o json it prints the streams' report, every subscription included.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := askStreams(o, cmd, &f)
			switch {
			case err != nil:
				return err
			case o.output == outputJSON:
				return asFailure(printJSON(cmd, r))
			}
			return asFailure(printLag(cmd.OutOrStdout(), r, all))
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "list every subscription, those caught up too")
	return cmd
}

func newStreamsUnparkCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "unpark STREAM SUBSCRIPTION",
		Short: "Resume delivery to a parked subscription",
		Long: `unpark resumes delivery to the subscription SUBSCRIPTION (its ID, as
streams lag shows it) of the stream STREAM (PROVIDER/NAMESPACE/KEY),
wherever the stream is active. A memory stream's subscriber gets the
events published from then on (those published while it was parked were
dropped); a durable stream's resumes from its cursor. Unparking a
subscription that is not parked changes nothing.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return fmt.Errorf("unpark takes two arguments, PROVIDER/NAMESPACE/KEY and the subscription's ID; got %d", len(args))
			}
			if _, err := streams.ParseID(args[0]); err != nil {
				return fmt.Errorf("unpark: %w", err)
			}
			if strings.TrimSpace(args[1]) == "" {
				return fmt.Errorf("unpark: empty subscription ID")
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return respond(o, cmd, func(ctx context.Context, c *adminapi.Client) (adminapi.Unparked, error) {
				return c.Unpark(ctx, args[0], args[1])
			}, func(out io.Writer, u adminapi.Unparked) error {
				_, err := fmt.Fprintf(out, "unparked subscription %s of %s: %s gets its events again through handler %s\n",
					u.Subscription, u.Stream, u.Grain, u.Handler)
				return err
			})
		}),
	}
}

// asFailure makes err, from writing the output, a failure rather than a
// usage error.
func asFailure(err error) error {
	if err != nil {
		return &failure{err}
	}
	return nil
}

// printStreams writes a table of r's streams, one row each.
func printStreams(out io.Writer, r adminapi.StreamsReport) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tSILO\tTYPE\tSUBSCRIPTIONS\tPARKED\tLAG")
	for _, s := range r.Streams {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", s.Stream, dash(s.Silo), dash(s.Type), s.SubscriptionCount, s.Parked, s.Lag)
	}
	return tw.Flush()
}

// printLag writes a table of the subscriptions of r's streams that are
// parked or behind (all: every one), in the report's order, or says that
// none is.
func printLag(out io.Writer, r adminapi.StreamsReport, all bool) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	subs, rows := 0, 0
	for _, s := range r.Streams {
		for _, sub := range s.Subscriptions {
			subs++
			if !all && !sub.Parked && sub.Lag == 0 {
				continue
			}
			if rows == 0 {
				fmt.Fprintln(tw, "STREAM\tSUBSCRIPTION\tGRAIN\tHANDLER\tLAG\tSTATUS\tREASON")
			}
			rows++
			status, reason := "caught-up", "-"
			switch {
			case sub.Parked:
				status, reason = "parked", dash(oneLine(sub.ParkedReason))
				if sub.ParkedAt != nil {
					status += " since " + sub.ParkedAt.UTC().Format("2006-01-02T15:04:05Z")
				}
			case sub.Lag > 0:
				status = "delivering"
			}
			handler := sub.Handler
			if sub.Implicit {
				handler += " (implicit)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.Stream, sub.ID, sub.Grain, handler, sub.Lag, status, reason)
		}
	}
	if rows == 0 {
		_, err := fmt.Fprintf(out, "no subscription is parked or behind: the %s of the %s listed are caught up\n",
			plural(subs, "subscription"), plural(len(r.Streams), "stream"))
		return err
	}
	return tw.Flush()
}

// plural counts n things: "1 stream", "2 streams".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// oneLine keeps a table cell on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
