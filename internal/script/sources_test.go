package script_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/settlekit/settle/internal/script"
)

// Sources names every script of the package's .lua files, each with its file's text
// (after the shared prelude, pending_at.lua, for the scripts that use it).
func TestSourcesHoldsEveryScriptFile(t *testing.T) {
	files, err := filepath.Glob("*.lua")
	if err != nil {
		t.Fatal(err)
	}
	srcs := script.Sources()
	prelude := "pending_at"
	if len(srcs) != len(files)-1 {
		t.Fatalf("Sources has %d scripts, want %d (the .lua files but %s.lua)", len(srcs), len(files)-1, prelude)
	}
	for _, f := range files {
		name := strings.TrimSuffix(f, ".lua")
		if name == prelude {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if src, ok := srcs[name]; !ok || !strings.HasSuffix(src, string(b)) {
			t.Fatalf("Sources()[%q] is missing or not the text of %s", name, f)
		}
	}
}
