package prerequisites_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"mediator/localdev/prerequisites"
)

// Each line of the list says what it is, in the forms its readers take.
func TestTheListIsWellFormed(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	macOS := regexp.MustCompile(`^(brew:\S+|cask:\S+|pip:\S+|system|none)$`)
	for _, p := range prerequisites.All() {
		switch {
		case seen[p.Name]:
			t.Errorf("%s is listed twice", p.Name)
		case p.Why == "":
			t.Errorf("%s: no comment above it says who needs it", p.Name)
		case strings.Contains(p.Debian, ":") && !strings.HasPrefix(p.Debian, "pip:"):
			t.Errorf("%s: debian is an apt package or pip:<package>, not %q", p.Name, p.Debian)
		case !macOS.MatchString(p.MacOS):
			t.Errorf("%s: macos is brew:, cask:, pip:, system or none, not %q", p.Name, p.MacOS)
		case p.Check == "":
			t.Errorf("%s: no check", p.Name)
		}
		seen[p.Name] = true
	}
	if len(seen) == 0 {
		t.Fatal("the list is empty")
	}
}

// The README's install lines are the list's, exactly, and say what macOS lacks.
func TestTheREADMEInstallsTheList(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	block := "```sh\n# Debian 12, Ubuntu\n" + strings.Join(prerequisites.DebianLines(), "\n") +
		"\n# macOS\n" + strings.Join(prerequisites.MacOSLines(), "\n") + "\n```\n"
	if !strings.Contains(readme, block) {
		t.Errorf("the README's prerequisites are not the list's (make prerequisites prints them); it should have\n%s", block)
	}
	_, section, _ := strings.Cut(readme, "## Two commands\n")
	section, _, _ = strings.Cut(section, "\n## ")
	for _, p := range prerequisites.MacOSLacks() {
		if !strings.Contains(section, "macOS has no") || !strings.Contains(section, "`"+p.Name+"`") {
			t.Errorf("the README's prerequisites do not say that macOS has no %s", p.Name)
		}
	}
}

// .ci/run installs what the list says, through the same code as make prerequisites: it names
// no package of its own.
func TestCIInstallsFromTheList(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	script := string(raw)
	if !strings.Contains(script, "go run ./localdev/cmd/prerequisites -missing") {
		t.Fatal(".ci/run does not install from go run ./localdev/cmd/prerequisites -missing")
	}
	for _, p := range prerequisites.All() {
		_, name, _ := strings.Cut(p.Debian, ":")
		if name == "" {
			name = p.Debian
		}
		if regexp.MustCompile(`(?m)^[^#\n]*install[^#\n]*\b` + regexp.QuoteMeta(name) + `\b`).MatchString(script) {
			t.Errorf(".ci/run names %s itself: what it installs comes from the list", name)
		}
	}
	// What .ci/run is given for a machine that lacks everything is every package of the
	// README's lines, by the kind of its installer.
	var apt, pip []string
	for _, item := range prerequisites.InstallItems(prerequisites.All(), "linux") {
		kind, name, _ := strings.Cut(item, " ")
		switch kind {
		case "apt":
			apt = append(apt, name)
		case "pip":
			pip = append(pip, name)
		default:
			t.Errorf("an install item of kind %q: .ci/run installs apt and pip", kind)
		}
	}
	lines := prerequisites.DebianLines()
	if want := []string{"sudo apt-get install " + strings.Join(apt, " "), "python3 -m pip install " + strings.Join(pip, " ")}; !slices.Equal(lines, want) {
		t.Errorf("the Debian lines %q are not what .ci/run installs, %q", lines, want)
	}
}

// Every message that names a package to install names one of the list.
func TestMessagesNameListedPackages(t *testing.T) {
	t.Parallel()
	need := regexp.MustCompile(`prerequisites\.Need\("([^"]+)"\)`)
	found := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "../.." || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range need.FindAllStringSubmatch(string(src), -1) {
			found++
			if !slices.ContainsFunc(prerequisites.All(), func(p prerequisites.Package) bool { return p.Name == m[1] }) {
				t.Errorf("%s: prerequisites.Need(%q) names no package of the list", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no prerequisites.Need call found: the walk looked in the wrong place")
	}
}
