package grain

import "context"

// PrincipalHeader is the call header that carries the caller's verified
// principal: who is calling, as the silo whose gateway authenticated the
// client wrote it (a token's principal, a client certificate's name), or
// "" for an anonymous caller. It is reserved: a gateway removes it from
// everything a client sends and writes the principal it verified in its
// place, so a client can never claim one; between silos, which trust each
// other (they run on mutual TLS), it travels as any call header does.
const PrincipalHeader = "granary-principal"

// Principal returns the verified principal of the call ctx belongs to, or
// "" for an anonymous caller, one from inside the cluster, a timer or a
// reminder. Incoming filters authorize with it (together with the method
// they are given), grain methods read it from their Context:
//
//	func (a *account) Withdraw(ctx grain.Context, req *bankpb.WithdrawRequest) (*bankpb.Balance, error) {
//		if grain.Principal(ctx) != ctx.ID().Key { ... }
//
// The principal flows along the call chain as every call header does (as
// Orleans' RequestContext does): a call a grain makes with its Context
// carries the principal of the call it serves, so a grain acting for a
// client acts with that client's rights, and a filter on the next grain
// sees who started the chain. A grain that must act as itself instead
// calls with WithPrincipal.
func Principal(ctx context.Context) string { return Header(ctx, PrincipalHeader) }

// WithPrincipal returns a context whose calls carry principal as their
// verified principal ("" for none). It is for code inside the cluster,
// which is trusted: in-process callers of a silo, and grains that act on
// their own authority. A Go client may set it but it has no effect there:
// the gateway replaces it with the principal it verified.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return WithHeader(ctx, PrincipalHeader, principal)
}
