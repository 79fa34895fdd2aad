// This file holds the Transfer grain, which moves money between two
// accounts and puts it back when it cannot deliver it.

package main

import (
	"context"

	"github.com/granaryio/granary/grain"
	bankpb "github.com/granaryio/granary/proto/examples/bank"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
)

// transfer implements the bank.Transfer grain, keyed by a transfer number.
// It keeps no state: each Run is a small saga of two calls and, when the
// second fails, a compensating third.
type transfer struct{}

var _ bankpb.TransferGrain = transfer{}

// newTransfer makes the activation of a transfer grain.
func newTransfer(grain.ID) bankpb.TransferGrain { return transfer{} }

// Run withdraws the amount from req.From, then deposits it into req.To.
// A failed withdrawal moved nothing and is returned as it is. A failed
// deposit is compensated: the amount goes back into req.From, and Run
// returns the deposit's error. If the refund fails too, the money is in
// neither account and Run says so with codes.DataLoss.
func (transfer) Run(ctx grain.Context, req *bankpb.TransferRequest) (*bankpb.TransferReceipt, error) {
	if req.GetFrom() == "" || req.GetTo() == "" {
		return nil, grain.Errorf(codes.InvalidArgument, "transfer %s: from and to must name accounts", ctx.ID().Key)
	}
	from := bankpb.NewAccountRef(ctx.Caller(), req.GetFrom())
	to := bankpb.NewAccountRef(ctx.Caller(), req.GetTo())

	out, err := from.Withdraw(ctx, &bankpb.WithdrawRequest{Amount: req.GetAmount()})
	if err != nil {
		return nil, err
	}
	in, err := to.Deposit(ctx, &bankpb.DepositRequest{Amount: req.GetAmount()})
	if err != nil {
		ctx.Logger().Warn("deposit failed; refunding",
			zap.String("from", req.GetFrom()), zap.String("to", req.GetTo()),
			zap.Int64("amount", req.GetAmount()), zap.Error(err))
		// The refund must happen even if the deposit failed because this
		// call's deadline passed or its caller gave up: it runs without
		// the caller's cancellation, bounded by the silo's response
		// timeout. The context still derives from ctx, so the refund is
		// sent as this grain.
		refundCtx := context.WithoutCancel(ctx)
		if _, rerr := from.Deposit(refundCtx, &bankpb.DepositRequest{Amount: req.GetAmount()}); rerr != nil {
			ctx.Logger().Error("refund failed", zap.String("account", req.GetFrom()), zap.Error(rerr))
			return nil, grain.Errorf(codes.DataLoss,
				"transfer %s: deposit of %d into %s failed (%v) and the refund to %s failed too (%v)",
				ctx.ID().Key, req.GetAmount(), req.GetTo(), err, req.GetFrom(), rerr)
		}
		return nil, err
	}
	return &bankpb.TransferReceipt{FromBalance: out.GetAmount(), ToBalance: in.GetAmount()}, nil
}
