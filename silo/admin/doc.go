// Package admin is a silo's admin HTTP server: the liveness and readiness
// probes, the Prometheus metrics, the JSON API of package adminapi, and a
// dashboard page that shows the whole cluster live.
//
// A host program starts the server before the silo, so that the address it
// picked can be gossiped to the other silos, and attaches the silo once it
// is made:
//
//	srv, err := admin.Listen(admin.Config{Listen: ":8080", Gatherer: reg, Drain: stop})
//	cfg.AdminAddr = srv.Addr() // or the address others reach it at
//	sl, err := silo.New(cfg)
//	srv.Attach(sl, m)
//	err = sl.Start(ctx)
//	...
//	srv.Stop(ctx)
//
// The contract:
//
//   - Listen validates the Config (an error names the field), binds and
//     serves at once. /healthz answers 200 from then on; /readyz answers
//     503 "not attached" until Attach, then 200 once the silo is ready
//     (silo.Ready) and 503 with its reason otherwise. Every /api/ path
//     answers 503 Unavailable until Attach; /metrics and the dashboard
//     need no silo.
//   - Every answer outside 2xx has an adminapi.Error body: the name of the
//     gRPC code that fits, and a message naming the bad value. A malformed
//     grain ID is 400, an unknown grain type or silo 404, a wrong method
//     405 (with an Allow header), a failed peer 502. Nothing a request
//     sends makes the server panic or hang: work for another silo is
//     bounded by Config.PeerTimeout.
//   - A sampler, started by Attach, takes the silo's hottest grains
//     (silo.HotGrains) and the per-type call and error counts every
//     SampleInterval; rates in the reports are the last interval's.
//   - The cluster report asks every other live member's admin server (the
//     AdminAddr each gossips) at once, each within PeerTimeout; a member
//     that does not answer is listed as unreachable, never left out
//     silently and never waited on past the timeout.
//   - Access (auth.go): /healthz, /readyz, /metrics and the dashboard's
//     static files are open. With Config.Tokens or Config.CertAdmins set,
//     everything else needs an admin's credentials (a bearer token of the
//     token file, or a verified client certificate): 401 with
//     WWW-Authenticate: Bearer without them. With neither set, reading is
//     open and deactivate, drain and unpark are off: 403 naming
//     admin.token_file and admin.tls. Each refusal is counted in
//     Config.Rejections. A token removed from the token file is refused
//     within the file's check interval, and ends an event stream it
//     opened at the next event. Tokens are taken from the Authorization
//     header only, never from a URL.
//   - With Config.TLS the server serves HTTPS only (h2 and http/1.1);
//     with Config.PeerTLS it speaks https to the other silos. A request
//     forwarded to another silo carries the caller's token.
//   - A POST that a browser marks as coming from another site (its
//     Origin names another host, or Sec-Fetch-Site says cross-site or
//     same-site) is refused with 403, so a page an operator has open
//     elsewhere cannot drain the silo or deactivate grains.
//   - Deactivate and drain requests that concern another silo are
//     forwarded to its admin server; the answer says which silo acted.
//     Config.Drain is called at most once, on the request's goroutine.
//   - Streams (streams.go): the stream list asks every other live
//     member's admin server for its own streams as the cluster report
//     does, each within PeerTimeout, and merges them, those that most
//     need an operator first (parked subscriptions, then events waiting),
//     up to the query's limit. Unpark calls the stream's grain through
//     the silo, wherever the stream is active; it needs no forwarding.
//     Each silo's report sums up its streams, with the few that most
//     need an operator, which the dashboard shows.
//   - The event stream (adminapi.PathEvents) sends the cluster report at
//     once and then every EventInterval, until the client goes away or
//     the server stops.
//   - Stop shuts the HTTP server down gracefully (ending event streams
//     first), stops the sampler, and waits for every goroutine the server
//     started. It may be called more than once and from any goroutine.
//
// The dashboard (GET /) is a page of plain HTML, CSS and JavaScript
// embedded in the binary; it loads nothing from elsewhere and follows the
// event stream (read with fetch, so that it can send the token), falling
// back to polling the cluster report when the stream fails. When the
// server answers 401, the page asks for the token, keeps it in the tab's
// sessionStorage and sends it as a bearer token.
package admin
