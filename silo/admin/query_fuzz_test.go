package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"google.golang.org/grpc/codes"
)

// FuzzAdminQuery feeds the admin API's request parsing a raw query and an
// Authorization header: queryParam must take exactly one non-empty value
// or answer 400 with an Error body, a grain it takes must parse or be
// refused, and bearerToken must yield a token without white space or an
// error. Nothing may panic.
//
//	go test -run '^$' -fuzz FuzzAdminQuery -fuzztime 10s ./silo/admin
func FuzzAdminQuery(f *testing.F) {
	for _, seed := range []struct{ query, auth string }{
		{"grain=probe.Probe/a", "Bearer test-admin-token-0123456789"},
		{"grain=probe.Probe/a&grain=probe.Probe/b", ""},
		{"grain=%zz", "bearer  x"},
		{"grain=", "Basic abc"},
		{"silo=silo-a-17", "Bearer"},
		{"grain=a%2Fb%2Fc;x=1", "Bearer a b"},
		{"=&&=grain", "Bearer\ttoken-with-tab"},
	} {
		f.Add(seed.query, seed.auth)
	}
	f.Fuzz(func(t *testing.T, rawQuery, authHeader string) {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/lookup", nil)
		r.URL.RawQuery = rawQuery
		if authHeader != "" {
			r.Header.Set("Authorization", authHeader)
		}

		w := httptest.NewRecorder()
		v, ok := queryParam(w, r, "grain", "TYPE/KEY")
		if ok {
			q, err := url.ParseQuery(rawQuery)
			if err != nil || len(q["grain"]) != 1 || q["grain"][0] != v || v == "" {
				t.Fatalf("queryParam(%q) took %q; the query parses to %v, %v", rawQuery, v, q, err)
			}
			if w.Code != http.StatusOK || w.Body.Len() != 0 {
				t.Fatalf("queryParam(%q) took a value and answered %d", rawQuery, w.Code)
			}
			if id, err := grain.ParseID(v); err == nil && (id.Type == "" || id.Key == "" || !strings.Contains(v, "/")) {
				t.Fatalf("grain.ParseID(%q) = %+v with an empty part", v, id)
			}
		} else {
			if w.Code != http.StatusBadRequest {
				t.Fatalf("queryParam(%q) refused with %d, want 400", rawQuery, w.Code)
			}
			var e adminapi.Error
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code != codes.InvalidArgument.String() || e.Message == "" {
				t.Fatalf("queryParam(%q) answered %q: not an InvalidArgument Error body (%v)", rawQuery, w.Body, err)
			}
		}

		token, err := bearerToken(r)
		switch {
		case err != nil && token != "":
			t.Fatalf("bearerToken(%q) = %q and %v", authHeader, token, err)
		case err == nil && authHeader == "" && token != "":
			t.Fatalf("bearerToken without a header = %q", token)
		case err == nil && token != "" && strings.ContainsAny(token, " \t"):
			t.Fatalf("bearerToken(%q) = %q, holding white space", authHeader, token)
		case err == nil && token != "" && !strings.Contains(authHeader, token):
			t.Fatalf("bearerToken(%q) = %q, not in the header", authHeader, token)
		case err != nil && strings.Contains(err.Error(), token) && token != "":
			t.Fatalf("bearerToken's error quotes the token")
		}
	})
}
