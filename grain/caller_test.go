package grain_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
)

type ctxKey string

// fakePending is a Pending that answers at once with reply and err, and
// records the contexts it was awaited with.
type fakePending struct {
	reply proto.Message
	err   error
	ctxs  []context.Context
}

func (p *fakePending) Await(ctx context.Context) (proto.Message, error) {
	p.ctxs = append(p.ctxs, ctx)
	return p.reply, p.err
}

func TestFutureAwait(t *testing.T) {
	ctx := context.WithValue(context.Background(), ctxKey("k"), "v")
	errBoom := status.Error(codes.NotFound, "no such account")
	reply := wrapperspb.String("42")
	tests := []struct {
		name    string
		p       *fakePending
		want    *wrapperspb.StringValue
		wantErr error
	}{
		{"success", &fakePending{reply: reply}, reply, nil},
		{"error", &fakePending{err: errBoom}, nil, errBoom},
		{"error with a reply", &fakePending{reply: reply, err: errBoom}, nil, errBoom},
		{"one-way: nil reply", &fakePending{}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := grain.NewFuture[*wrapperspb.StringValue](tt.p)
			got, err := f.Await(ctx)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("Await = %v, %v; want %v, %v", got, err, tt.want, tt.wantErr)
			}
			if err := f.Wait(ctx); !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("Wait = %v, want %v", err, tt.wantErr)
			}
			// Await may be called more than once; each reaches the Pending
			// with the caller's context.
			if len(tt.p.ctxs) != 2 {
				t.Fatalf("Pending awaited %d times, want 2", len(tt.p.ctxs))
			}
			for _, c := range tt.p.ctxs {
				if c.Value(ctxKey("k")) != "v" {
					t.Error("Pending did not get the caller's context")
				}
			}
		})
	}
}

func TestZeroFuture(t *testing.T) {
	var f grain.Future[*wrapperspb.StringValue]
	got, err := f.Await(context.Background())
	if got != nil || err == nil {
		t.Fatalf("zero Future's Await = %v, %v; want nil and an error", got, err)
	}
	if !strings.HasPrefix(err.Error(), "grain: ") {
		t.Errorf("error %q does not begin with the package name", err)
	}
	if werr := f.Wait(context.Background()); werr == nil || werr.Error() != err.Error() {
		t.Errorf("zero Future's Wait = %v, want %v", werr, err)
	}
}

func TestFailed(t *testing.T) {
	errSend := status.Error(codes.Unavailable, "silo stopping")
	p := grain.Failed(errSend)
	for range 2 {
		if m, err := p.Await(context.Background()); m != nil || err != errSend {
			t.Errorf("Failed(err).Await = %v, %v; want nil, %v", m, err, errSend)
		}
	}
	f := grain.NewFuture[*wrapperspb.StringValue](p)
	if m, err := f.Await(context.Background()); m != nil || err != errSend {
		t.Errorf("Future over Failed: Await = %v, %v; want nil, %v", m, err, errSend)
	}
}

// recordingWaiter is a Waiter that logs its Wait calls and returns err.
type recordingWaiter struct {
	name string
	err  error
	log  *[]string
}

func (w recordingWaiter) Wait(ctx context.Context) error {
	*w.log = append(*w.log, fmt.Sprintf("%s:%v", w.name, ctx.Value(ctxKey("k"))))
	return w.err
}

// Every Future can be passed to AwaitAll.
var _ grain.Waiter = grain.Future[*wrapperspb.StringValue]{}

