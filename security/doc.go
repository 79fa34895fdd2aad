// Package security counts and reports what a silo's listeners refuse:
// failed TLS handshakes, certificates from another CA, gossip from another
// cluster or under another key, malformed frames, failed authentication
// and authorization, connections over a cap. Each refusal is counted in
// granary_rejected_total{listener,reason} and logged as a warning that
// names the remote address, at most once per listener and reason in a
// WarnInterval, with the count of those left unlogged.
//
// Its sub-packages are the rest of Granary's security kit:
// security/tlsfiles builds TLS configurations from PEM files and re-reads
// them when they change; security/certs issues a CA and the certificates
// of silos and clients; security/auth authenticates gateway callers.
//
// The package imports only zap, gRPC's credentials and the Prometheus
// client: every listener of the silo, the client and the admin server may
// import it.
package security
