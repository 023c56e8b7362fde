package script_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/settlekit/settle/internal/script"
)

// preludeLine is a script header's line naming the preludes it uses, in the order
// script.go prepends them: "-- Prelude: now.lua (nowMs), prepended by script.go."
var preludeLine = regexp.MustCompile(`(?m)^-- Preludes?: (.*)$`)

// Sources names every script of the package's .lua files (all but the preludes), each
// with its file's text after the preludes its header names, in that order.
func TestSourcesHoldsEveryScriptFile(t *testing.T) {
	files, err := filepath.Glob("*.lua")
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts[strings.TrimSuffix(f, ".lua")] = string(b)
	}
	uses := map[string][]string{} // script -> the preludes its header names
	preludes := map[string]bool{}
	for name, text := range texts {
		if m := preludeLine.FindStringSubmatch(text); m != nil {
			for _, p := range regexp.MustCompile(`(\w+)\.lua`).FindAllStringSubmatch(m[1], -1) {
				uses[name] = append(uses[name], p[1])
				preludes[p[1]] = true
			}
		}
	}

	srcs := script.Sources()
	if len(srcs) != len(files)-len(preludes) {
		t.Fatalf("Sources has %d scripts, want %d (the .lua files but the %d preludes)", len(srcs), len(files)-len(preludes), len(preludes))
	}
	for name, text := range texts {
		if preludes[name] {
			if _, ok := srcs[name]; ok {
				t.Fatalf("Sources()[%q]: %s.lua is a prelude, not a script", name, name)
			}
			continue
		}
		want := ""
		for _, p := range uses[name] {
			if _, ok := texts[p]; !ok {
				t.Fatalf("%s.lua names the prelude %s.lua, which is not there", name, p)
			}
			want += texts[p]
		}
		want += text
		if src, ok := srcs[name]; !ok || src != want {
			t.Fatalf("Sources()[%q] is missing or not the text of %s.lua after its preludes %v", name, name, uses[name])
		}
	}
}