func TestAwaitAll(t *testing.T) {
	errA := errors.New("a failed")
	errB := status.Error(codes.Aborted, "b failed")
	tests := []struct {
		name string
		errs []error // one Waiter per entry
		want error
	}{
		{"none", nil, nil},
		{"one ok", []error{nil}, nil},
		{"all ok", []error{nil, nil, nil}, nil},
		{"one fails", []error{errA}, errA},
		{"first fails", []error{errA, nil, errB}, errA},
		{"middle fails", []error{nil, errB, nil}, errB},
		{"last fails", []error{nil, nil, errA}, errA},
		{"several fail: first in argument order", []error{nil, errB, errA}, errB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.WithValue(context.Background(), ctxKey("k"), "v")
			var log, want []string
			var calls []grain.Waiter
			for i, err := range tt.errs {
				name := fmt.Sprint("w", i)
				calls = append(calls, recordingWaiter{name: name, err: err, log: &log})
				want = append(want, name+":v")
			}
			if err := grain.AwaitAll(ctx, calls...); err != tt.want {
				t.Errorf("AwaitAll = %v, want %v", err, tt.want)
			}
			if strings.Join(log, " ") != strings.Join(want, " ") {
				t.Errorf("waited for %q, want %q", log, want)
			}
		})
	}
}

func TestAwaitAllFutures(t *testing.T) {
	errC := status.Error(codes.DeadlineExceeded, "c timed out")
	a, b, c := &fakePending{reply: wrapperspb.String("a")}, &fakePending{}, &fakePending{err: errC}
	fa := grain.NewFuture[*wrapperspb.StringValue](a)
	fb := grain.NewFuture[*wrapperspb.StringValue](b)
	fc := grain.NewFuture[*wrapperspb.Int64Value](c)
	if err := grain.AwaitAll(context.Background(), fa, fc, fb); err != errC {
		t.Errorf("AwaitAll = %v, want %v", err, errC)
	}
	for name, p := range map[string]*fakePending{"a": a, "b": b, "c": c} {
		if len(p.ctxs) != 1 {
			t.Errorf("future %s awaited %d times, want 1", name, len(p.ctxs))
		}
	}
	var zero grain.Future[*wrapperspb.StringValue]
	if err := grain.AwaitAll(context.Background(), fa, zero); err == nil {
		t.Error("AwaitAll with a zero Future = nil, want an error")
	}
}

func TestAwaitFuturesWaitsForEachAndReturnsTheFirstError(t *testing.T) {
	errB := status.Error(codes.DeadlineExceeded, "b timed out")
	errC := status.Error(codes.Aborted, "c failed")
	ps := []*fakePending{{reply: wrapperspb.String("a")}, {err: errB}, {err: errC}, {reply: wrapperspb.String("d")}}
	fs := make([]grain.Future[*wrapperspb.StringValue], len(ps))
	for i, p := range ps {
		fs[i] = grain.NewFuture[*wrapperspb.StringValue](p)
	}
	ctx := context.WithValue(context.Background(), ctxKey("k"), "v")
	if err := grain.AwaitFutures(ctx, fs); err != errB {
		t.Errorf("AwaitFutures = %v, want %v", err, errB)
	}
	for i, p := range ps {
		if len(p.ctxs) != 1 || p.ctxs[0] != ctx {
			t.Errorf("future %d awaited %d times (with %v), want once with the given context", i, len(p.ctxs), p.ctxs)
		}
	}
	if err := grain.AwaitFutures[*wrapperspb.StringValue](ctx, nil); err != nil {
		t.Errorf("AwaitFutures of none = %v, want nil", err)
	}
	fs = append(fs[:1], grain.Future[*wrapperspb.StringValue]{})
	if err := grain.AwaitFutures(ctx, fs); err == nil {
		t.Error("AwaitFutures with a zero Future = nil, want an error")
	}
}

// fakeGrainContext is a grain Context whose Sleep and Blocking record their
// calls instead of waiting. Methods it does not define panic (nil
// embedded interface).
type fakeGrainContext struct {
	grain.Context
	sleeps  []time.Duration
	blocked int
}

func (c *fakeGrainContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *fakeGrainContext) Done() <-chan struct{}       { return nil }
func (c *fakeGrainContext) Err() error                  { return nil }
func (c *fakeGrainContext) Value(key any) any {
	if key == grainrt.ContextKey() {
		return c
	}
	return nil
}
func (c *fakeGrainContext) Sleep(d time.Duration) error { c.sleeps = append(c.sleeps, d); return nil }
func (c *fakeGrainContext) Blocking(fn func())          { c.blocked++; fn() }

