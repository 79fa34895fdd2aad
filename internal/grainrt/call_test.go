package grainrt_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
)

func TestResolveCallOptions(t *testing.T) {
	plain := &grain.MethodDesc{Name: "Get"}
	timed := &grain.MethodDesc{Name: "Get", Timeout: 5 * time.Second}
	oneWay := &grain.MethodDesc{Name: "Notify", OneWay: true, Timeout: time.Second}
	tests := []struct {
		name string
		m    *grain.MethodDesc
		opts []grain.CallOption
		want grainrt.CallOptions
	}{
		{"no options", plain, nil, grainrt.CallOptions{}},
		{"method timeout", timed, nil, grainrt.CallOptions{Timeout: 5 * time.Second}},
		{"method one-way", oneWay, nil, grainrt.CallOptions{Timeout: time.Second, OneWay: true}},
		{"call timeout replaces the method's", timed, []grain.CallOption{grain.WithTimeout(2 * time.Second)}, grainrt.CallOptions{Timeout: 2 * time.Second}},
		{"call timeout on a method without one", plain, []grain.CallOption{grain.WithTimeout(time.Minute)}, grainrt.CallOptions{Timeout: time.Minute}},
		{"call timeout may be longer than the method's", timed, []grain.CallOption{grain.WithTimeout(time.Hour)}, grainrt.CallOptions{Timeout: time.Hour}},
		{"last timeout wins", timed, []grain.CallOption{grain.WithTimeout(time.Second), grain.WithTimeout(3 * time.Second)}, grainrt.CallOptions{Timeout: 3 * time.Second}},
		{"zero timeout keeps the method's", timed, []grain.CallOption{grain.WithTimeout(0)}, grainrt.CallOptions{Timeout: 5 * time.Second}},
		{"negative timeout keeps the method's", timed, []grain.CallOption{grain.WithTimeout(-time.Second)}, grainrt.CallOptions{Timeout: 5 * time.Second}},
		{"call one-way", timed, []grain.CallOption{grain.OneWay()}, grainrt.CallOptions{Timeout: 5 * time.Second, OneWay: true}},
		{"one-way and timeout", plain, []grain.CallOption{grain.OneWay(), grain.WithTimeout(time.Second)}, grainrt.CallOptions{Timeout: time.Second, OneWay: true}},
		{"timeout does not undo one-way", oneWay, []grain.CallOption{grain.WithTimeout(2 * time.Second)}, grainrt.CallOptions{Timeout: 2 * time.Second, OneWay: true}},
		{"zero CallOption changes nothing", oneWay, []grain.CallOption{{}}, grainrt.CallOptions{Timeout: time.Second, OneWay: true}},
		{"allow call-chain reentrancy", plain, []grain.CallOption{grain.AllowCallChainReentrancy()}, grainrt.CallOptions{ChainReentry: grainrt.ChainReentryAllow}},
		{"suppress call-chain reentrancy", plain, []grain.CallOption{grain.SuppressCallChainReentrancy()}, grainrt.CallOptions{ChainReentry: grainrt.ChainReentrySuppress}},
		{"last reentrancy scope wins", plain, []grain.CallOption{grain.AllowCallChainReentrancy(), grain.SuppressCallChainReentrancy()}, grainrt.CallOptions{ChainReentry: grainrt.ChainReentrySuppress}},
		{"last reentrancy scope wins, the other way", plain, []grain.CallOption{grain.SuppressCallChainReentrancy(), grain.AllowCallChainReentrancy()}, grainrt.CallOptions{ChainReentry: grainrt.ChainReentryAllow}},
		{"other options keep the scope", timed, []grain.CallOption{grain.AllowCallChainReentrancy(), grain.WithTimeout(time.Second), grain.OneWay(), {}}, grainrt.CallOptions{Timeout: time.Second, OneWay: true, ChainReentry: grainrt.ChainReentryAllow}},
		{"the scope keeps other options", oneWay, []grain.CallOption{grain.SuppressCallChainReentrancy()}, grainrt.CallOptions{Timeout: time.Second, OneWay: true, ChainReentry: grainrt.ChainReentrySuppress}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := grainrt.ResolveCallOptions(tt.m.Timeout, tt.m.OneWay, tt.opts); got != tt.want {
				t.Errorf("ResolveCallOptions = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// SendThrough runs the filters in order, the first outermost, each
// handing on what it was given, and the innermost Send last.
func TestSendThroughOrder(t *testing.T) {
	var order []string
	filter := func(name string) grain.OutgoingFilter {
		return func(ctx context.Context, target grain.ID, m *grain.MethodDesc, req proto.Message, next grain.Send) grain.Pending {
			order = append(order, name+">"+target.String())
			p := next(grain.WithHeader(ctx, name, "1"), req)
			order = append(order, "<"+name)
			return p
		}
	}
	id := grain.NewID("t.T", "k")
	sent := grain.Failed(errors.New("sent"))
	p := grainrt.SendThrough([]grain.OutgoingFilter{filter("a"), filter("b")}, context.Background(), id, &grain.MethodDesc{Name: "M"}, nil,
		func(ctx context.Context, req proto.Message) grain.Pending {
			order = append(order, "send a="+grain.Header(ctx, "a")+" b="+grain.Header(ctx, "b"))
			return sent
		})
	if p != sent {
		t.Error("SendThrough did not return the innermost Pending")
	}
	if got, want := strings.Join(order, ","), "a>t.T/k,b>t.T/k,send a=1 b=1,<b,<a"; got != want {
		t.Errorf("order %s, want %s", got, want)
	}
}
