// Package transport carries envelopes between the silos of a cluster.
//
// Between each ordered pair of silos there is one bidirectional stream: the
// dialling silo sends its requests (and one-way messages and directory
// requests) on it, and the other silo sends the responses back on the same
// stream. Every message on a stream is a frame: the encoding of a
// granaryv1.Batch, built by concatenating the encodings of the envelopes
// queued since the last frame. Callers encode their own envelopes, on their
// own goroutines, and append them to the stream's send queue; one writer
// goroutine per stream sends whatever is queued as one frame. Coalescing is
// what makes the stream fast: a gRPC message costs tens of microseconds
// here, an envelope in a batch a fraction of one.
//
// A stream is a Conn from a Network: NewGRPCNetwork runs streams as the
// gRPC method /granary.v1.SiloTransport/Connect, and NewMemNetwork runs them
// in memory for tests, where links can be cut and dials refused.
//
// Contract:
//
//   - Call sends a request and calls its done callback exactly once: with
//     the response, or with a gRPC status error (Unavailable when the peer
//     cannot be reached, its stream broke with the request in flight, or
//     RemovePeer declared it failed; DeadlineExceeded when no response came
//     by the deadline plus a grace period; ResourceExhausted when the
//     envelope is larger than MaxMessageSize). A *NotSentError (also
//     Unavailable) says the request never left: the caller may send it
//     elsewhere. A call to a peer that sent a GO_AWAY, even one that had
//     already taken the stream, ends this way too.
//   - Send sends a one-way envelope; it reports only what fails before the
//     envelope is queued.
//   - SetStatus and StatusOf carry an error's whole gRPC status in a
//     response: code, message and details (in the payload, which an error
//     response has no other use for), so that a
//     google.rpc.BadRequest or ErrorInfo crosses every hop. Details that
//     do not decode are dropped one by one, never the code and message,
//     and a reply too large with its details is sent without them.
//   - Incoming envelopes reach the Handler on the stream's reader goroutine,
//     in the order they were sent; the Handler must not block.
//   - A malformed frame or envelope is logged and dropped; when its call ID
//     can still be read, the sender gets InvalidArgument. Nothing panics on
//     bad input.
//   - RemovePeer of a failed peer ends every stream to and from it at
//     once. The Network forgets an address only once no peer and no
//     stream uses it, so a new incarnation at the same address keeps
//     its channel.
//   - Serve returns once its stream's endpoint fails: the stream broke
//     or was closed by the dialling silo, or RemovePeer, Shutdown or
//     Close ended it. Nothing is delivered from that stream after Serve
//     returns.
//   - Close ends every stream, dialled and accepted, and waits for all
//     of their goroutines.
package transport
