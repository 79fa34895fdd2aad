package admin

import (
	"embed"
	"net/http"

	"github.com/granaryio/granary/silo/admin/adminapi"
	"google.golang.org/grpc/codes"
)

// dashboardFiles is the dashboard: one page, its script and its style
// sheet, with nothing loaded from elsewhere.
//
//go:embed dashboard/index.html dashboard/app.js dashboard/style.css
var dashboardFiles embed.FS

// dashboardAssets maps each path the dashboard is served at to its file
// and content type.
var dashboardAssets = map[string]struct{ file, contentType string }{
	adminapi.PathDashboard: {"dashboard/index.html", "text/html; charset=utf-8"},
	"/app.js":              {"dashboard/app.js", "text/javascript; charset=utf-8"},
	"/style.css":           {"dashboard/style.css", "text/css; charset=utf-8"},
}

// contentSecurityPolicy lets the page load its own script, style sheet
// and API and nothing else: no inline script, no other origin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// handleDashboard serves the dashboard's files, and 404 for any other
// path outside the API.
func (s *Server) handleDashboard(w http.ResponseWriter, r *http.Request) {
	asset, ok := dashboardAssets[r.URL.Path]
	if !ok {
		writeError(w, http.StatusNotFound, codes.NotFound, "no page %q; the dashboard is at %s", r.URL.Path, adminapi.PathDashboard)
		return
	}
	if !allow(w, r, http.MethodGet) {
		return
	}
	body, err := dashboardFiles.ReadFile(asset.file)
	if err != nil {
		// The files are embedded at build time; a miss is a bug here.
		writeError(w, http.StatusInternalServerError, codes.Internal, "dashboard file %s: %v", asset.file, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", asset.contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}
