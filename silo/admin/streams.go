package admin

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/granaryio/granary/grain/streams"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
)

// Limits of the streams in the reports' summaries (adminapi.StreamsSummary).
// The stream list (adminapi.PathStreams) is bounded by its query instead.
const (
	// StreamSummaryLimit is how many streams a silo's summary lists.
	StreamSummaryLimit = 10
	// ClusterStreamSummaryLimit bounds the merged list of the cluster
	// report's summary.
	ClusterStreamSummaryLimit = 20
	// SummarySubscriptionLimit is how many subscriptions of each stream
	// a summary lists.
	SummarySubscriptionLimit = 10
)

// streamsQuery reads the query of a stream list: prefix, parked and
// limit, each at most once. Otherwise it answers 400 and returns false.
func streamsQuery(w http.ResponseWriter, r *http.Request) (adminapi.StreamsQuery, bool) {
	var q adminapi.StreamsQuery
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, codes.InvalidArgument, "malformed query %q: %v", r.URL.RawQuery, err)
		return q, false
	}
	for name, vs := range vals {
		if len(vs) > 1 {
			writeError(w, http.StatusBadRequest, codes.InvalidArgument, "query parameter %s given %d times; give it once", name, len(vs))
			return q, false
		}
	}
	q.Prefix = vals.Get("prefix")
	if v := vals.Get("parked"); v != "" {
		if q.Parked, err = strconv.ParseBool(v); err != nil {
			writeError(w, http.StatusBadRequest, codes.InvalidArgument, "parked=%q: want true or false", v)
			return q, false
		}
	}
	q.Limit = adminapi.DefaultStreamLimit
	if v := vals.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > adminapi.MaxStreamLimit {
			writeError(w, http.StatusBadRequest, codes.InvalidArgument, "limit=%q: want a number from 1 to %d", v, adminapi.MaxStreamLimit)
			return q, false
		}
		q.Limit = n
	}
	return q, true
}

// handleSiloStreams lists the streams active on this silo.
func (s *Server) handleSiloStreams(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	a := s.attached(w)
	if a == nil {
		return
	}
	q, ok := streamsQuery(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, siloStreams(a, q))
}

// handleStreams lists the streams active in the cluster: this silo's and
// every other live member's, asked at once, each within PeerTimeout.
func (s *Server) handleStreams(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	a := s.attached(w)
	if a == nil {
		return
	}
	q, ok := streamsQuery(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, s.clusterStreams(r.Context(), a, q, callerOf(r).token))
}

// siloStreams lists the streams active on this silo that q picks.
func siloStreams(a *attachment, q adminapi.StreamsQuery) adminapi.StreamsReport {
	self := selfName(a.sl.Info())
	picked := slices.DeleteFunc(a.sl.Streams(), func(st silo.StreamStatus) bool {
		return !strings.HasPrefix(st.ID.String(), q.Prefix) || q.Parked && st.Parked() == 0
	})
	out := adminapi.StreamsReport{Asked: self, Total: len(picked), Streams: []adminapi.StreamReport{}}
	for _, st := range mostInNeed(picked, q.Limit) {
		out.Streams = append(out.Streams, streamReport(st, self, len(st.Subscriptions)))
	}
	return out
}

// clusterStreams gathers the streams q picks from every live member,
// sending token ("" for none) to the others.
func (s *Server) clusterStreams(ctx context.Context, a *attachment, q adminapi.StreamsQuery, token string) adminapi.StreamsReport {
	info := a.sl.Info()
	others := otherMembers(info, a.sl.Members())
	out := siloStreams(a, q)

	reports := make([]adminapi.StreamsReport, len(others))
	failures := make([]error, len(others))
	var wg sync.WaitGroup
	for i, m := range others {
		wg.Go(func() {
			failures[i] = s.forward(ctx, m, token, func(ctx context.Context, c *adminapi.Client) (err error) {
				reports[i], err = c.SiloStreams(ctx, q)
				return err
			})
		})
	}
	wg.Wait()
	for i, m := range others {
		if err := failures[i]; err != nil {
			s.log.Debug("a silo's admin server did not list its streams", zap.String("member", m.ID), zap.String("admin", m.AdminAddr), zap.Error(err))
			out.Unreachable = append(out.Unreachable, adminapi.Unreachable{Member: m.ID, Admin: m.AdminAddr, Error: err.Error()})
			continue
		}
		out.Total += reports[i].Total
		out.Streams = append(out.Streams, reports[i].Streams...)
	}
	sortStreamReports(out.Streams)
	if len(out.Streams) > q.Limit {
		out.Streams = out.Streams[:q.Limit]
	}
	return out
}

// handleUnpark unparks a subscription of a stream, through the stream's
// grain wherever it is active.
func (s *Server) handleUnpark(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	a := s.attached(w)
	if a == nil {
		return
	}
	name, ok := queryParam(w, r, "stream", "PROVIDER/NAMESPACE/KEY")
	if !ok {
		return
	}
	if _, err := streams.ParseID(name); err != nil {
		writeError(w, http.StatusBadRequest, codes.InvalidArgument, "stream=%q: %v", name, err)
		return
	}
	sub, ok := queryParam(w, r, "subscription", "ID")
	if !ok || !ready(w, a) {
		return
	}
	got, err := a.sl.UnparkStream(r.Context(), name, sub)
	if err != nil {
		writeSiloError(w, "unparking subscription "+sub+" of stream "+name, err)
		return
	}
	s.log.Info("stream subscription unparked by an admin request",
		append(callerOf(r).logFields(), zap.String("stream", name), zap.String("subscription", sub), zap.String("grain", got.Grain))...)
	writeJSON(w, http.StatusOK, adminapi.Unparked{Stream: name, Subscription: got.ID, Grain: got.Grain, Handler: got.Handler, Implicit: got.Implicit})
}

