package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoWith writes a repository of the released modules' go.mod files: each requires
// the library at v0.1.0 (the library requires nothing of settle's), changed by edits
// (module dir -> the lines to add to its go.mod).
func repoWith(t *testing.T, edits map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range Modules {
		body := "module " + modulePath(d) + "\n\ngo 1.26.0\n"
		if d != "." {
			body += "\nrequire " + Root + " v0.1.0\n"
		}
		body += edits[d]
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "go.mod"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCheckReturnsTheOneVersionEveryModuleRequires(t *testing.T) {
	t.Parallel()
	repo := repoWith(t, map[string]string{"cmd/settle": "require " + Root + "/console v0.1.0\n", "console": "replace " + Root + " => ..\n"})
	v, err := check(repo, "v0.1.0")
	if err != nil || v != "v0.1.0" {
		t.Fatalf("check = %q, %v; want v0.1.0, nil", v, err)
	}
}

func TestCheckRefusesWhatARelease(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		edits map[string]string
		want  string
		says  string
	}{
		"names a zero version": {
			edits: map[string]string{"cbor": "require " + Root + "/settleotel v0.0.0-00010101000000-000000000000\n"},
			says:  "not a release version",
		},
		"names two versions": {
			edits: map[string]string{"console": "require " + Root + "/cbor v0.2.0\n"},
			says:  "want v0.1.0",
		},
		"cannot install: cmd/settle has a replace": {
			edits: map[string]string{"cmd/settle": "replace " + Root + " => ../..\n"},
			says:  "go install",
		},
		"does not tag: a module requires an unreleased one": {
			edits: map[string]string{"console": "require " + Root + "/internal/sqltest v0.1.0\n"},
			says:  "which no release tags",
		},
		"is not: -version differs": {
			want: "v0.2.0",
			says: "want v0.2.0",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := check(repoWith(t, tc.edits), tc.want)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("check: %v; want an error saying %q", err, tc.says)
			}
		})
	}
}
