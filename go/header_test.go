package pdkv

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestEveryHeaderFunctionIsWrapped fails when a function of pdkv.h or of a header it includes
// (capi/include/pdkv/*.h; headerFunctions, generated from them into zz_generated_test.go) is not
// called from the package's Go sources, so the binding keeps up with the header.
func TestEveryHeaderFunctionIsWrapped(t *testing.T) {
	if len(headerFunctions) < 100 {
		t.Fatalf("only %d functions in headerFunctions", len(headerFunctions))
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
	for _, name := range headerFunctions {
		if !strings.Contains(src.String(), "C."+name+"(") {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("%d pdkv.h functions have no Go wrapper: %v", len(missing), missing)
	}
}
