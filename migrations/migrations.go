// Package migrations holds Mediator's schema as golang-migrate files, embedded so that the
// migrate function, `make migrate`, `make dev` and the test harness all apply the same bytes.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
)

// FS is every NNNN_name.up.sql / .down.sql file of this folder.
//
//go:embed *.sql
var FS embed.FS

// Latest is the version of the newest migration: the schema this build expects.
func Latest() uint { return LatestOf(FS) }

// LatestOf is the version of the newest migration in fsys, a folder laid out as this one.
func LatestOf(fsys fs.FS) uint {
	entries, _ := fs.ReadDir(fsys, ".")
	var latest uint
	for _, e := range entries {
		var v uint
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err == nil && v > latest {
			latest = v
		}
	}
	return latest
}

// Behind says whether a database at version, dirty or not, lacks what this build needs.
func Behind(version uint, dirty bool) bool { return dirty || version < Latest() }
