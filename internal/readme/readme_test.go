package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestEveryGoBlockOfTheReadmeIsCompiledHere proves the README's Go code compiles: every
// ```go block of README.md (the Quick start and every other snippet) must appear verbatim
// in main.go, which the build compiles, or in kit_test.go, which runs.
func TestEveryGoBlockOfTheReadmeIsCompiledHere(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var src []byte
	for _, name := range []string{"main.go", "kit_test.go"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block: the quick start is missing")
	}
	for i, b := range blocks {
		if !strings.Contains(string(src), b[1]) {
			t.Errorf("README.md's go block %d is not in internal/readme/main.go or kit_test.go verbatim; copy it there so it is compiled:\n%s", i+1, b[1])
		}
	}
}
