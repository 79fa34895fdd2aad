package silo

import (
	"testing"
	"time"

	"github.com/granaryio/granary/internal/testwait"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/storage"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// TestReminderTickRefusedFromClients: only silos may deliver a reminder's
// tick. A gateway that does not host the grain's type passes clients'
// calls on by method name; it must refuse the runtime's reminder method
// rather than relay a forged tick to the silo that hosts the grain.
func TestReminderTickRefusedFromClients(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	tc := newTestCluster(t, nil, clusterOpt{
		tweak: memoryStore(storage.NewMemory(0)),
		register: func(s *Silo, name string) {
			if name == "b" { // only b hosts probe.Register
				w.register(t, s, name)
			}
		},
	})
	gw := tc.startNoWait("gw", func(cfg *Config) {
		g := DefaultGatewayConfig()
		g.Listen = "127.0.0.1:0"
		cfg.Gateway = &g
	})
	tc.startNoWait("b", nil)
	tc.waitConverged()
	testwait.For(t, defaultTestTimeout, "the gateway's silo to see Register hosted", func() bool {
		return hostsOf(gw, probe.RegisterGrainType) == 1
	})

	forged := &granaryv1.ReminderTick{Name: "forged", PeriodNanos: int64(time.Minute)}
	payload, err := proto.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, "test", gw.GatewayAddr())
	_, answer := rc.call(&granaryv1.Envelope{
		Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, GrainType: probe.RegisterGrainType, GrainKey: "victim",
		Method: local.ReminderMethodName, MethodIndex: 0, Payload: payload, TimeoutNanos: int64(5 * time.Second),
	})
	resp := testwait.Recv(t, answer, defaultTestTimeout, "the gateway's answer")
	select {
	case tk := <-w.ticks:
		t.Fatalf("a client's envelope through the gateway delivered a reminder tick %q to %s on %s (answer code %v)",
			tk.name, tk.key, tk.silo, codes.Code(resp.Code))
	default:
	}
	if codes.Code(resp.Code) == codes.OK {
		t.Fatalf("the gateway accepted a client's call of %s", local.ReminderMethodName)
	}
}
