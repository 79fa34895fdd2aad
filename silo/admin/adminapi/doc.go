// Package adminapi is the admin HTTP API of a Granary silo: the paths, the
// JSON documents it answers with, and a Go client for it. The server lives
// in package admin; the operator CLI granaryctl and the admin servers of
// other silos (gathering a cluster report) speak to it through Client.
//
// The API, relative to a silo's admin address:
//
//	GET  /healthz                      200 while the process serves HTTP
//	GET  /readyz                       200 once the silo serves calls, else 503 and why
//	GET  /metrics                      Prometheus text exposition
//	GET  /api/v1/silo                  SiloReport
//	GET  /api/v1/cluster               ClusterReport
//	GET  /api/v1/lookup?grain=T/K      Location
//	POST /api/v1/deactivate?grain=T/K  Deactivation
//	POST /api/v1/drain?silo=S          DrainReply
//	GET  /api/v1/cluster/sse           ClusterReport as server-sent events
//	GET  /api/v1/streams               StreamsReport: the cluster's streams (?prefix=P&parked=true&limit=N)
//	GET  /api/v1/silo/streams          StreamsReport: this silo's streams (the same query)
//	POST /api/v1/streams/unpark?stream=P/N/K&subscription=ID  Unparked
//
// /healthz, /readyz and /metrics are always open. When the silo has admin
// credentials configured, the rest needs "Authorization: Bearer TOKEN" (or
// an admin client certificate) and answers 401 Unauthenticated without;
// with none configured, deactivate, drain and unpark answer 403
// PermissionDenied.
//
// Every answer outside 2xx carries an Error body: the name of the gRPC code
// that best describes the failure (InvalidArgument for a malformed grain
// ID, NotFound for an unknown silo, ...) and a message.
//
// The Client's contract:
//
//   - NewClient takes host:port (plain HTTP) or an http:// or https:// URL,
//     optionally with a path prefix; any other address is an error naming
//     it. A nil http.Client means one with DefaultTimeout.
//   - NewClientWith adds ClientOptions: a TLS configuration (host:port is
//     then spoken to over https, and an http:// URL refused) and a bearer
//     token sent with every request; WithToken gives a copy with another
//     token. A token never appears in an error.
//   - Each method makes one request, bounded by its context and the
//     http.Client's timeout, and may be called from any goroutine.
//   - A non-2xx answer is an *APIError with the status, and the code and
//     message of its Error body; a body that is not an Error (a proxy's
//     page, plain text) still gives an *APIError holding the start of its
//     text.
//   - A 2xx answer whose body is not the expected JSON is an error saying
//     so; a body over MaxBodySize is refused with an error wrapping
//     ErrBodyTooLarge, without reading the rest.
//   - A transport failure or a cancelled context is an error wrapping the
//     cause, so errors.Is(err, context.Canceled) and the like hold.
package adminapi
