package auth

import (
	"strings"
	"testing"
)

// FuzzParseTokens checks ParseTokens against a simple model of the file
// format: it never panics, what it takes is exactly the lines of two
// fields (each token then looks up to its principal), and its errors
// never quote a token.
//
//	go test -run '^$' -fuzz FuzzParseTokens -fuzztime 10s ./security/auth
func FuzzParseTokens(f *testing.F) {
	for _, seed := range []string{
		"",
		"# admins\n0123456789abcdef0123 ops\n",
		"0123456789abcdef0123 ops\n0123456789abcdef0123 ops2\n",
		"short ops\n",
		"0123456789abcdef0123\n",
		"0123456789abcdef0123 ops extra\n",
		"\t 0123456789abcdef0123\talice \r\n\n#x\nfedcba9876543210fedcba ci-bot",
		"0123456789abcdef0123 \xff\xfe\n",
		"0123456789abcdef\x7f0123 ops\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tokens, err := ParseTokens(data)
		if err != nil {
			if tokens != nil {
				t.Fatalf("ParseTokens returned tokens and %v", err)
			}
			if !strings.HasPrefix(err.Error(), "auth: ") {
				t.Fatalf("error %q does not name the package", err)
			}
			// A token has no white space and is at least MinTokenLength
			// long; no fixed part of an error has such a run, so only a
			// quoted principal may hold one.
			if !strings.Contains(err.Error(), "principal") {
				for _, line := range strings.Split(string(data), "\n") {
					if fs := strings.Fields(line); len(fs) > 0 && len(fs[0]) >= MinTokenLength && strings.Contains(err.Error(), fs[0]) {
						t.Fatalf("error %q quotes a token", err)
					}
				}
			}
			return
		}
		// The model: every line not blank nor a comment has two fields,
		// and each token looks up to its principal.
		n := 0
		for _, line := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			fs := strings.Fields(line)
			if len(fs) != 2 {
				t.Fatalf("line %q of %d fields was taken", line, len(fs))
			}
			if p, ok := tokens.Lookup(fs[0]); !ok || p != fs[1] {
				t.Fatalf("Lookup(token of %q) = %q, %v; want %q", line, p, ok, fs[1])
			}
			n++
		}
		if tokens.Len() != n {
			t.Fatalf("Len %d, want %d lines", tokens.Len(), n)
		}
	})
}
