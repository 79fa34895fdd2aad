package gateway

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"github.com/granaryio/granary/internal/refusal"
	"github.com/granaryio/granary/silo/grpcapi"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// shedLogInterval is how often at most a refused one-way request is
// logged; the line counts those refused since the last.
const shedLogInterval = 10 * time.Second

// A Shedder makes the refusals of a silo that sheds load (local.Config's
// Shed): a ResourceExhausted status with a RetryInfo and an ErrorInfo
// naming the silo. Its methods may be called from any goroutine.
type Shedder struct {
	reason  func() string
	retry   time.Duration
	refused *atomic.Uint64
	log     *zap.Logger
	clock   clockwork.Clock

	mu         sync.Mutex
	lastLog    time.Time
	suppressed uint64 // one-way refusals since lastLog, not logged
}

// NewShedder returns the Shedder of a silo: reason says why it sheds (see
// overload.Monitor.Reason), retry is the delay refusals ask for, refused
// counts them, and clock paces the logs of refused one-way requests.
func NewShedder(reason func() string, retry time.Duration, refused *atomic.Uint64, log *zap.Logger, clock clockwork.Clock) *Shedder {
	return &Shedder{reason: reason, retry: retry, refused: refused, log: log, clock: clock}
}

// Refuse counts the refusal of a new request from from to this silo,
// which the sender knows as self, and returns its error; a one-way
// request's it logs, rate-limited. It is local.Config's Shed.
func (sh *Shedder) Refuse(self, from string, oneWay bool) error {
	sh.refused.Add(1)
	err := OverloadError(self, sh.reason(), sh.retry)
	if oneWay {
		sh.logOneWay(from, err)
	}
	return err
}

func (sh *Shedder) logOneWay(from string, err error) {
	now := sh.clock.Now()
	sh.mu.Lock()
	if !sh.lastLog.IsZero() && now.Sub(sh.lastLog) < shedLogInterval {
		sh.suppressed++
		sh.mu.Unlock()
		return
	}
	n := sh.suppressed
	sh.lastLog, sh.suppressed = now, 0
	sh.mu.Unlock()
	sh.log.Warn("refused a one-way request: the silo is shedding load", zap.String("from", from),
		zap.Uint64("unlogged_since_last", n), zap.String("error", status.Convert(err).Message()))
}

// OverloadError is the refusal of a request by silo while it sheds load
// because of reason: ResourceExhausted, with a google.rpc.RetryInfo of
// retry and a google.rpc.ErrorInfo of refusal.Overloaded naming the silo.
// The Go client matches it: a refusal by its gateway's own silo sends the
// call to another gateway.
func OverloadError(silo, reason string, retry time.Duration) error {
	if reason == "" {
		reason = "shedding load"
	}
	return refusal.New(fmt.Sprintf("granary: silo %s is overloaded (%s); retry in %v", silo, reason, retry), retry, refusal.Overloaded, silo)
}

// sheds reports whether the gateway refuses new requests now: one atomic
// load, the whole cost of load shedding to a request while it is off.
func (g *Gateway) sheds() bool { return g.s.Overload.Shedding.Load() && g.s.Cfg.Shed != nil }

// shed refuses a new request from client from because the silo sheds
// load; sheds said so.
func (g *Gateway) shed(from string, oneWay bool) error { return g.s.Cfg.Shed(g.self, from, oneWay) }

// shedCaller is the grain.Caller behind the gateway's plain gRPC
// services (silo/grpcapi): it refuses calls while the silo sheds load, as
// Deliver refuses the Go clients', and hands the others on, marked as
// requests from outside the silo, whose waits the silo bounds and times.
type shedCaller struct {
	grain.Caller
	g *Gateway
}

func (c shedCaller) Invoke(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) (proto.Message, error) {
	if c.g.sheds() {
		// A gRPC call is answered, one-way methods included.
		return nil, grpcapi.NotRun(c.g.shed("a gRPC client", false))
	}
	return c.Caller.Invoke(ctx, id, m, req, append(opts[:len(opts):len(opts)], grainrt.FromOutside())...)
}

func (c shedCaller) InvokeAsync(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) grain.Pending {
	if c.g.sheds() {
		return grain.Failed(grpcapi.NotRun(c.g.shed("a gRPC client", false)))
	}
	return c.Caller.InvokeAsync(ctx, id, m, req, append(opts[:len(opts):len(opts)], grainrt.FromOutside())...)
}
