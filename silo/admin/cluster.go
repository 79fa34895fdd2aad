package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/granaryio/granary/silo/membership"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
)

// otherMembers returns the live members other than this silo. A silo
// alone has none.
func otherMembers(info silo.Info, members []membership.Member) []membership.Member {
	if info.Member == "" {
		return nil
	}
	out := make([]membership.Member, 0, len(members))
	for _, m := range members {
		if m.ID != info.Member {
			out = append(out, m)
		}
	}
	return out
}

// memberName returns the name of the member whose ID is id, or "".
func memberName(members []membership.Member, id string) string {
	for _, m := range members {
		if m.ID == id {
			return m.Name
		}
	}
	return ""
}

// clusterReport gathers this silo's report and every other live member's,
// asking them all at once, each within PeerTimeout, with the caller's
// token ("" for none).
func (s *Server) clusterReport(ctx context.Context, a *attachment, token string) adminapi.ClusterReport {
	info := a.sl.Info()
	others := otherMembers(info, a.sl.Members())
	own := s.siloReport(a)

	reports := make([]adminapi.SiloReport, len(others))
	failures := make([]error, len(others))
	var wg sync.WaitGroup
	for i, m := range others {
		wg.Go(func() { reports[i], failures[i] = s.askPeer(ctx, m, token) })
	}
	wg.Wait()

	out := adminapi.ClusterReport{
		Asked:  selfName(info),
		Silos:  []adminapi.SiloReport{own},
		Types:  []adminapi.TypeReport{},
		Hot:    []adminapi.HotGrain{},
		Errors: []adminapi.CallError{},
	}
	for i, m := range others {
		if err := failures[i]; err != nil {
			s.log.Debug("a silo's admin server did not answer", zap.String("member", m.ID), zap.String("admin", m.AdminAddr), zap.Error(err))
			out.Unreachable = append(out.Unreachable, adminapi.Unreachable{Member: m.ID, Admin: m.AdminAddr, Error: err.Error()})
			continue
		}
		out.Silos = append(out.Silos, reports[i])
	}
	slices.SortFunc(out.Silos, func(x, y adminapi.SiloReport) int {
		return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.Member, y.Member))
	})
	mergeReports(&out)
	return out
}

// askPeer fetches the report of member m from its admin server, sending
// token.
func (s *Server) askPeer(ctx context.Context, m membership.Member, token string) (r adminapi.SiloReport, err error) {
	err = s.forward(ctx, m, token, func(ctx context.Context, c *adminapi.Client) (err error) {
		r, err = c.Silo(ctx)
		return err
	})
	return r, err
}

// mergeReports fills in the cluster-wide lists of out from its silos':
// types summed, hot grains the busiest first, errors the newest first.
func mergeReports(out *adminapi.ClusterReport) {
	types := map[string]*adminapi.TypeReport{}
	for _, sr := range out.Silos {
		for _, t := range sr.Types {
			sum, ok := types[t.Type]
			if !ok {
				sum = &adminapi.TypeReport{Type: t.Type}
				types[t.Type] = sum
			}
			sum.Activations += t.Activations
			sum.Calls += t.Calls
			sum.Errors += t.Errors
			sum.CallRate += t.CallRate
			sum.ErrorRate += t.ErrorRate
		}
		out.Hot = append(out.Hot, sr.Hot...)
		out.Errors = append(out.Errors, sr.Errors...)
		mergeStreams(&out.Streams, sr.Streams)
	}
	for _, t := range types {
		out.Types = append(out.Types, *t)
	}
	slices.SortFunc(out.Types, func(x, y adminapi.TypeReport) int { return cmp.Compare(x.Type, y.Type) })
	slices.SortStableFunc(out.Hot, func(x, y adminapi.HotGrain) int {
		return cmp.Or(cmp.Compare(y.CallRate, x.CallRate), cmp.Compare(x.Grain, y.Grain))
	})
	if len(out.Hot) > ClusterHotLimit {
		out.Hot = out.Hot[:ClusterHotLimit]
	}
	slices.SortStableFunc(out.Errors, func(x, y adminapi.CallError) int { return y.Time.Compare(x.Time) })
	if len(out.Errors) > ClusterErrorLimit {
		out.Errors = out.Errors[:ClusterErrorLimit]
	}
}

// handleEvents streams the cluster report as server-sent events: one at
// once, then one every EventInterval, until the client goes away, the
// server stops, or the caller's credentials are no longer an admin's (a
// token removed from the token file ends the stream at the next event).
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	a := s.attached(w)
	if a == nil {
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, codes.Internal, "this connection cannot stream events")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // proxies must pass each event on at once
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	// The browser reconnects after this long when the stream breaks.
	fmt.Fprintf(w, "retry: %d\n\n", EventInterval.Milliseconds())

	tk := s.clock.NewTicker(EventInterval)
	defer tk.Stop()
	ctx := r.Context()
	token := callerOf(r).token
	for first := true; ; first = false {
		if !first && !s.stillAdmin(r) {
			s.cfg.Rejections.Reject(security.ListenerAdmin, security.ReasonUnauthenticated, r.RemoteAddr,
				errors.New("an event stream's credentials are no longer an admin's: stream ended"))
			return
		}
		body, err := json.Marshal(s.clusterReport(ctx, a, token))
		if err != nil {
			s.log.Error("encoding the cluster report", zap.Error(err))
			return
		}
		// Compact JSON has no newline, so it fits one data line.
		if _, err := fmt.Fprintf(w, "data: %s\n\n", body); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-ctx.Done():
			return
		case <-s.stopc:
			return
		case <-tk.Chan():
		}
	}
}
