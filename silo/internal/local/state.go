package local

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/boltstore"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EmbeddedStoreFile is the name of the embedded store's file in
// Config.DataDir.
const EmbeddedStoreFile = "granary.db"

// openStorage resolves the providers the registered types' states and the
// reminder service use, opening the embedded store when the default
// provider is asked for and DataDir gives it. Start, before anything else.
func (s *Runtime) openStorage() error {
	s.Providers = make(map[string]storage.Provider, len(s.Cfg.Storage)+1)
	for name, p := range s.Cfg.Storage {
		s.Providers[name] = p
	}
	needDefault := s.Cfg.Reminders != nil && s.Cfg.Reminders.Table == nil
	for _, t := range s.sortedTypes() {
		for _, d := range t.Opts.States {
			if d.ProviderName() == grain.DefaultStorage {
				needDefault = true
			}
		}
	}
	if needDefault && s.Providers[grain.DefaultStorage] == nil && s.Cfg.DataDir != "" {
		path := filepath.Join(s.Cfg.DataDir, EmbeddedStoreFile)
		st, err := boltstore.Open(boltstore.Config{Path: path})
		if err != nil {
			return &ConfigError{Field: "DataDir", Reason: err.Error()}
		}
		s.embedded = st
		s.Providers[grain.DefaultStorage] = st
		s.Log.Info("embedded store opened", zap.String("path", path))
	}
	for _, t := range s.sortedTypes() {
		for _, d := range t.Opts.States {
			if s.Providers[d.ProviderName()] == nil {
				return s.closeStorage(&ConfigError{Field: "Storage", Reason: missingProvider(t.Desc.Type, d)})
			}
		}
	}
	if rc := s.Cfg.Reminders; rc != nil {
		s.ReminderTable = rc.Table
		if s.ReminderTable == nil {
			p := s.Providers[grain.DefaultStorage]
			tab, ok := p.(storage.ReminderTable)
			switch {
			case p == nil:
				return s.closeStorage(&ConfigError{Field: "Reminders.Table", Reason: "not set, and there is no default storage provider to keep reminders in (set Storage[\"default\"], DataDir, or Reminders.Table)"})
			case !ok:
				return s.closeStorage(&ConfigError{Field: "Reminders.Table", Reason: fmt.Sprintf("not set, and the default storage provider (%T) keeps no reminders", p)})
			}
			s.ReminderTable = tab
		}
	}
	s.countStateOps()
	return nil
}

func missingProvider(typ string, d grain.StateDecl) string {
	how := "add it to Storage"
	if d.ProviderName() == grain.DefaultStorage {
		how = `set Storage["default"], or DataDir for the embedded store`
	}
	return fmt.Sprintf("grain type %s keeps state %q in storage provider %q, which is not configured: %s", typ, d.StateName(), d.ProviderName(), how)
}

// closeStorage closes the embedded store if the silo opened it, and
// returns err.
func (s *Runtime) closeStorage(err error) error {
	if s.embedded != nil {
		if cerr := s.embedded.Close(); cerr != nil && !errors.Is(cerr, storage.ErrClosed) {
			s.Log.Warn("closing the embedded store", zap.Error(cerr))
		}
	}
	return err
}

// CheckStates checks a type's state declarations at registration.
func CheckStates(typ string, decls []grain.StateDecl) error {
	for i, d := range decls {
		if d == nil || d.StateName() == "" {
			return fmt.Errorf("silo: RegisterGrain %s: state %d has no name", typ, i)
		}
		for _, e := range decls[:i] {
			if e.StateName() == d.StateName() {
				return fmt.Errorf("silo: RegisterGrain %s: state %q declared twice", typ, d.StateName())
			}
		}
	}
	return nil
}

// readStates binds and reads an activation's declared states. The
// activate turn, before OnActivate; ctx is the turn's Context.
func (a *Activation) readStates(ctx context.Context) error {
	decls := a.typ.Opts.States
	if len(decls) == 0 {
		return nil
	}
	a.states = make([]grainrt.BoundState, len(decls))
	for i, d := range decls {
		b := d.Bind(&stateStore{s: a.s, p: a.s.Providers[d.ProviderName()], provider: d.ProviderName(), id: a.ID, name: d.StateName()})
		if err := b.Read(ctx); err != nil {
			return err
		}
		a.states[i] = b
	}
	return nil
}

// BoundState implements grainrt.StateHost: the running activation's state
// that decl declared, or nil.
func (t *turnCtx) BoundState(decl grain.StateDecl) grainrt.BoundState {
	a := t.C.act
	if i := slices.Index(a.typ.Opts.States, decl); i >= 0 && i < len(a.states) {
		return a.states[i]
	}
	return nil
}

// stateStore is one activation's record of one state in its provider: a
// grainrt.StateStore that turns the provider's errors into the status codes
// callers see.
type stateStore struct {
	s        *Runtime
	p        storage.Provider
	provider string
	id       grain.ID
	name     string
}

func (st *stateStore) Read(ctx context.Context) ([]byte, string, bool, error) {
	r, err := st.p.ReadState(ctx, st.id, st.name)
	if err != nil {
		return nil, "", false, st.status("reading", err)
	}
	return r.Data, r.ETag, r.Exists, nil
}

func (st *stateStore) Write(ctx context.Context, data []byte, etag string) (string, error) {
	e, err := st.p.WriteState(ctx, st.id, st.name, data, etag)
	if err != nil {
		return "", st.status("writing", err)
	}
	return e, nil
}

func (st *stateStore) Clear(ctx context.Context, etag string) (string, error) {
	e, err := st.p.ClearState(ctx, st.id, st.name, etag)
	if err != nil {
		return "", st.status("clearing", err)
	}
	return e, nil
}

func (st *stateStore) status(doing string, err error) error {
	return storageStatus(err, fmt.Sprintf("%s state %q of %s in storage provider %q", doing, st.name, st.id, st.provider))
}

// storageStatus gives a storage error the code callers see: a stale ETag
// is FailedPrecondition, an oversize state InvalidArgument, the context's
// end its own code, and any other failure Unavailable (the store could not
// be reached, or failed; trying again later may succeed).
func storageStatus(err error, what string) error {
	var c codes.Code
	switch {
	case errors.Is(err, storage.ErrETagMismatch):
		c = codes.FailedPrecondition
	case errors.Is(err, storage.ErrTooLarge), errors.Is(err, storage.ErrInvalid):
		c = codes.InvalidArgument
	case errors.Is(err, context.DeadlineExceeded):
		c = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		c = codes.Canceled
	case status.Code(err) != codes.Unknown:
		c = status.Code(err) // a grain's own context ended: its status
	default:
		c = codes.Unavailable
	}
	return status.Errorf(c, "granary: %s: %v", what, err)
}

// sortedTypes returns the registered types in name order, for errors that
// do not change from run to run.
func (s *Runtime) sortedTypes() []*GrainType {
	ts := make([]*GrainType, 0, len(s.Types))
	for _, t := range s.Types {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *GrainType) int { return strings.Compare(a.Desc.Type, b.Desc.Type) })
	return ts
}
