package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/granaryio/granary/internal/reload"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
)

// Limits of a token file.
const (
	// MinTokenLength is the shortest token accepted: 16 characters of a
	// random token are beyond guessing.
	MinTokenLength = 16
	// MaxTokenLength and MaxPrincipalLength bound a line's fields.
	MaxTokenLength     = 512
	MaxPrincipalLength = 256
	// MaxTokenFileSize bounds the file.
	MaxTokenFileSize = 4 << 20
)

// Tokens maps bearer tokens to principals. Tokens are held by their
// SHA-256, so a lookup's time says nothing about how much of a guess was
// right, and a heap dump holds no token.
type Tokens struct {
	byHash map[[sha256.Size]byte]string
}

// Len returns how many tokens there are.
func (t *Tokens) Len() int { return len(t.byHash) }

// Lookup returns the principal of token, or false.
func (t *Tokens) Lookup(token string) (string, bool) {
	if t == nil || len(token) < MinTokenLength || len(token) > MaxTokenLength {
		return "", false
	}
	p, ok := t.byHash[sha256.Sum256([]byte(token))]
	return p, ok
}

// ParseTokens reads a token file: one "TOKEN PRINCIPAL" a line, separated
// by spaces or tabs; blank lines and lines starting with # are ignored.
// A token is at least MinTokenLength printable ASCII characters without
// spaces; a principal is printable UTF-8 without spaces. A token listed
// twice is an error, and every error names its line, never quoting a
// token.
func ParseTokens(data []byte) (*Tokens, error) {
	if len(data) > MaxTokenFileSize {
		return nil, fmt.Errorf("auth: the token file is %d bytes; at most %d", len(data), MaxTokenFileSize)
	}
	t := &Tokens{byHash: map[[sha256.Size]byte]string{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxTokenFileSize)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("auth: token file line %d: has %d fields; want TOKEN PRINCIPAL", n, len(f))
		}
		token, principal := f[0], f[1]
		switch {
		case len(token) < MinTokenLength:
			return nil, fmt.Errorf("auth: token file line %d: the token is %d characters; at least %d", n, len(token), MinTokenLength)
		case len(token) > MaxTokenLength:
			return nil, fmt.Errorf("auth: token file line %d: the token is %d characters; at most %d", n, len(token), MaxTokenLength)
		case strings.IndexFunc(token, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0:
			return nil, fmt.Errorf("auth: token file line %d: the token is not printable ASCII", n)
		case len(principal) > MaxPrincipalLength:
			return nil, fmt.Errorf("auth: token file line %d: the principal is %d bytes; at most %d", n, len(principal), MaxPrincipalLength)
		case !validPrincipal(principal):
			return nil, fmt.Errorf("auth: token file line %d: the principal %q is not printable UTF-8", n, principal)
		}
		h := sha256.Sum256([]byte(token))
		if _, dup := t.byHash[h]; dup {
			return nil, fmt.Errorf("auth: token file line %d: the token is listed twice", n)
		}
		t.byHash[h] = principal
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth: token file: %w", err)
	}
	return t, nil
}

func validPrincipal(p string) bool {
	if p == "" {
		return false
	}
	for _, r := range p {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// DefaultCheckInterval is how often at most a TokenFile re-reads its
// file: a token removed from it is refused within about this long.
const DefaultCheckInterval = time.Second

// TokenFile is a token file re-read when it changes: a lookup checks the
// file first when a check is due (at most once per interval), so a token
// added or revoked takes effect within an interval, with no goroutine. A
// change that does not parse is logged and the tokens in use are kept.
// Its methods may be called from any goroutine.
type TokenFile struct {
	path string
	cur  *reload.Value[*Tokens]
}

// TokenFileOptions tune a TokenFile.
type TokenFileOptions struct {
	// CheckInterval: DefaultCheckInterval when 0.
	CheckInterval time.Duration
	Logger        *zap.Logger
	Clock         clockwork.Clock
}

// LoadTokenFile reads path, which must parse.
func LoadTokenFile(path string, o TokenFileOptions) (*TokenFile, error) {
	if path == "" {
		return nil, errors.New("auth: no token file named")
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	f := &TokenFile{path: path}
	var err error
	f.cur, err = reload.New(reload.Options[*Tokens]{
		Read: f.read,
		Parse: func(raw []byte) (*Tokens, error) {
			t, err := ParseTokens(raw)
			if err != nil {
				return nil, fmt.Errorf("%w (%s)", err, path)
			}
			return t, nil
		},
		Interval: o.CheckInterval,
		Clock:    o.Clock,
		Logger:   o.Logger,
		Failed:   "token file changed but cannot be used: keeping the tokens in use",
		Loaded:   "token file re-read",
		Fields: func(t *Tokens) []zap.Field {
			return []zap.Field{zap.String("file", path), zap.Int("tokens", t.Len())}
		},
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Path returns the file's path.
func (f *TokenFile) Path() string { return f.path }

// Lookup returns the principal of token, after re-reading the file when a
// check is due.
func (f *TokenFile) Lookup(token string) (string, bool) {
	return f.Tokens().Lookup(token)
}

// Tokens returns the tokens in use, after re-reading the file when a
// check is due.
func (f *TokenFile) Tokens() *Tokens { return f.cur.Get() }

// Check re-reads the file now, returning the error that kept a change
// out.
func (f *TokenFile) Check() error { return f.cur.Check() }

func (f *TokenFile) read() ([]byte, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, fmt.Errorf("auth: token file: %w", err)
	}
	defer fh.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(fh, MaxTokenFileSize+1)); err != nil {
		return nil, fmt.Errorf("auth: token file %s: %w", f.path, err)
	}
	return buf.Bytes(), nil
}

// ReadToken reads the token a client sends from path: the first field of
// the first line that is neither blank nor a comment, so the file may hold
// the token alone or be a silo's token file ("TOKEN PRINCIPAL" lines).
// Errors never quote the file's contents.
func ReadToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("auth: token file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxTokenFileSize+1))
	if err != nil {
		return "", fmt.Errorf("auth: token file: %w", err)
	}
	if len(data) > MaxTokenFileSize {
		return "", fmt.Errorf("auth: the token file is over %d bytes", MaxTokenFileSize)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxTokenFileSize)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		token := strings.Fields(line)[0]
		if strings.IndexFunc(token, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
			return "", errors.New("auth: the token has characters other than printable ASCII")
		}
		return token, nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("auth: token file: %w", err)
	}
	return "", errors.New("auth: the token file holds no token: every line is blank or a comment")
}
