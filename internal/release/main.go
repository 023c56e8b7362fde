// Command release checks that settle's installable modules name one release of each
// other, and builds a file-based module proxy that serves that release from a git
// revision of this repository, so that installing it can be proved without a network.
//
//	go run ./internal/release check [-version vX.Y.Z]
//	go run ./internal/release proxy -o DIR [-rev HEAD]
//
// check reads the go.mod of every module a user installs or imports (Modules) and
// fails unless each requirement on another of them names one release version (vX.Y.Z,
// never a zero or pseudo-version), the same everywhere (and -version, when given), and
// unless cmd/settle's go.mod has no replace or exclude directive (go install
// path@version refuses a module that has one). It prints the version.
//
// proxy writes DIR as a GOPROXY=file://DIR serves it: each module of Modules at that
// version, its zip made by golang.org/x/mod/zip from the tree of the git revision -rev
// (git archive: what the tag a release makes holds), as the module proxy would serve
// the tag.
//
// scripts/release uses check; .ci/run uses both (see RELEASING.md).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// Root is the library module's path; every other module of Modules is under it.
const Root = "github.com/settlekit/settle"

// Modules are the directories (from the repository root) of the modules a release tags:
// the library and what a user installs or imports beside it. The examples, bench and the
// internal test modules are not released and may keep development requirements.
var Modules = []string{".", "cbor", "cmd/settle", "console", "settleotel"}

// noReplace are the modules installed with go install path@version, which refuses a
// go.mod with replace or exclude directives: they reach the tree through go.work.
var noReplace = map[string]bool{"cmd/settle": true}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: release check [-version vX.Y.Z] | release proxy -o DIR [-rev REV]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	repo := fs.String("repo", ".", "the repository's root")
	switch args[0] {
	case "check":
		want := fs.String("version", "", "the version every requirement must name")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		v, err := check(*repo, *want)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, v)
		return nil
	case "proxy":
		out := fs.String("o", "", "the proxy's directory (made)")
		rev := fs.String("rev", "HEAD", "the git revision the modules' zips are made from")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *out == "" {
			return errors.New("proxy: -o DIR is required")
		}
		v, err := check(*repo, "")
		if err != nil {
			return err
		}
		if err := buildProxy(*repo, *rev, v, *out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %d modules at %s from %s\n", *out, len(Modules), v, *rev)
		return nil
	}
	return fmt.Errorf("unknown command %q (check, proxy)", args[0])
}

// modulePath is the module path of the module in dir.
func modulePath(dir string) string {
	if dir == "." {
		return Root
	}
	return Root + "/" + dir
}

// check reads the go.mod of every module of Modules under repo and returns the one
// release version their requirements on each other name; want, when given, must be it.
func check(repo, want string) (string, error) {
	released := map[string]bool{}
	for _, d := range Modules {
		released[modulePath(d)] = true
	}
	var errs []error
	version := want
	for _, d := range Modules {
		name := filepath.Join(d, "go.mod")
		data, err := os.ReadFile(filepath.Join(repo, name))
		if err != nil {
			return "", err
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			return "", err
		}
		if f.Module == nil || f.Module.Mod.Path != modulePath(d) {
			errs = append(errs, fmt.Errorf("%s: module path is not %s", name, modulePath(d)))
		}
		if noReplace[d] && (len(f.Replace) > 0 || len(f.Exclude) > 0) {
			errs = append(errs, fmt.Errorf("%s: a replace or exclude directive: go install %s@version would refuse it (the tree reaches it through go.work)", name, modulePath(d)))
		}
		for _, r := range f.Require {
			p, v := r.Mod.Path, r.Mod.Version
			if p != Root && !strings.HasPrefix(p, Root+"/") {
				continue
			}
			switch {
			case !released[p]:
				errs = append(errs, fmt.Errorf("%s: requires %s, which no release tags", name, p))
			case !semver.IsValid(v) || module.IsPseudoVersion(v) || semver.Prerelease(v) != "" || semver.Build(v) != "":
				errs = append(errs, fmt.Errorf("%s: requires %s %s, not a release version vX.Y.Z", name, p, v))
			case version == "":
				version = v
			case v != version:
				errs = append(errs, fmt.Errorf("%s: requires %s %s, want %s (one release names one version)", name, p, v, version))
			}
		}
	}
	if version == "" && len(errs) == 0 {
		errs = append(errs, errors.New("no module requires another: no release version to check"))
	}
	if want != "" && !semver.IsValid(want) {
		errs = append(errs, fmt.Errorf("-version %q is not a version vX.Y.Z", want))
	}
	return version, errors.Join(errs...)
}

// buildProxy writes out as a file-based GOPROXY serving every module of Modules at
// version, made from the git revision rev of repo.
func buildProxy(repo, rev, version, out string) error {
	root, err := git(repo, "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	when, err := git(repo, "log", "-1", "--format=%cI", rev)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, when)
	if err != nil {
		return err
	}
	// The tree at rev, as git archive exports it (what a tag's zip holds: no untracked
	// file), from which each module's zip is made.
	tree, err := os.MkdirTemp("", "settle-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tree)
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, rev, tree)
	if out, err := archive.CombinedOutput(); err != nil {
		return fmt.Errorf("git archive %s: %w: %s", rev, err, out)
	}
	for _, d := range Modules {
		m := module.Version{Path: modulePath(d), Version: version}
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		dir := filepath.Join(out, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var zbuf bytes.Buffer
		if err := zip.CreateFromDir(&zbuf, m, filepath.Join(tree, d)); err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
		gomod, err := os.ReadFile(filepath.Join(tree, d, "go.mod"))
		if err != nil {
			return err
		}
		info, err := json.Marshal(struct {
			Version string
			Time    time.Time
		}{version, t.UTC()})
		if err != nil {
			return err
		}
		for name, data := range map[string][]byte{
			"list":            []byte(version + "\n"),
			version + ".info": info,
			version + ".mod":  gomod,
			version + ".zip":  zbuf.Bytes(),
		} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// git runs git in dir and returns its output, trimmed.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
