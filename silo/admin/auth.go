package admin

// Who may do what on the admin server.
//
// Three kinds of path:
//
//   - open: /healthz, /readyz and /metrics, which probes and Prometheus
//     scrape without credentials, and the dashboard's static files, which
//     hold no cluster data (the page asks for a token and sends it with
//     its own requests).
//   - read: the JSON API's GETs and the event stream. Open while no admin
//     credentials are configured (Config.Tokens nil and CertAdmins
//     false); otherwise they need an admin's.
//   - write: deactivate, drain and unpark, which change the cluster.
//     With no admin credentials configured they are off (403 naming the
//     settings that turn them on): a silo is never drainable by whoever
//     reaches its port. Otherwise they need an admin's credentials (401
//     without).
//
// An admin's credentials are a bearer token that Config.Tokens knows
// (compared only through TokenFile.Lookup, which hashes), or, with
// CertAdmins, a client certificate the TLS handshake verified. Tokens
// travel only in the Authorization header, never in a URL: the dashboard
// reads the event stream with fetch, which can set the header, rather
// than EventSource, which cannot, so that no token lands in an access log
// or the browser's history.
//
// A request forwarded to another silo carries the caller's token, so the
// peer decides with the same token file; a caller admitted on a
// certificate is forwarded on this silo's own certificate (PeerTLS).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/granaryio/granary/security"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
)

// access is what a path needs.
type access int

const (
	accessOpen  access = iota // anyone
	accessRead                // an admin when admin credentials are configured, else anyone
	accessWrite               // an admin; off when no admin credentials are configured
)

// caller is who made a request, as authenticate found.
type caller struct {
	// principal names an admin: the token's principal, or the client
	// certificate's common name. "" for an anonymous caller.
	principal string
	// token is the bearer token the caller sent, to forward to peers; ""
	// when it came in on a certificate or with nothing.
	token string
	// via says how the caller was admitted: "token", "certificate" or
	// "" (anonymous).
	via string
}

type callerKey struct{}

// callerOf returns the caller a guard admitted r's handler for.
func callerOf(r *http.Request) caller {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c
}

// logFields name the caller in a log line.
func (c caller) logFields() []zap.Field {
	if c.via == "" {
		return []zap.Field{zap.String("principal", "anonymous")}
	}
	return []zap.Field{zap.String("principal", c.principal), zap.String("via", c.via)}
}

// authConfigured reports whether the server knows any admin credential.
func (s *Server) authConfigured() bool { return s.cfg.Tokens != nil || s.cfg.CertAdmins }

// errNoCredentials and errBadToken say why a request was not an admin's;
// their text never quotes a token.
var (
	errNoCredentials = errors.New("no admin credentials sent")
	errBadToken      = errors.New("the bearer token is not an admin token")
	errBadAuthHeader = errors.New("malformed Authorization header; want one \"Bearer TOKEN\"")
)

// authenticate finds the admin who sent r, or says why r is not an
// admin's. A certificate is looked at first: it cannot be replayed from a
// log the way a token can.
func (s *Server) authenticate(r *http.Request) (caller, error) {
	if p, ok := s.certPrincipal(r); ok {
		return caller{principal: p, via: "certificate"}, nil
	}
	token, err := bearerToken(r)
	if err != nil {
		return caller{}, err
	}
	if token == "" {
		return caller{}, errNoCredentials
	}
	if s.cfg.Tokens == nil {
		return caller{}, errBadToken
	}
	p, ok := s.cfg.Tokens.Lookup(token)
	if !ok {
		return caller{}, errBadToken
	}
	return caller{principal: p, token: token, via: "token"}, nil
}

// bearerToken returns the token of r's Authorization header: "" when
// there is none, an error when it is not one "Bearer TOKEN".
func bearerToken(r *http.Request) (string, error) {
	vs := r.Header.Values("Authorization")
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", errBadAuthHeader
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(vs[0]), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return "", errBadAuthHeader
	}
	return token, nil
}

// certPrincipal returns the common name of r's client certificate when
// CertAdmins is set and the handshake verified the certificate. crypto/tls
// fills VerifiedChains only when it verified the chain itself (ClientAuth
// VerifyClientCertIfGiven or RequireAndVerifyClientCert); tlsfiles
// verifies in VerifyConnection against a CA bundle it re-reads, so there
// a certificate present is one verified, which Listen checked
// (verifiesClientCerts).
func (s *Server) certPrincipal(r *http.Request) (string, bool) {
	if !s.cfg.CertAdmins || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "", false
	}
	if len(r.TLS.VerifiedChains) == 0 && !s.certsVerifiedByCallback {
		return "", false
	}
	leaf := r.TLS.PeerCertificates[0]
	if len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		leaf = r.TLS.VerifiedChains[0][0]
	}
	if cn := leaf.Subject.CommonName; cn != "" {
		return cn, true
	}
	return leaf.Subject.String(), true
}

