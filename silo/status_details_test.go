package silo

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// detailedError is the error the refusing probe returns: InvalidArgument
// with one detail of each common kind.
func detailedError() error {
	st, err := status.New(codes.InvalidArgument, "bad amount").WithDetails(wantedDetails()...)
	if err != nil {
		panic(fmt.Sprintf("status details: %v", err))
	}
	return st.Err()
}

func wantedDetails() []protoadapt.MessageV1 {
	return []protoadapt.MessageV1{
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "amount", Description: "must be positive"}}},
		&errdetails.ErrorInfo{Reason: "NEGATIVE_AMOUNT", Domain: "probe.example", Metadata: map[string]string{"amount": "-1"}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)},
	}
}

// checkDetails returns what is wrong with err: it should have code, msg
// and the details of detailedError.
func checkDetails(err error, code codes.Code, msg string) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != code || st.Message() != msg {
		return fmt.Errorf("error %v, want %v %q", err, code, msg)
	}
	got, want := st.Details(), wantedDetails()
	if len(got) != len(want) {
		return fmt.Errorf("error %v has details %v, want %v", err, got, want)
	}
	for i, d := range got {
		m, ok := d.(protoadapt.MessageV1)
		if !ok || !proto.Equal(protoadapt.MessageV2Of(m), protoadapt.MessageV2Of(want[i])) {
			return fmt.Errorf("detail %d of %v is %v, want %v", i, err, d, want[i])
		}
	}
	return nil
}

// refusingProbe refuses every call with detailedError.
type refusingProbe struct {
	probe.UnimplementedIntProbeGrain
}

func (refusingProbe) Call(grain.Context, *probe.Request) (*probe.Reply, error) {
	return nil, detailedError()
}

// relayProbe calls the refusing probe 7, records the error it got, and
// returns it wrapped.
type relayProbe struct {
	probe.UnimplementedUUIDProbeGrain
	mu  *sync.Mutex
	got *[]error
}

func (g relayProbe) Call(ctx grain.Context, _ *probe.Request) (*probe.Reply, error) {
	_, err := probe.NewIntProbeRef(ctx.Caller(), 7).Call(ctx, &probe.Request{})
	g.mu.Lock()
	*g.got = append(*g.got, err)
	g.mu.Unlock()
	return nil, fmt.Errorf("relaying: %w", err)
}

// TestStatusDetailsSurviveEveryHop: the details of a grain's error status
// reach a grain on another silo, a caller of that grain through yet
// another hop (wrapped with %w on the way), a Go client through the
// gateway, and a plain gRPC client of the gateway, in the
// grpc-status-details-bin trailer. The refusing grain runs on silo b
// only, the relaying one on silo a only, which is the gateway.
func TestStatusDetailsSurviveEveryHop(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		relayGot []error
	)
	tc := newTestCluster(t, nil, clusterOpt{register: func(s *Silo, name string) {
		var err error
		switch name {
		case "a":
			err = probe.RegisterUUIDProbeGrain(s, func(grain.ID) probe.UUIDProbeGrain { return relayProbe{mu: &mu, got: &relayGot} })
		case "b":
			err = probe.RegisterIntProbeGrain(s, func(grain.ID) probe.IntProbeGrain { return refusingProbe{} })
		}
		if err != nil {
			t.Fatal(err)
		}
	}})
	a := tc.startNoWait("a", func(cfg *Config) {
		g := DefaultGatewayConfig()
		g.Listen = "127.0.0.1:0"
		g.Services = []*grain.ServiceDesc{&probe.IntProbe_ServiceDesc}
		cfg.Gateway = &g
	})
	b := tc.startNoWait("b", nil)
	tc.waitConverged()
	testwait.For(t, defaultTestTimeout, "each silo to see the other's probe type", func() bool {
		return hostsOf(a, probe.IntProbeGrainType) == 1 && hostsOf(b, probe.UUIDProbeGrainType) == 1
	})
	relayKey := [16]byte{15: 1}
	const wrapped = "relaying: rpc error: code = InvalidArgument desc = bad amount"

	t.Run("grain to grain across silos", func(t *testing.T) {
		// b → a (relay) → b (refuser) → a → b.
		_, err := probe.NewUUIDProbeRef(b, relayKey).Call(testCtx(t), &probe.Request{})
		if err := checkDetails(err, codes.InvalidArgument, wrapped); err != nil {
			t.Errorf("the caller of the relay: %v", err)
		}
		mu.Lock()
		got := append([]error(nil), relayGot...)
		mu.Unlock()
		if len(got) != 1 {
			t.Fatalf("the relay made %d calls, want 1", len(got))
		}
		if err := checkDetails(got[0], codes.InvalidArgument, "bad amount"); err != nil {
			t.Errorf("the relay grain: %v", err)
		}
	})

	t.Run("Go client through the gateway", func(t *testing.T) {
		c, err := dialGateway(t, a)
		if err != nil {
			t.Fatal(err)
		}
		_, err = probe.NewIntProbeRef(c, 7).Call(testCtx(t), &probe.Request{})
		if err := checkDetails(err, codes.InvalidArgument, "bad amount"); err != nil {
			t.Errorf("the grain on another silo than the gateway's: %v", err)
		}
		_, err = probe.NewUUIDProbeRef(c, relayKey).Call(testCtx(t), &probe.Request{})
		if err := checkDetails(err, codes.InvalidArgument, wrapped); err != nil {
			t.Errorf("the grain on the gateway's silo: %v", err)
		}
	})

	t.Run("plain gRPC client of the gateway", func(t *testing.T) {
		cc, err := grpc.NewClient(a.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		var reply probe.Reply
		ctx := metadata.AppendToOutgoingContext(testCtx(t), "granary-key", "7")
		err = cc.Invoke(ctx, "/probe.IntProbe/Call", &probe.Request{}, &reply)
		if err := checkDetails(err, codes.InvalidArgument, "bad amount"); err != nil {
			t.Errorf("the grain on another silo than the gateway's: %v", err)
		}
		ctx = metadata.AppendToOutgoingContext(testCtx(t), "granary-key", "00000000-0000-0000-0000-000000000001")
		err = cc.Invoke(ctx, "/probe.UUIDProbe/Call", &probe.Request{}, &reply)
		if err := checkDetails(err, codes.InvalidArgument, wrapped); err != nil {
			t.Errorf("the grain on the gateway's silo: %v", err)
		}
	})
}
