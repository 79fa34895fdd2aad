package auth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// A Request is what an Authenticator sees of one call: the credentials it
// carries, in a form that does not depend on gRPC or HTTP, so that the
// gateway and the admin server share authenticators.
type Request struct {
	// Authorization holds the values of the call's "authorization"
	// metadata (gRPC) or header (HTTP), in the order sent; nil when none.
	Authorization []string
	// PeerCertificates is the client's TLS certificate chain, leaf first,
	// as the listener's TLS configuration verified it; nil on plaintext or
	// when the client presented none. The caller that fills it in vouches
	// for the verification: a listener configured by package tlsfiles
	// verifies every certificate it accepts (in VerifyConnection, so that
	// tls.ConnectionState.VerifiedChains stays empty), as does crypto/tls
	// with ClientAuth VerifyClientCertIfGiven or RequireAndVerifyClientCert.
	// A configuration that accepts certificates unverified (ClientAuth
	// RequireAnyClientCert or RequestClientCert without a
	// VerifyConnection) must not be used with ClientCert.
	PeerCertificates []*x509.Certificate
}

// An Authenticator tells who is calling. Authenticate returns the
// principal that r proves, or an error: ErrNoCredentials (or an error
// wrapping it) when r carries no credentials of the kind it reads, so that
// Chain may try the next one; any other error when r carries credentials
// that fail (an unknown or revoked token, a certificate without a name),
// which refuses the call. The principal "" is the anonymous caller, which
// only Anonymous returns.
//
// Authenticate may be called from any goroutine, many at once. It must not
// block: the gateway calls it on a client stream's reader goroutine for
// every request the stream carries, so that a revoked credential stops
// working on streams already open. Errors must never quote a secret.
type Authenticator interface {
	Authenticate(r *Request) (principal string, err error)
}