// verifiesClientCerts reports whether a server with cfg asks for client
// certificates and verifies those it gets: crypto/tls itself, or a
// VerifyConnection or VerifyPeerCertificate callback (tlsfiles' way).
func verifiesClientCerts(cfg *tls.Config) bool {
	switch cfg.ClientAuth {
	case tls.VerifyClientCertIfGiven, tls.RequireAndVerifyClientCert:
		return true
	case tls.NoClientCert:
		return false
	}
	return verifiesByCallback(cfg)
}

// verifiesByCallback reports whether cfg verifies peer certificates in a
// callback rather than in crypto/tls.
func verifiesByCallback(cfg *tls.Config) bool {
	return cfg != nil && (cfg.VerifyConnection != nil || cfg.VerifyPeerCertificate != nil)
}

// guard wraps h so that it runs only for a caller level admits, and
// answers the refusal otherwise. The caller admitted is in the request's
// context (callerOf).
func (s *Server) guard(level access, h http.HandlerFunc) http.HandlerFunc {
	if level == accessOpen {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if level == accessWrite && !s.authConfigured() {
			s.cfg.Rejections.Reject(security.ListenerAdmin, security.ReasonPermissionDenied, r.RemoteAddr,
				fmt.Errorf("%s %s: admin actions are off", r.Method, r.URL.Path))
			writeError(w, http.StatusForbidden, codes.PermissionDenied, "%s %s is off: this admin server has no admin credentials configured; "+
				"set admin.token_file (env GRANARY_ADMIN_TOKEN_FILE) to a file of \"TOKEN PRINCIPAL\" lines, "+
				"or admit admin client certificates (admin.tls.mode tls or mtls with admin.tls.ca_file)", r.Method, r.URL.Path)
			return
		}
		if !s.authConfigured() {
			h(w, r)
			return
		}
		c, err := s.authenticate(r)
		if err != nil {
			s.cfg.Rejections.Reject(security.ListenerAdmin, security.ReasonUnauthenticated, r.RemoteAddr,
				fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, err))
			s.writeUnauthenticated(w, err)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	}
}

// writeUnauthenticated answers 401, saying what credentials would do.
func (s *Server) writeUnauthenticated(w http.ResponseWriter, why error) {
	var want []string
	if s.cfg.Tokens != nil {
		want = append(want, "\"Authorization: Bearer TOKEN\" with a token of admin.token_file")
	}
	if s.cfg.CertAdmins {
		want = append(want, "a client certificate from admin.tls.ca_file's CA")
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="granary-admin"`)
	writeError(w, http.StatusUnauthorized, codes.Unauthenticated, "%v; send %s", why, strings.Join(want, " or "))
}

// stillAdmin reports whether the caller admitted for r is still an admin:
// a long-lived request (the event stream) asks before each answer, so a
// token removed from the token file stops it within the file's check
// interval.
func (s *Server) stillAdmin(r *http.Request) bool {
	if !s.authConfigured() {
		return true
	}
	_, err := s.authenticate(r)
	return err == nil
}

// httpErrorLog receives net/http's server log lines: it counts failed
// TLS handshakes as refusals and logs the lines on.
type httpErrorLog struct {
	log *zap.Logger
	rej *security.Rejections
}

// tlsHandshakePrefix begins net/http's line for a failed TLS handshake:
// "http: TLS handshake error from ADDR: REASON".
const tlsHandshakePrefix = "http: TLS handshake error from "

// newHTTPErrorLog returns the http.Server's ErrorLog.
func newHTTPErrorLog(l *zap.Logger, rej *security.Rejections) *log.Logger {
	return log.New(&httpErrorLog{log: l, rej: rej}, "", 0)
}

func (h *httpErrorLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if rest, ok := strings.CutPrefix(line, tlsHandshakePrefix); ok {
		// ADDR holds no ": " (an IPv6 address is bracketed).
		remote, reason, _ := strings.Cut(rest, ": ")
		switch {
		case reason == "EOF" || strings.HasSuffix(reason, "connection reset by peer"):
			// A connection closed before its hello (a TCP probe): no
			// refusal, and nothing worth a warning.
			h.log.Debug(line)
			return len(p), nil
		case strings.Contains(reason, "HTTP request to an HTTPS server"):
			h.rej.Reject(security.ListenerAdmin, security.ReasonPlaintext, remote, errors.New(reason))
		default:
			h.rej.Reject(security.ListenerAdmin, security.HandshakeReason(errors.New(reason)), remote, errors.New(reason))
		}
		if h.rej != nil {
			return len(p), nil // Rejections logs it, rate-limited
		}
	}
	h.log.Warn(line)
	return len(p), nil
}
