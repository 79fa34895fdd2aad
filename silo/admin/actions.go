package admin

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/granaryio/granary/silo/membership"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
)

// grainParam reads the grain query parameter as TYPE/KEY of a type that
// this silo or another member hosts, or answers 400 or 404 and returns
// false.
func grainParam(w http.ResponseWriter, r *http.Request, a *attachment) (grain.ID, bool) {
	raw, ok := queryParam(w, r, "grain", "TYPE/KEY")
	if !ok {
		return grain.ID{}, false
	}
	id, err := grain.ParseID(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, codes.InvalidArgument, "grain=%q: %s; want TYPE/KEY", raw, strings.TrimPrefix(err.Error(), "grain: "))
		return grain.ID{}, false
	}
	if !knownType(a.sl, id.Type) {
		writeError(w, http.StatusNotFound, codes.NotFound, "unknown grain type %q: no silo of the cluster hosts it", id.Type)
		return grain.ID{}, false
	}
	return id, true
}

// knownType reports whether typ is registered on sl or hosted by another
// member.
func knownType(sl *silo.Silo, typ string) bool {
	for _, ts := range sl.TypeStats() {
		if ts.Type == typ {
			return true
		}
	}
	return slices.ContainsFunc(sl.Members(), func(m membership.Member) bool { return m.Hosts(typ) })
}

// ready answers 503 with the reason and returns false unless the silo
// serves calls: its directory answers only then.
func ready(w http.ResponseWriter, a *attachment) bool {
	if err := a.sl.Ready(); err != nil {
		writeError(w, http.StatusServiceUnavailable, codes.Unavailable, "%v", err)
		return false
	}
	return true
}

// isSelf reports whether member, as the directory names the holder of an
// activation, is this silo: a silo alone holds every activation it knows.
func isSelf(info silo.Info, member string) bool {
	return info.Member == "" || member == info.Member || member == ""
}

// lookupParam answers a request about the grain its query names, by
// method: it finds where the grain is active, or answers the error and
// returns ok false.
func (s *Server) lookupParam(w http.ResponseWriter, r *http.Request, method string) (a *attachment, id grain.ID, member string, found, ok bool) {
	if !allow(w, r, method) {
		return nil, id, "", false, false
	}
	if a = s.attached(w); a == nil {
		return nil, id, "", false, false
	}
	if id, ok = grainParam(w, r, a); !ok || !ready(w, a) {
		return nil, id, "", false, false
	}
	member, found, err := a.sl.Lookup(r.Context(), id)
	if err != nil {
		writeSiloError(w, "looking up "+id.String(), err)
		return nil, id, "", false, false
	}
	return a, id, member, found, true
}

func (s *Server) handleLookup(w http.ResponseWriter, r *http.Request) {
	a, id, member, found, ok := s.lookupParam(w, r, http.MethodGet)
	if !ok {
		return
	}
	loc := adminapi.Location{Grain: id.String(), Active: found}
	if found {
		info := a.sl.Info()
		if isSelf(info, member) {
			loc.Member, loc.Name = info.Member, info.Name
		} else {
			loc.Member, loc.Name = member, memberName(a.sl.Members(), member)
		}
	}
	writeJSON(w, http.StatusOK, loc)
}

