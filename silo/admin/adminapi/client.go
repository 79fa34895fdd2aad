package adminapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout bounds each request of a Client made without an
// http.Client of its own.
const DefaultTimeout = 10 * time.Second

// MaxBodySize is the largest response body a Client accepts, in bytes. A
// silo's reports are far smaller; a larger body means the address does not
// serve the admin API, and the Client refuses it rather than read it all.
const MaxBodySize = 16 << 20

// maxErrorText is how much of a non-2xx answer's body becomes an
// APIError's Message: enough for any message the API sends, and a useful
// start of whatever else a proxy or a stray server answers with.
const maxErrorText = 4 << 10

// ErrBodyTooLarge is wrapped by the error of a request whose answer has a
// body over MaxBodySize.
var ErrBodyTooLarge = errors.New("adminapi: response body over 16 MiB")

// APIError is a non-2xx answer of the admin API. Code and Message come from
// the answer's Error body; when the body is not one, Code is empty and
// Message holds the start of the body's text (empty when the body is).
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the gRPC code's name the server gave, e.g. "NotFound".
	Code string
	// Message says what failed.
	Message string
}

// Error says the HTTP status, the code when there is one, and the message.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("adminapi: ")
	b.WriteString(strconv.Itoa(e.Status))
	if text := http.StatusText(e.Status); text != "" {
		b.WriteByte(' ')
		b.WriteString(text)
	}
	if e.Code != "" {
		b.WriteString(" (")
		b.WriteString(e.Code)
		b.WriteByte(')')
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Client calls the admin API of one silo. Its methods may be called from
// any goroutine at once; each makes one HTTP request, bounded by its
// context and by the http.Client's timeout.
type Client struct {
	base *url.URL // scheme, host and an optional path prefix without a trailing '/'
	hc   *http.Client
	// auth is the Authorization header's value, "" for none. It is never
	// part of an error's text.
	auth string
	// authErr, when set, fails every request: WithToken was given a
	// token that cannot be sent.
	authErr error
}

// ClientOptions are the optional settings of NewClientWith. The zero
// value is NewClient's plain HTTP client without a token.
type ClientOptions struct {
	// HTTPClient sends the requests. Nil: an http.Client with
	// DefaultTimeout whose transport uses TLS below.
	HTTPClient *http.Client
	// TLS, when not nil, means the admin server serves HTTPS: a host:port
	// address is spoken to over https, and an http:// URL is an error
	// rather than a token sent in the clear. It configures the transport
	// made when HTTPClient is nil; a caller that passes HTTPClient too
	// must have given its transport this configuration.
	TLS *tls.Config
	// Token, when not empty, is sent with every request as
	// "Authorization: Bearer TOKEN": an admin token of the silo's
	// admin.token_file.
	Token string
}

// NewClient returns a Client for the admin server at addr, which is either
// host:port (spoken to over plain HTTP) or an http:// or https:// URL,
// optionally with a path prefix under which a proxy serves the API. hc
// sends the requests; nil means an http.Client with DefaultTimeout. An
// addr that is neither form is an error naming it.
func NewClient(addr string, hc *http.Client) (*Client, error) {
	return NewClientWith(addr, ClientOptions{HTTPClient: hc})
}

// NewClientWith is NewClient with a TLS configuration and a bearer token:
// see ClientOptions.
func NewClientWith(addr string, o ClientOptions) (*Client, error) {
	base, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	if o.TLS != nil {
		switch {
		case !strings.Contains(addr, "://"):
			base.Scheme = "https"
		case base.Scheme != "https":
			return nil, fmt.Errorf("adminapi: admin address %q: TLS is configured, so the URL must be https://", addr)
		}
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
		if o.TLS != nil {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.TLSClientConfig = o.TLS.Clone()
			// A TLSClientConfig of our own turns HTTP/2 off unless asked.
			tr.ForceAttemptHTTP2 = true
			hc.Transport = tr
		}
	}
	c := &Client{base: base, hc: hc}
	if o.Token != "" {
		if c, err = c.withToken(o.Token); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// WithToken returns a copy of c that sends token with every request as
// "Authorization: Bearer TOKEN"; an empty token sends none. A token that
// cannot be a header's value (white space, control or non-ASCII
// characters) gives a Client whose every request fails saying so; the
// error never quotes the token.
func (c *Client) WithToken(token string) *Client {
	out, err := c.withToken(token)
	if err != nil {
		out = &Client{base: c.base, hc: c.hc, authErr: err}
	}
	return out
}

// errBadToken is the failure of a request of a Client with a bad token.
var errBadToken = errors.New("adminapi: the token has characters a bearer token cannot hold (white space, control or non-ASCII); check the token file")

func (c *Client) withToken(token string) (*Client, error) {
	out := *c
	out.auth, out.authErr = "", nil
	if token == "" {
		return &out, nil
	}
	for i := 0; i < len(token); i++ {
		if b := token[i]; b < 0x21 || b > 0x7e {
			return nil, errBadToken
		}
	}
	out.auth = "Bearer " + token
	return &out, nil
}

// parseAddr turns an admin address into the base URL of its API.
func parseAddr(addr string) (*url.URL, error) {
	bad := func(why string) error {
		return fmt.Errorf("adminapi: admin address %q: %s", addr, why)
	}
	if addr == "" {
		return nil, bad("empty; want host:port or an http(s) URL")
	}
	if strings.ContainsAny(addr, " \t\r\n") {
		return nil, bad("contains white space")
	}
	if !strings.Contains(addr, "://") {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, bad("want host:port or an http(s) URL")
		}
		if err := checkPort(port); err != nil {
			return nil, bad(err.Error())
		}
		if host == "" {
			// ":8080", as a listen address is written, means this host.
			host = "localhost"
		}
		return &url.URL{Scheme: "http", Host: net.JoinHostPort(host, port)}, nil
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, bad("not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, bad("scheme " + strconv.Quote(u.Scheme) + " is not http or https")
	case u.Hostname() == "":
		return nil, bad("no host")
	case u.User != nil:
		return nil, bad("user information is not supported")
	case u.RawQuery != "" || u.ForceQuery:
		return nil, bad("a query is not allowed")
	case u.Fragment != "":
		return nil, bad("a fragment is not allowed")
	}
	if port := u.Port(); port != "" || strings.HasSuffix(u.Host, ":") {
		if err := checkPort(port); err != nil {
			return nil, bad(err.Error())
		}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// checkPort reports whether port is a TCP port number.
func checkPort(port string) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// URL returns the base URL the Client sends its requests to, e.g.
// "http://10.0.0.7:8080".
func (c *Client) URL() string { return c.base.String() }

// Silo returns the report of the silo the Client speaks to.
func (c *Client) Silo(ctx context.Context) (SiloReport, error) {
	var r SiloReport
	err := c.call(ctx, http.MethodGet, PathSilo, nil, &r)
	return r, err
}

// Cluster returns the report of the cluster, as gathered by the silo the
// Client speaks to.
func (c *Client) Cluster(ctx context.Context) (ClusterReport, error) {
	var r ClusterReport
	err := c.call(ctx, http.MethodGet, PathCluster, nil, &r)
	return r, err
}

// Lookup says where the grain TYPE/KEY is active.
func (c *Client) Lookup(ctx context.Context, grain string) (Location, error) {
	var r Location
	if grain == "" {
		return r, errors.New("adminapi: Lookup: empty grain ID; want TYPE/KEY")
	}
	err := c.call(ctx, http.MethodGet, PathLookup, url.Values{"grain": {grain}}, &r)
	return r, err
}

// Deactivate deactivates the grain TYPE/KEY wherever in the cluster it is
// active.
func (c *Client) Deactivate(ctx context.Context, grain string) (Deactivation, error) {
	var r Deactivation
	if grain == "" {
		return r, errors.New("adminapi: Deactivate: empty grain ID; want TYPE/KEY")
	}
	err := c.call(ctx, http.MethodPost, PathDeactivate, url.Values{"grain": {grain}}, &r)
	return r, err
}

// Drain asks the silo named silo (its name or member ID) to hand its grains
// over and leave the cluster. The reply says which silo took the request;
// the silo leaves after it answered.
func (c *Client) Drain(ctx context.Context, silo string) (DrainReply, error) {
	var r DrainReply
	if silo == "" {
		return r, errors.New("adminapi: Drain: empty silo; want a name or member ID")
	}
	err := c.call(ctx, http.MethodPost, PathDrain, url.Values{"silo": {silo}}, &r)
	return r, err
}

// Ready asks whether the silo serves calls: nil when its readiness probe
// answers 200, else an error that carries the probe's answer (an *APIError
// when the server answered).
func (c *Client) Ready(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, PathReadyz, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	return readAPIError(resp)
}

// call makes one request and decodes a 2xx answer's JSON body into out.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, out any) error {
	resp, err := c.do(ctx, method, path, query)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return readAPIError(resp)
	}
	body, err := readBody(resp, MaxBodySize)
	if err != nil {
		return fmt.Errorf("adminapi: %s %s: %w", method, c.endpoint(path), err)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("adminapi: %s %s: decoding the answer: %w", method, c.endpoint(path), err)
	}
	return nil
}

// do sends one request without a body and returns the answer, whose body
// the caller closes.
func (c *Client) do(ctx context.Context, method, path string, query url.Values) (*http.Response, error) {
	u := *c.base
	u.Path = c.base.Path + path
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), http.NoBody)
	if err != nil {
		return nil, fmt.Errorf("adminapi: %s %s: %w", method, c.endpoint(path), err)
	}
	req.Header.Set("Accept", "application/json")
	if c.authErr != nil {
		return nil, c.authErr
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// The *url.Error names the method and the URL.
		return nil, fmt.Errorf("adminapi: %w", err)
	}
	return resp, nil
}

// endpoint names path on the Client's server, for error messages.
func (c *Client) endpoint(path string) string {
	return c.base.String() + path
}

// readBody reads resp's body, refusing one over limit bytes.
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("%w (Content-Length %d)", ErrBodyTooLarge, resp.ContentLength)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if int64(len(body)) > limit {
		return nil, ErrBodyTooLarge
	}
	return body, nil
}

// readAPIError turns a non-2xx answer into an *APIError: the Error body's
// code and message, or else the start of the body's text.
func readAPIError(resp *http.Response) error {
	e := &APIError{Status: resp.StatusCode}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorText+1))
	truncated := len(body) > maxErrorText
	if truncated {
		body = body[:maxErrorText]
	}
	var eb Error
	if !truncated && json.Unmarshal(body, &eb) == nil && (eb.Code != "" || eb.Message != "") {
		e.Code, e.Message = eb.Code, eb.Message
		return e
	}
	e.Message = strings.TrimSpace(string(bytes.ToValidUTF8(body, []byte("\uFFFD"))))
	if truncated {
		e.Message += " …"
	}
	return e
}
