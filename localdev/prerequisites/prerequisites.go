// Package prerequisites is the one list of what Mediator's make dev, make test and make lint
// need besides Go (list.txt), and the install lines made from it: the README's, .ci/run's
// (through `go run ./localdev/cmd/prerequisites -missing`), and the one a test prints when a
// tool it needs is missing.
package prerequisites

import (
	_ "embed"
	"fmt"
	"os/exec"
	"strings"
)

//go:embed list.txt
var list string

// Package is one line of the list.
type Package struct {
	Name   string
	Debian string // an apt package, or pip:<package>
	MacOS  string // brew:<formula>, cask:<cask>, pip:<package>, system or none
	Check  string // a sh command that succeeds when the package is installed
	Why    string // the comment above it
}

// All is the list, in its order.
func All() []Package {
	var out []Package
	why := ""
	for n, line := range strings.Split(list, "\n") {
		switch {
		case strings.TrimSpace(line) == "":
			why = ""
			continue
		case strings.HasPrefix(line, "#"):
			why = strings.TrimSpace(strings.TrimPrefix(line, "#"))
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 {
			panic(fmt.Sprintf("prerequisites: list.txt:%d: want `name debian macos check`", n+1))
		}
		check := strings.TrimSpace(line)
		for range 3 {
			check = strings.TrimSpace(check[strings.IndexAny(check, " \t"):])
		}
		out = append(out, Package{Name: f[0], Debian: f[1], MacOS: f[2], Check: check, Why: why})
	}
	return out
}

// Lookup is the package called name; a name not in the list is a mistake in the caller.
func Lookup(name string) Package {
	for _, p := range All() {
		if p.Name == name {
			return p
		}
	}
	panic("prerequisites: no package " + name + " in list.txt")
}

// kind splits "pip:cfn-lint" into "pip", "cfn-lint"; a bare name is an apt package.
func kind(s string) (string, string) {
	if k, name, ok := strings.Cut(s, ":"); ok {
		return k, name
	}
	return "apt", s
}

// pick is the packages of the given kind for one platform's column.
func pick(column func(Package) string, want string) []string {
	var out []string
	for _, p := range All() {
		if k, name := kind(column(p)); k == want {
			out = append(out, name)
		}
	}
	return out
}

func debian(p Package) string { return p.Debian }
func macOS(p Package) string  { return p.MacOS }

// pipLine installs the pip packages of a column.
func pipLine(column func(Package) string) string {
	if pkgs := pick(column, "pip"); len(pkgs) > 0 {
		return "python3 -m pip install " + strings.Join(pkgs, " ")
	}
	return ""
}

// DebianLines are the commands that install everything on Debian or Ubuntu: apt's, then
// pip's (pip comes from apt).
func DebianLines() []string {
	return nonEmpty("sudo apt-get install "+strings.Join(pick(debian, "apt"), " "), pipLine(debian))
}

// MacOSLines are the commands that install on macOS what Homebrew and pip have of the list.
func MacOSLines() []string {
	brew := ""
	if f := pick(macOS, "brew"); len(f) > 0 {
		brew = "brew install " + strings.Join(f, " ")
	}
	if c := pick(macOS, "cask"); len(c) > 0 {
		brew += " && brew install --cask " + strings.Join(c, " ")
	}
	return nonEmpty(strings.TrimPrefix(brew, " && "), pipLine(macOS))
}

// MacOSLacks are the packages macOS has none of.
func MacOSLacks() []Package {
	var out []Package
	for _, p := range All() {
		if p.MacOS == "none" {
			out = append(out, p)
		}
	}
	return out
}

func nonEmpty(lines ...string) []string {
	var out []string
	for _, l := range lines {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// Need is what a test says when the tool of package name is missing: the exact line that
// installs it on Debian/Ubuntu and on macOS, or that macOS has none.
func Need(name string) string {
	p := Lookup(name)
	deb := "sudo apt-get install " + p.Debian
	if k, pkg := kind(p.Debian); k == "pip" {
		deb = "python3 -m pip install " + pkg
	}
	var mac string
	switch k, pkg := kind(p.MacOS); {
	case p.MacOS == "none":
		mac = "macOS has no package of it, so this cannot pass there"
	case p.MacOS == "system":
		mac = "macOS ships it"
	case k == "brew":
		mac = "macOS: brew install " + pkg
	case k == "cask":
		mac = "macOS: brew install --cask " + pkg
	case k == "pip":
		mac = "macOS: python3 -m pip install " + pkg
	}
	return fmt.Sprintf("install %s: %s (Debian/Ubuntu); %s. Everything make test needs: make prerequisites", p.Name, deb, mac)
}

// InstallItems are what installs pkgs on goos, one "<kind> <package>" each: apt or pip on
// Linux; brew, cask, pip, system or none on macOS.
func InstallItems(pkgs []Package, goos string) []string {
	var out []string
	for _, p := range pkgs {
		column := p.Debian
		if goos == "darwin" {
			column = p.MacOS
		}
		k, name := kind(column)
		if goos == "darwin" && (column == "system" || column == "none") {
			k, name = column, p.Name
		}
		out = append(out, k+" "+name)
	}
	return out
}

// Missing is the packages whose check fails on this machine, run by sh.
func Missing() []Package {
	var out []Package
	for _, p := range All() {
		if exec.Command("/bin/sh", "-c", p.Check).Run() != nil {
			out = append(out, p)
		}
	}
	return out
}
