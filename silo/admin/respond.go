package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/granaryio/granary/silo/admin/adminapi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// statusClientClosed is the status of an answer to a request whose client
// went away first (nginx's 499): nobody reads it, but logs tell it apart.
const statusClientClosed = 499

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// The API's documents always encode; a failure is a bug here.
		writeError(w, http.StatusInternalServerError, codes.Internal, "encoding the answer: %v", err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
}

// writeText answers with one line of plain text.
func writeText(w http.ResponseWriter, code int, text string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, text)
}

// writeError answers with an adminapi.Error body.
func writeError(w http.ResponseWriter, httpStatus int, code codes.Code, format string, args ...any) {
	writeErrorCode(w, httpStatus, code.String(), fmt.Sprintf(format, args...))
}

// writeErrorCode answers with an adminapi.Error body whose code is a
// name, as a peer gave it.
func writeErrorCode(w http.ResponseWriter, httpStatus int, code, message string) {
	writeJSON(w, httpStatus, adminapi.Error{Code: code, Message: message})
}

// allow answers 405 and returns false unless r's method is method (or
// HEAD, when method is GET).
func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method && method == http.MethodPost && crossSite(r) {
		// A page on another site an operator has open must not be able
		// to drain or deactivate: browsers say where a request comes from.
		writeError(w, http.StatusForbidden, codes.PermissionDenied, "POST %s from another site (Origin %q): refused", r.URL.Path, r.Header.Get("Origin"))
		return false
	}
	if r.Method == method || (method == http.MethodGet && r.Method == http.MethodHead) {
		return true
	}
	allowed := method
	if method == http.MethodGet {
		allowed += ", " + http.MethodHead
	}
	w.Header().Set("Allow", allowed)
	writeError(w, http.StatusMethodNotAllowed, codes.Unimplemented, "%s %s: method not allowed; use %s", r.Method, r.URL.Path, method)
	return false
}

// crossSite reports whether a browser sent r from a page of another
// origin. Programs (granaryctl, the admin servers forwarding to each
// other) send neither header.
func crossSite(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err != nil || u.Host != r.Host
}

// queryParam returns the one value of the query parameter name, or
// answers 400 and returns false. what says what the value should be.
func queryParam(w http.ResponseWriter, r *http.Request, name, what string) (string, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, codes.InvalidArgument, "malformed query %q: %v", r.URL.RawQuery, err)
		return "", false
	}
	vs := q[name]
	switch {
	case len(vs) == 0 || (len(vs) == 1 && vs[0] == ""):
		writeError(w, http.StatusBadRequest, codes.InvalidArgument, "missing query parameter %s=%s", name, what)
		return "", false
	case len(vs) > 1:
		writeError(w, http.StatusBadRequest, codes.InvalidArgument, "query parameter %s given %d times; give it once", name, len(vs))
		return "", false
	}
	return vs[0], true
}

// httpStatus is the HTTP status that fits a gRPC code.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.FailedPrecondition:
		return http.StatusPreconditionFailed
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Canceled:
		return statusClientClosed
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// writeSiloError answers with the error of a call into the silo: its gRPC
// code when it has one, a context's end as such, else Internal.
func writeSiloError(w http.ResponseWriter, what string, err error) {
	code := codes.Internal
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	default:
		if st, ok := status.FromError(err); ok {
			code = st.Code()
		}
	}
	writeError(w, httpStatus(code), code, "%s: %v", what, err)
}

// writePeerError answers with the failure of a request forwarded to the
// silo member at addr. A refusal (4xx) is passed on as the peer gave it;
// anything else (the peer unreachable, timing out or failing) is 502.
func writePeerError(w http.ResponseWriter, member, addr string, err error) {
	var ae *adminapi.APIError
	if errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 {
		code := ae.Code
		if code == "" {
			code = codes.Unknown.String()
		}
		writeErrorCode(w, ae.Status, code, "silo "+member+": "+ae.Message)
		return
	}
	code := codes.Unavailable.String()
	if ae != nil && ae.Code != "" {
		code = ae.Code
	}
	if errors.Is(err, context.DeadlineExceeded) {
		code = codes.DeadlineExceeded.String()
	}
	writeErrorCode(w, http.StatusBadGateway, code, fmt.Sprintf("silo %s (admin %s) failed: %v", member, addr, err))
}
