package main

import "testing"

// settle --version prints the module version the build recorded ("(devel)" for the
// binary the tests build from the tree; .ci/run installs a release by version and checks
// that it prints that version).
func TestVersionFlagPrintsTheModuleVersion(t *testing.T) {
	t.Parallel()
	r := runSettle(t, nil, nil, "--version")
	if want := "settle version (devel)\n"; r.code != 0 || r.stdout != want {
		t.Fatalf("settle --version: exit %d, stdout %q, want 0 and %q (stderr %q)", r.code, r.stdout, want, r.stderr)
	}
}
