// Package ui serves Peloton's web UI: a few plain ES modules, one style
// sheet and an HTML shell, embedded into the binary with go:embed, so that
// building peloton needs no Node toolchain and there is nothing to bundle
// (`make ui` has nothing to do).
//
// The UI talks only to the public REST API (grpc-gateway) of the daemon that
// serves it, on the same origin: a cluster stack's pages read /v1/jobs,
// /v1/pools, /v1/hosts and /v1/updates; the federation's read
// /v1/federation/.... Handler is told which of the two it serves and says so
// in the page, so the browser never has to guess by probing.
//
// It imports nothing of Peloton: the daemons hand its handler to their HTTP
// listener (cluster.Config.UI, federation.Config.UI).
package ui

import (
	"bytes"
	"embed"
	"html"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// Kind says which API the UI is served beside.
type Kind string

const (
	// Cluster is one cluster stack's API (`peloton up`, `serve cluster`).
	Cluster Kind = "cluster"
	// Federation is the federation's API (`serve federation`, and the
	// federation's port of `peloton up`).
	Federation Kind = "federation"
)

// Prefix is where the UI lives; every path below it answers with the app,
// so a pasted deep link opens its page.
const Prefix = "/ui/"

//go:embed static
var static embed.FS

// Handler serves the UI: "/" redirects to /ui/, /ui/assets/<file> are the
// embedded files, and every other /ui/... path is the app's shell, which
// routes in the browser. Anything else is 404 (the API has its own paths
// and is matched before this handler).
func Handler(kind Kind) http.Handler { return HandlerWith(kind, "") }

// HandlerWith is Handler for a cluster that knows where its federation's
// UI is (federationUI: its base URL, e.g. "http://127.0.0.1:5292/", a
// host of 0.0.0.0 or [::] meaning the host the page came from): the
// cluster's Clusters page links to it.
func HandlerWith(kind Kind, federationUI string) http.Handler {
	assets, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed pattern above guarantees the folder
	}
	shell, err := fs.ReadFile(assets, "index.html")
	if err != nil {
		panic(err)
	}
	shell = bytes.Replace(shell, []byte("{{KIND}}"), []byte(kind), 1)
	shell = bytes.Replace(shell, []byte("{{FEDERATION_UI}}"), []byte(html.EscapeString(federationUI)), 1)
	return &handler{assets: assets, shell: shell}
}

type handler struct {
	assets fs.FS
	shell  []byte
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	switch {
	case p == "/" || p == "/ui":
		http.Redirect(w, r, Prefix, http.StatusFound)
	case strings.HasPrefix(p, Prefix+"assets/"):
		h.asset(w, r, strings.TrimPrefix(p, Prefix+"assets/"))
	case strings.HasPrefix(p, Prefix):
		h.header(w)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		// The shell names assets by fixed paths; never cache it, so a new
		// binary's assets are picked up by a reload.
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(h.shell)
	default:
		http.NotFound(w, r)
	}
}

// contentTypes are the types of the files the UI ships; anything else is
// not served (an asset of an unknown kind is a mistake to find in review).
var contentTypes = map[string]string{
	".js":  "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8",
	".svg": "image/svg+xml",
	".txt": "text/plain; charset=utf-8",
}

func (h *handler) asset(w http.ResponseWriter, r *http.Request, name string) {
	name = path.Clean("/" + name)[1:]
	ct, ok := contentTypes[path.Ext(name)]
	if !ok || name == "" || name == "index.html" {
		http.NotFound(w, r)
		return
	}
	b, err := fs.ReadFile(h.assets, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	h.header(w)
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// header sets what every UI answer carries: no sniffing, and a policy that
// lets the page load only its own scripts and talk only to its own origin.
// Inline styles are allowed: bars and the grid size themselves by them.
func (h *handler) header(w http.ResponseWriter) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy",
		"default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "same-origin")
}
