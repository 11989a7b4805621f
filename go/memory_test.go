package pdkv_test

// HostBuffer lifetimes: the memory of Bytes() lies outside the Go heap, so nothing but Free may
// unmap it (a slice of it does not keep the *HostBuffer reachable).

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	pdkv "github.com/pdkv/pdkv/go"
)

// TestHelperHostBufferBytes is not a test: run by TestHostBufferBytesOutliveTheHandle in a child
// process, so that a fault on unmapped memory kills the child only. It keeps the Bytes() of
// each kind of HostBuffer, drops the *HostBuffer, collects, and writes the bytes.
func TestHelperHostBufferBytes(t *testing.T) {
	if os.Getenv("PDKV_HELPER_BYTES") != "1" {
		t.Skip("helper process of TestHostBufferBytesOutliveTheHandle")
	}
	for _, alloc := range []func(int) (*pdkv.HostBuffer, error){pdkv.NewHostBuffer, pdkv.NewSharedHostBuffer} {
		mem := func() []byte {
			b, err := alloc(1 << 20)
			ok(t, err)
			return b.Bytes()
		}()
		// The *HostBuffer is unreachable from here on; a finalizer would run now.
		for i := 0; i < 5; i++ {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		for i := range mem {
			mem[i] = byte(i)
		}
		for i := range mem {
			if mem[i] != byte(i) {
				t.Fatalf("byte %d of a live slice changed", i)
			}
		}
	}
}

func TestHostBufferBytesOutliveTheHandle(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHostBufferBytes$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PDKV_HELPER_BYTES=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("writing Bytes() of a HostBuffer nothing else refers to: %v\n%s", err, out)
	}
}
