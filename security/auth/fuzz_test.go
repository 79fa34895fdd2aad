package auth

import (
	"errors"
	"strings"
	"testing"
)

// fuzzToken is the one token the fuzzed lookups know.
const fuzzToken = "fuzz-token-0123456789"

// FuzzBearerToken feeds arbitrary authorization values to BearerToken
// and to a Bearer authenticator: neither panics, a token is accepted
// only when it is exactly the known one after the Bearer scheme, every
// refusal wraps ErrNoCredentials or ErrInvalidCredentials, and no error
// quotes what was sent as a token.
//
//	go test -run '^$' -fuzz FuzzBearerToken -fuzztime 10s ./security/auth
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{
		"Bearer " + fuzzToken, "bearer " + fuzzToken, "BEARER  " + fuzzToken + " ", "Basic dXNlcjpwYXNz",
		"Bearer", "Bearer ", "Bearer a b", "Bearer \x00" + fuzzToken, "Bearer " + strings.Repeat("A", MaxTokenLength+1),
		"", " Bearer " + fuzzToken, "Bearer\t" + fuzzToken, "Bearer " + fuzzToken + "\n",
	} {
		f.Add(s, "", false)
	}
	f.Add("Bearer "+fuzzToken, "Bearer "+fuzzToken, true)
	tokens, err := ParseTokens([]byte(fuzzToken + " fuzzer\n"))
	if err != nil {
		f.Fatal(err)
	}
	a := Bearer(tokens)
	f.Fuzz(func(t *testing.T, v1, v2 string, two bool) {
		vals := []string{v1}
		if two {
			vals = append(vals, v2)
		}
		tok, err := BearerToken(vals)
		if err == nil {
			if tok == "" || two || !strings.Contains(v1, tok) {
				t.Fatalf("BearerToken(%q) = %q: a token from two values, an empty one, or one not sent", vals, tok)
			}
			for i := 0; i < len(tok); i++ {
				if !token68(tok[i]) {
					t.Fatalf("BearerToken(%q) = %q, which holds %q", vals, tok, tok[i])
				}
			}
		} else if !errors.Is(err, ErrNoCredentials) && !errors.Is(err, ErrInvalidCredentials) {
			t.Fatalf("BearerToken(%q): %v wraps neither sentinel", vals, err)
		}
		p, aerr := a.Authenticate(&Request{Authorization: vals})
		switch {
		case aerr == nil && (p != "fuzzer" || tok != fuzzToken):
			t.Fatalf("Authenticate(%q) = %q for the token %q", vals, p, tok)
		case aerr != nil && err == nil && tok == fuzzToken:
			t.Fatalf("Authenticate(%q) refused the known token: %v", vals, aerr)
		}
		for _, e := range []error{err, aerr} {
			if e == nil {
				continue
			}
			for _, v := range vals {
				if _, sent, _ := strings.Cut(v, " "); len(strings.TrimSpace(sent)) >= MinTokenLength && strings.Contains(e.Error(), strings.TrimSpace(sent)) {
					t.Fatalf("error %q quotes the token sent", e)
				}
			}
		}
	})
}