// AuthenticatorFunc is a function as an Authenticator.
type AuthenticatorFunc func(r *Request) (string, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(r *Request) (string, error) { return f(r) }

// Errors of the authenticators; each refusal wraps one.
var (
	// ErrNoCredentials: the request carries no credentials of the kind
	// the authenticator reads.
	ErrNoCredentials = errors.New("auth: no credentials")
	// ErrInvalidCredentials: the request carries credentials that do not
	// prove a principal.
	ErrInvalidCredentials = errors.New("auth: invalid credentials")
)

// Chain returns an Authenticator that asks each of as in order: the first
// to return a principal decides; one that returns ErrNoCredentials passes
// the request on to the next; any other error refuses the request at once,
// without asking the rest, so a bad token is refused even when a later
// authenticator would have let the caller in anonymously. When every one
// finds no credentials, the error wraps ErrNoCredentials and names what
// was looked for.
//
// The host builds the gateway's from its configuration, for example
// Chain(ClientCert(), Bearer(tokenFile)): a client certificate, else a
// bearer token. Append Anonymous() to let callers without credentials in
// as "" and leave the decision to grain filters.
func Chain(as ...Authenticator) Authenticator {
	as = append([]Authenticator(nil), as...)
	return AuthenticatorFunc(func(r *Request) (string, error) {
		var none []string
		for _, a := range as {
			p, err := a.Authenticate(r)
			switch {
			case err == nil:
				return p, nil
			case errors.Is(err, ErrNoCredentials):
				none = append(none, strings.TrimPrefix(err.Error(), "auth: "))
			default:
				return "", err
			}
		}
		if len(none) == 0 {
			return "", ErrNoCredentials
		}
		return "", fmt.Errorf("auth: no credentials (%s): %w", strings.Join(none, "; "), ErrNoCredentials)
	})
}

// Anonymous returns an Authenticator that lets every caller in as the
// anonymous principal "". Put it last in a Chain.
func Anonymous() Authenticator {
	return AuthenticatorFunc(func(*Request) (string, error) { return "", nil })
}

// A TokenLookup maps a bearer token to its principal: *Tokens (a token
// file read once) and *TokenFile (re-read when it changes) are ones.
type TokenLookup interface {
	Lookup(token string) (principal string, ok bool)
}

// Bearer returns an Authenticator of bearer tokens ("authorization:
// Bearer TOKEN", RFC 6750) looked up in tokens. A request without an
// authorization value, or with one of another scheme, carries no
// credentials for it; an unknown token (revoked, say) or a malformed or
// repeated authorization value is refused. With a *TokenFile, a token
// removed from the file is refused within its check interval, on streams
// already open too.
func Bearer(tokens TokenLookup) Authenticator {
	return AuthenticatorFunc(func(r *Request) (string, error) {
		token, err := BearerToken(r.Authorization)
		if err != nil {
			return "", err
		}
		p, ok := tokens.Lookup(token)
		if !ok {
			return "", fmt.Errorf("auth: unknown or revoked bearer token: %w", ErrInvalidCredentials)
		}
		return p, nil
	})
}

// BearerToken returns the token of the authorization values vals (one
// "Bearer TOKEN", the scheme in any case, RFC 7235). No value, or one of
// another scheme, is an error wrapping ErrNoCredentials; more than one
// value, a bearer value without a token, or a token of characters a
// token cannot hold (outside RFC 6750's token68 set) is an error wrapping
// ErrInvalidCredentials. Errors never quote the token.
func BearerToken(vals []string) (string, error) {
	switch len(vals) {
	case 0:
		return "", fmt.Errorf("auth: no bearer token: %w", ErrNoCredentials)
	case 1:
	default:
		return "", fmt.Errorf("auth: %d authorization values; send one: %w", len(vals), ErrInvalidCredentials)
	}
	v := vals[0]
	scheme, token, _ := strings.Cut(strings.TrimLeft(v, " \t"), " ")
	if !strings.EqualFold(scheme, "bearer") {
		return "", fmt.Errorf("auth: no bearer token (the authorization is not of the Bearer scheme): %w", ErrNoCredentials)
	}
	token = strings.Trim(token, " \t")
	if token == "" {
		return "", fmt.Errorf("auth: a Bearer authorization without a token: %w", ErrInvalidCredentials)
	}
	if len(token) > MaxTokenLength {
		return "", fmt.Errorf("auth: the bearer token is %d characters; at most %d: %w", len(token), MaxTokenLength, ErrInvalidCredentials)
	}
	for i := 0; i < len(token); i++ {
		if !token68(token[i]) {
			return "", fmt.Errorf("auth: the bearer token holds a character a token cannot: %w", ErrInvalidCredentials)
		}
	}
	return token, nil
}

// token68 reports whether c may appear in an RFC 6750 b64token: letters,
// digits and -._~+/=. Token files allow any printable ASCII without
// spaces, so this is applied only to what arrives, where it keeps control
// characters and spaces out of the lookup and of any log.
func token68(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~+/=", c) >= 0
}

// ClientCert returns an Authenticator of TLS client certificates: the
// principal is the subject common name of the client's leaf certificate.
// The common name, not a subject alternative name, because it is the one
// name every certificate Granary's tooling issues carries (package certs
// sets it for clients and silos alike), and a SAN list has no first
// element that means "who": DNS names and IPs say where a host is. A
// request without a certificate carries no credentials for it; a
// certificate whose common name is empty, or not printable UTF-8 without
// spaces, or longer than MaxPrincipalLength, is refused.
//
// It trusts Request.PeerCertificates as verified (see Request): give the
// gateway TLS credentials that verify client certificates, such as those
// of tlsfiles' ServerConfig in mode tls with a CA, or mtls.
func ClientCert() Authenticator {
	return AuthenticatorFunc(func(r *Request) (string, error) {
		if len(r.PeerCertificates) == 0 || r.PeerCertificates[0] == nil {
			return "", fmt.Errorf("auth: no client certificate: %w", ErrNoCredentials)
		}
		cn := r.PeerCertificates[0].Subject.CommonName
		switch {
		case cn == "":
			return "", fmt.Errorf("auth: the client certificate has no subject common name: %w", ErrInvalidCredentials)
		case len(cn) > MaxPrincipalLength:
			return "", fmt.Errorf("auth: the client certificate's common name is %d bytes; at most %d: %w", len(cn), MaxPrincipalLength, ErrInvalidCredentials)
		case !validPrincipal(cn):
			return "", fmt.Errorf("auth: the client certificate's common name %q is not printable UTF-8 without spaces: %w", cn, ErrInvalidCredentials)
		}
		return cn, nil
	})
}
