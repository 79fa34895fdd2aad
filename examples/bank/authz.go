// This file holds the bank's authorization: an incoming filter that lets
// only an account's owner take money out of it.

package main

import (
	"github.com/granaryio/granary/grain"
	bankpb "github.com/granaryio/granary/proto/examples/bank"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// authorize is the bank's incoming filter. Who calls is grain.Principal:
// the principal a gateway verified (a bearer token's, a client
// certificate's common name), carried on along the call chain, or the one
// an in-process caller set with grain.WithPrincipal. The rules:
//
//   - only an account's owner, the principal named as the account's key,
//     may withdraw from it; a transfer withdraws as whoever asked for the
//     transfer, so only the owner of the account it takes from may start
//     it;
//   - anyone authenticated may do the rest: read a balance, deposit,
//     audit, transfer;
//   - an anonymous caller may do nothing.
//
// A refusal is Unauthenticated for an anonymous caller and
// PermissionDenied for one who may not, so that the client knows whether
// to log in or to give up. The filter sees the method's descriptor, so it
// tells methods apart by name without decoding anything.
func authorize(ctx grain.Context, m *grain.MethodDesc, req proto.Message, next grain.Invocation) (proto.Message, error) {
	who := grain.Principal(ctx)
	if who == "" {
		return nil, grain.Errorf(codes.Unauthenticated, "%s.%s: who is calling? the bank serves no anonymous callers", ctx.ID(), m.Name)
	}
	if ctx.ID().Type == bankpb.AccountGrainType && m.Name == "Withdraw" && who != ctx.ID().Key {
		return nil, grain.Errorf(codes.PermissionDenied, "%s may not withdraw from %s's account", who, ctx.ID().Key)
	}
	return next(ctx, req)
}
