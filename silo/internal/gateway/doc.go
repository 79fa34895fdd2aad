// Package gateway is a silo's service to external clients: one gRPC
// server that carries the batched streams of Go clients (the same
// transport the silos use among themselves), every grain type as a plain
// gRPC service for clients in any language (silo/grpcapi), reflection
// and health.
//
// It owns:
//   - the listener, its limits and its keepalive policy;
//   - authentication (security/auth): every call proves a principal, which
//     the gateway writes into the call's headers, removing any a client
//     sent; client IDs are bound to their principal (ClientIDPrefix);
//   - the calls clients send, their cancellation, and their replies;
//   - observer homes: the clients whose home is this gateway, registered
//     in the directory so that calls to their observers find them;
//   - the gateway list clients refresh, and going away at Stop;
//   - the refusals of a silo that sheds load (Shedder, OverloadError),
//     which the silo-to-silo receiver makes too, through local.Config's
//     Shed: the gateway refuses Go clients' and plain gRPC clients' new
//     calls while the runtime's Overload.Shedding is up.
//
// The local runtime (silo/internal/local) sees this package only through
// the local.Gateway interface, which a *Gateway implements: Reply,
// DeliverObserver and HomeEntries. It reads the cluster's view and
// directory through the cluster's exported API.
//
// It may import the runtime, the cluster side (silo/internal/cluster),
// the transport, grpcapi, security and the wire protocol. It must not
// import the silo root, which imports it.
package gateway