func (s *Server) handleDeactivate(w http.ResponseWriter, r *http.Request) {
	a, id, member, found, ok := s.lookupParam(w, r, http.MethodPost)
	if !ok {
		return
	}
	ctx := r.Context()
	if !found {
		writeJSON(w, http.StatusOK, adminapi.Deactivation{Grain: id.String()})
		return
	}
	info := a.sl.Info()
	if isSelf(info, member) {
		done, err := a.sl.Deactivate(ctx, id)
		if err != nil {
			writeSiloError(w, "deactivating "+id.String(), err)
			return
		}
		s.log.Info("grain deactivated by an admin request",
			append(callerOf(r).logFields(), zap.Stringer("grain", id), zap.Bool("was_active", done))...)
		writeJSON(w, http.StatusOK, adminapi.Deactivation{Grain: id.String(), Deactivated: done, Member: info.Member})
		return
	}
	members := a.sl.Members()
	i := slices.IndexFunc(members, func(m membership.Member) bool { return m.ID == member })
	if i < 0 {
		writeError(w, http.StatusServiceUnavailable, codes.Unavailable, "%s is active on %s, which is no longer a live member; try again", id, member)
		return
	}
	peer := members[i]
	var reply adminapi.Deactivation
	err := s.forward(ctx, peer, callerOf(r).token, func(ctx context.Context, c *adminapi.Client) (err error) {
		reply, err = c.Deactivate(ctx, id.String())
		return err
	})
	if err != nil {
		writePeerError(w, peer.ID, peer.AdminAddr, err)
		return
	}
	writeJSON(w, http.StatusOK, reply)
}

// errNoAdminAddr is the failure of a request for a member that serves no
// admin API.
var errNoAdminAddr = errors.New("the member gossips no admin address")

// forward runs call with a client of peer's admin server that sends
// token (the caller's; "" for none), within Config.PeerTimeout of ctx.
func (s *Server) forward(ctx context.Context, peer membership.Member, token string, call func(context.Context, *adminapi.Client) error) error {
	if peer.AdminAddr == "" {
		return errNoAdminAddr
	}
	c, err := s.peerClient(peer.AdminAddr, token)
	if err != nil {
		return err
	}
	ctx, cancel := s.peerContext(ctx)
	defer cancel()
	return call(ctx, c)
}

func (s *Server) handleDrain(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	a := s.attached(w)
	if a == nil {
		return
	}
	name, ok := queryParam(w, r, "silo", "NAME|MEMBER")
	if !ok {
		return
	}
	info := a.sl.Info()
	if name == info.Name || (info.Member != "" && name == info.Member) {
		s.drainSelf(w, info, callerOf(r))
		return
	}
	others := otherMembers(info, a.sl.Members())
	var match []membership.Member
	for _, m := range others {
		if m.ID == name {
			match = []membership.Member{m}
			break
		}
		if m.Name == name {
			match = append(match, m)
		}
	}
	switch {
	case len(match) == 0:
		writeError(w, http.StatusNotFound, codes.NotFound, "no silo named %q among the cluster's live members", name)
		return
	case len(match) > 1:
		ids := make([]string, len(match))
		for i, m := range match {
			ids[i] = m.ID
		}
		writeError(w, http.StatusBadRequest, codes.InvalidArgument, "silo %q names %d members (%s); give the member ID", name, len(match), strings.Join(ids, ", "))
		return
	}
	peer := match[0]
	var reply adminapi.DrainReply
	err := s.forward(r.Context(), peer, callerOf(r).token, func(ctx context.Context, c *adminapi.Client) (err error) {
		reply, err = c.Drain(ctx, peer.ID)
		return err
	})
	if err != nil {
		writePeerError(w, peer.ID, peer.AdminAddr, err)
		return
	}
	writeJSON(w, http.StatusAccepted, reply)
}

// drainSelf starts this silo's drain: Config.Drain, once.
func (s *Server) drainSelf(w http.ResponseWriter, info silo.Info, by caller) {
	if s.cfg.Drain == nil {
		writeError(w, http.StatusNotImplemented, codes.Unimplemented, "silo %s cannot be drained through its admin server: its host set no drain function", info.Name)
		return
	}
	s.drainOnce.Do(func() {
		s.log.Info("drain requested through the admin server",
			append(by.logFields(), zap.String("silo", info.Name), zap.String("member", info.Member))...)
		s.cfg.Drain()
	})
	writeJSON(w, http.StatusAccepted, adminapi.DrainReply{Member: info.Member, Name: info.Name})
}
