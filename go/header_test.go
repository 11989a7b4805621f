package pdkv

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestEveryHeaderFunctionIsWrapped fails when a function of pdkv.h or of a header it includes
// (capi/include/pdkv/*.h) is not called from the package's Go sources, so the binding keeps
// up with the header.
func TestEveryHeaderFunctionIsWrapped(t *testing.T) {
	header, err := os.ReadFile(filepath.Join("..", "capi", "include", "pdkv.h"))
	if err != nil {
		t.Fatal(err)
	}
	subs, err := filepath.Glob(filepath.Join("..", "capi", "include", "pdkv", "*.h"))
	if err != nil || len(subs) == 0 {
		t.Fatalf("no capi/include/pdkv/*.h (%v)", err)
	}
	for _, f := range subs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		header = append(header, b...)
	}
	decl := regexp.MustCompile(`PDKV_API[^;{]*?\b(pdkv_[a-z0-9_]+)\s*\(`)
	matches := decl.FindAllSubmatch(header, -1)
	if len(matches) < 100 {
		t.Fatalf("found only %d declarations in pdkv.h", len(matches))
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	var missing []string
	for _, m := range matches {
		name := string(m[1])
		if !strings.Contains(src.String(), "C."+name+"(") {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("%d pdkv.h functions have no Go wrapper: %v", len(missing), missing)
	}
}