// streamsSummary sums up the streams active on this silo: nil for a silo
// that runs none.
func streamsSummary(a *attachment, self string) *adminapi.StreamsSummary {
	st, ok := a.sl.StreamStats()
	if !ok {
		return nil
	}
	rates := a.sampler.latest().streams
	active := a.sl.Streams()
	sum := &adminapi.StreamsSummary{
		Active:    len(active),
		Published: st.Published, Delivered: st.Delivered, Dropped: st.Dropped, Retried: st.Retried,
		PublishRate: rates.published, DeliveryRate: rates.delivered, DropRate: rates.dropped,
		Top: []adminapi.StreamReport{},
	}
	for _, s := range active {
		sum.Subscriptions += len(s.Subscriptions)
		sum.Parked += s.Parked()
		sum.Lag += s.Lag()
	}
	for _, s := range mostInNeed(active, StreamSummaryLimit) {
		sum.Top = append(sum.Top, streamReport(s, self, SummarySubscriptionLimit))
	}
	return sum
}

// mergeStreams adds a silo's stream summary into the cluster's, *into
// (made at the first).
func mergeStreams(into **adminapi.StreamsSummary, s *adminapi.StreamsSummary) {
	if s == nil {
		return
	}
	if *into == nil {
		*into = &adminapi.StreamsSummary{Top: []adminapi.StreamReport{}}
	}
	c := *into
	c.Active += s.Active
	c.Subscriptions += s.Subscriptions
	c.Parked += s.Parked
	c.Lag += s.Lag
	c.Published += s.Published
	c.Delivered += s.Delivered
	c.Dropped += s.Dropped
	c.Retried += s.Retried
	c.PublishRate += s.PublishRate
	c.DeliveryRate += s.DeliveryRate
	c.DropRate += s.DropRate
	c.Top = append(c.Top, s.Top...)
	sortStreamReports(c.Top)
	if len(c.Top) > ClusterStreamSummaryLimit {
		c.Top = c.Top[:ClusterStreamSummaryLimit]
	}
}

// mostInNeed returns the n streams of active that most need an operator,
// in that order: those with parked subscriptions, the most first, then
// those with the most events waiting, then by name.
func mostInNeed(active []silo.StreamStatus, n int) []silo.StreamStatus {
	type keyed struct {
		parked, lag int
		st          silo.StreamStatus
	}
	ks := make([]keyed, len(active))
	for i, st := range active {
		ks[i] = keyed{st.Parked(), st.Lag(), st}
	}
	slices.SortFunc(ks, func(x, y keyed) int {
		return cmp.Or(cmp.Compare(y.parked, x.parked), cmp.Compare(y.lag, x.lag), cmp.Compare(x.st.ID.String(), y.st.ID.String()))
	})
	out := make([]silo.StreamStatus, 0, min(n, len(ks)))
	for _, k := range ks[:min(n, len(ks))] {
		out = append(out, k.st)
	}
	return out
}

// sortStreamReports sorts reports as mostInNeed does, and then by silo.
func sortStreamReports(rs []adminapi.StreamReport) {
	slices.SortStableFunc(rs, func(x, y adminapi.StreamReport) int {
		return cmp.Or(cmp.Compare(y.Parked, x.Parked), cmp.Compare(y.Lag, x.Lag), cmp.Compare(x.Stream, y.Stream), cmp.Compare(x.Silo, y.Silo))
	})
}

// streamReport reports st, active on the silo named self, with at most
// maxSubs of its subscriptions: parked ones first, then those with the
// most events waiting, else in the stream's order.
func streamReport(st silo.StreamStatus, self string, maxSubs int) adminapi.StreamReport {
	r := adminapi.StreamReport{
		Stream: st.ID.String(), Silo: self, Type: st.Type, Last: token(st.Last),
		Lag: st.Lag(), Parked: st.Parked(), SubscriptionCount: len(st.Subscriptions),
		Subscriptions: []adminapi.SubscriptionReport{},
	}
	subs := slices.Clone(st.Subscriptions)
	slices.SortStableFunc(subs, func(x, y silo.SubscriptionStatus) int {
		return cmp.Or(-compareBool(x.Parked, y.Parked), cmp.Compare(y.Lag, x.Lag))
	})
	for _, sub := range subs[:min(maxSubs, len(subs))] {
		sr := adminapi.SubscriptionReport{
			ID: sub.ID, Grain: sub.Grain, Handler: sub.Handler, Implicit: sub.Implicit,
			Lag: sub.Lag, Handled: token(sub.Handled), Parked: sub.Parked, ParkedReason: sub.ParkedReason,
		}
		if sub.Parked && !sub.ParkedAt.IsZero() {
			at := sub.ParkedAt.UTC()
			sr.ParkedAt = &at
		}
		r.Subscriptions = append(r.Subscriptions, sr)
	}
	return r
}

// compareBool orders false before true.
func compareBool(x, y bool) int {
	switch {
	case x == y:
		return 0
	case x:
		return 1
	}
	return -1
}

// token writes a stream token as the API does: "EPOCH.SEQUENCE", or ""
// for the zero token.
func token(t streams.Token) string {
	if t.IsZero() {
		return ""
	}
	return t.String()
}
