// Package console is the web console's files — static HTML, CSS and plain JavaScript, with no
// build step — embedded in the query function, which serves them at /console/ beside the API
// they call (shared/httpapi, console.go), and the Content-Security-Policy they are served under.
package console

import (
	"embed"
	"io/fs"
	"mime"
	"net/url"
	"path"
	"strings"
)

//go:embed static
var files embed.FS

// Static is the console's files, at their names under /console/ (index.html, app.js, ...).
var Static = func() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embed directive above names static: it is there or nothing builds
	}
	return sub
}()

// Page is what a GET of /console/<name> answers: the file of that name when there is one,
// and otherwise index.html, whose script routes by the address (/console/runs/r1 is the app
// showing run r1). A name that is not a clean path inside the files (.., a leading /, an
// empty segment) is never looked up: it gets the app too, so no request reads outside them.
func Page(name string) (body []byte, contentType string) {
	name = strings.TrimPrefix(name, "/")
	if name != "" && fs.ValidPath(name) && path.Clean(name) == name {
		if b, err := fs.ReadFile(Static, name); err == nil {
			return b, typeOf(name)
		}
	}
	b, err := fs.ReadFile(Static, "index.html")
	if err != nil {
		panic(err) // embedded at build time
	}
	return b, typeOf("index.html")
}

// typeOf is a file's Content-Type by its extension, with the charset for text: the console
// answers with X-Content-Type-Options: nosniff, so a wrong type is a script that does not run.
func typeOf(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// CSP is the Content-Security-Policy of every console answer. Scripts and styles come from the
// API's own origin only (no inline script, no inline style attribute: the app sets styles
// through classes and element.style); the app may connect to the API itself and to the origins
// given — the log bucket its presigned URLs point at, the OAuth issuer's token endpoint — and
// to nothing else; it may not be framed, nor post a form anywhere but here.
func CSP(connect ...string) string {
	src := []string{"'self'"}
	for _, o := range connect {
		if o != "" && !strings.ContainsAny(o, " ;,'\"") {
			src = append(src, o)
		}
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src " +
		strings.Join(src, " ") + "; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
}

// Origin is scheme://host[:port] of an absolute URL, or "" for anything else.
func Origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