func TestFromContext(t *testing.T) {
	if c, ok := grain.FromContext(context.Background()); ok || c != nil {
		t.Errorf("FromContext(Background) = %v, %t; want nil, false", c, ok)
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey("k"), "v"))
	defer cancel()
	if c, ok := grain.FromContext(ctx); ok || c != nil {
		t.Errorf("FromContext(plain derived) = %v, %t; want nil, false", c, ok)
	}

	gc := &fakeGrainContext{}
	if c, ok := grain.FromContext(gc); !ok || c != gc {
		t.Errorf("FromContext(grain Context) = %v, %t; want it, true", c, ok)
	}
	derived, cancel2 := context.WithTimeout(context.WithValue(gc, ctxKey("k"), "v"), time.Hour)
	defer cancel2()
	if c, ok := grain.FromContext(derived); !ok || c != gc {
		t.Errorf("FromContext(derived from a grain Context) = %v, %t; want it, true", c, ok)
	}
}

func TestSleepPlainContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := grain.Sleep(ctx, time.Hour); err != context.Canceled {
		t.Errorf("Sleep(cancelled, 1h) = %v, want %v", err, context.Canceled)
	}

	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel2()
	if err := grain.Sleep(expired, time.Hour); err != context.DeadlineExceeded {
		t.Errorf("Sleep(expired, 1h) = %v, want %v", err, context.DeadlineExceeded)
	}

	// A zero or negative duration has already passed.
	for _, d := range []time.Duration{0, -time.Second} {
		if err := grain.Sleep(context.Background(), d); err != nil {
			t.Errorf("Sleep(Background, %v) = %v, want nil", d, err)
		}
	}
}

func TestSleepGrainContext(t *testing.T) {
	gc := &fakeGrainContext{}
	ctx, cancel := context.WithCancel(gc)
	defer cancel()
	if err := grain.Sleep(ctx, time.Hour); err != nil {
		t.Errorf("Sleep = %v", err)
	}
	if len(gc.sleeps) != 1 || gc.sleeps[0] != time.Hour {
		t.Errorf("grain Context slept %v, want [1h]", gc.sleeps)
	}
}

func TestBlocking(t *testing.T) {
	ran := 0
	grain.Blocking(context.Background(), func() { ran++ })
	if ran != 1 {
		t.Errorf("Blocking(plain context) ran fn %d times, want 1", ran)
	}

	gc := &fakeGrainContext{}
	grain.Blocking(context.WithValue(gc, ctxKey("k"), "v"), func() { ran++ })
	if ran != 2 || gc.blocked != 1 {
		t.Errorf("Blocking(grain context): fn ran %d times in all, Context.Blocking %d; want 2, 1", ran, gc.blocked)
	}
}

func TestCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"nil", nil, codes.OK},
		{"status error", status.Error(codes.NotFound, "no such grain"), codes.NotFound},
		{"Errorf", grain.Errorf(codes.FailedPrecondition, "balance %d", -5), codes.FailedPrecondition},
		{"wrapped status error", fmt.Errorf("calling bank: %w", status.Error(codes.Aborted, "deadlock")), codes.Aborted},
		{"plain error", errors.New("boom"), codes.Unknown},
	}
	for _, tt := range tests {
		if got := grain.Code(tt.err); got != tt.want {
			t.Errorf("%s: Code(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestErrorf(t *testing.T) {
	err := grain.Errorf(codes.InvalidArgument, "amount %d below %s", -5, "zero")
	s, ok := status.FromError(err)
	if !ok {
		t.Fatalf("Errorf returned %T, not a status error", err)
	}
	if s.Code() != codes.InvalidArgument || s.Message() != "amount -5 below zero" {
		t.Errorf("Errorf: code %v, message %q; want %v, %q", s.Code(), s.Message(), codes.InvalidArgument, "amount -5 below zero")
	}
	if grain.Code(err) != codes.InvalidArgument {
		t.Errorf("Code(Errorf(...)) = %v", grain.Code(err))
	}
}
