package grain_test

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/granaryio/granary/grain"
)

func TestPlacementString(t *testing.T) {
	tests := []struct {
		p    grain.Placement
		want string
	}{
		{grain.PlacementDefault, "default"},
		{grain.PlacementRandom, "random"},
		{grain.PlacementPreferLocal, "prefer_local"},
		{grain.PlacementHash, "hash"},
		{grain.PlacementActivationCount, "activation_count"},
		{grain.PlacementSiloRole, "silo_role"},
		{grain.PlacementSiloRole + 1, "Placement(?)"},
		{-1, "Placement(?)"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("Placement(%d).String() = %q, want %q", int(tt.p), got, tt.want)
		}
	}
	// The value is part of the contract with granary.v1.Placement, whose
	// PLACEMENT_SILO_ROLE is 5.
	if grain.PlacementSiloRole != 5 {
		t.Errorf("PlacementSiloRole = %d, want 5", int(grain.PlacementSiloRole))
	}
}

func TestRegisterOptions(t *testing.T) {
	tests := []struct {
		name string
		from grain.TypeOptions
		opts []grain.RegisterOption
		want grain.TypeOptions
	}{
		{
			name: "silo role",
			opts: []grain.RegisterOption{grain.WithSiloRole("edge")},
			want: grain.TypeOptions{Placement: grain.PlacementSiloRole, SiloRole: "edge"},
		},
		{
			name: "silo role replaces the proto's placement and role",
			from: grain.TypeOptions{Placement: grain.PlacementSiloRole, SiloRole: "core", KeyKind: grain.KeyInt64},
			opts: []grain.RegisterOption{grain.WithSiloRole("edge")},
			want: grain.TypeOptions{Placement: grain.PlacementSiloRole, SiloRole: "edge", KeyKind: grain.KeyInt64},
		},
		{
			name: "silo role after another placement",
			from: grain.TypeOptions{Placement: grain.PlacementHash},
			opts: []grain.RegisterOption{grain.WithSiloRole("edge")},
			want: grain.TypeOptions{Placement: grain.PlacementSiloRole, SiloRole: "edge"},
		},
		{
			name: "keep alive",
			from: grain.TypeOptions{KeyKind: grain.KeyUUID},
			opts: []grain.RegisterOption{grain.WithKeepAlive()},
			want: grain.TypeOptions{KeepAlive: true, KeyKind: grain.KeyUUID},
		},
		{
			name: "every option",
			opts: []grain.RegisterOption{
				grain.WithPlacement(grain.PlacementHash),
				grain.WithReentrant(true),
				grain.WithCallChainReentrancy(),
				grain.WithCollectionAge(time.Minute),
				grain.WithStatelessWorker(3),
			},
			want: grain.TypeOptions{
				Placement:          grain.PlacementHash,
				Reentrant:          true,
				CallChainReentrant: true,
				CollectionAge:      time.Minute,
				StatelessWorker:    true,
				MaxLocalWorkers:    3,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.from
			for _, o := range tt.opts {
				o(&got)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("options %+v, want %+v", got, tt.want)
			}
		})
	}
}

// WithMayInterleave sets the predicate as given (funcs do not compare, so
// the test calls it) and leaves the other options alone; nil clears it.
func TestWithMayInterleave(t *testing.T) {
	var saw *grain.MethodDesc
	fn := func(m *grain.MethodDesc, req proto.Message) bool { saw = m; return req != nil }
	got := grain.TypeOptions{CallChainReentrant: true, CollectionAge: time.Minute}
	grain.WithMayInterleave(fn)(&got)
	grain.WithReentrant(false)(&got)
	if got.MayInterleave == nil {
		t.Fatal("MayInterleave not set")
	}
	m := &grain.MethodDesc{Name: "Get"}
	if !got.MayInterleave(m, &emptypb.Empty{}) || got.MayInterleave(m, nil) || saw != m {
		t.Error("MayInterleave is not the predicate given")
	}
	got.MayInterleave = nil
	if want := (grain.TypeOptions{CallChainReentrant: true, CollectionAge: time.Minute}); !reflect.DeepEqual(got, want) {
		t.Errorf("options %+v, want %+v", got, want)
	}
	grain.WithMayInterleave(fn)(&got)
	grain.WithMayInterleave(nil)(&got)
	if got.MayInterleave != nil {
		t.Error("WithMayInterleave(nil) left a predicate")
	}
}
