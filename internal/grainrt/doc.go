// Package grainrt is the contract between package grain and the runtimes
// that run grains (package silo and its subpackages, package client): the
// plumbing grain authors never see. It owns
//
//   - the context value keys: ContextKey, under which a runtime's Context
//     answers with itself, and HeaderKey, under which call headers are
//     kept, with the header plumbing that carries them between processes
//     (AppendHeaders, HeadersFromPairs) and the implementation of
//     grain.WithHeader and grain.Header;
//   - the resolved call options (CallOptions, ResolveCallOptions), the
//     representation of grain.CallOption, and call-chain reentrancy
//     scopes (ChainReentry);
//   - state binding: StateStore, BoundState, StateDecl and StateHost,
//     through which a runtime binds the states a grain declares to its
//     storage providers;
//   - timer settings (TimerOptions), which grain.TimerOption sets;
//   - filter chaining: SendThrough runs a call through outgoing filters.
//
// Package grain imports grainrt, so grainrt imports no package of this
// module: only the standard library and protobuf. What needs grain's types
// is generic over them (SendThrough) or takes their fields
// (ResolveCallOptions). Generated code lives in users' modules and cannot
// import grainrt: it uses only grain's own names.
package grainrt
