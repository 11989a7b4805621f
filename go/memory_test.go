package pdkv_test

// HostBuffer lifetimes: the memory of Bytes() lies outside the Go heap, so nothing but Free may
// unmap it (a slice of it does not keep the *HostBuffer reachable).

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pdkv "github.com/pdkv/pdkv/go"
	"github.com/pdkv/pdkv/go/internal/xfer"
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

// TestRegisterBufferRacingFree frees each buffer from another goroutine while it is being
// registered: either the registration fails (the buffer was freed first) or Free does (ErrBusy:
// the buffer is pinned), never both succeed, which would leave the agent registered on unmapped
// memory that peers then write. The other goroutine spins, so that its Free lands at varying
// points of RegisterBuffer, the C registration included.
func TestRegisterBufferRacingFree(t *testing.T) {
	const regions = 1024
	m, err := xfer.Model()
	ok(t, err)
	defer m.Close()
	probe, err := pdkv.EngineMetadataFromModel(m, pdkv.DefaultEngineConfig(), raceLayout(regions, nil))
	ok(t, err)
	info, err := probe.Regions()
	ok(t, err)
	_ = probe.Close()
	size := int(info[0].BlockLen * info[0].NumBlocks)
	bufs := make([]*pdkv.HostBuffer, regions)
	bases := make([]uint64, regions)
	for i := range bufs {
		bufs[i], err = pdkv.NewHostBuffer(size)
		ok(t, err)
		bases[i] = bufs[i].Addr()
	}
	md, err := pdkv.EngineMetadataFromModel(m, pdkv.DefaultEngineConfig(), raceLayout(regions, bases))
	ok(t, err)
	defer md.Close()
	a, err := pdkv.NewAgent(pdkv.AgentOptions{Metadata: md})
	ok(t, err)
	defer a.Close()
	both := 0
	var spin atomic.Int64
	for i, b := range bufs {
		var start atomic.Bool
		freed := make(chan error, 1)
		delay := int64(i % 16 * 8) // busy loops before the Free: sweeps the window
		go func() {
			for !start.Load() {
			}
			for j := int64(0); j < delay; j++ {
				spin.Add(1)
			}
			freed <- b.Free()
		}()
		start.Store(true)
		reg, rerr := a.RegisterBuffer(uint32(i), b)
		ferr := <-freed
		if rerr == nil && ferr == nil {
			both++
		}
		if rerr == nil {
			_ = reg.Close()
		}
	}
	if both > 0 {
		t.Fatalf("%d of %d buffers were freed while RegisterBuffer registered them", both, regions)
	}
	ok(t, a.Close())
	for _, b := range bufs {
		ok(t, b.Free()) // the agent is closed: nothing is pinned any more
	}
}

func raceLayout(n uint32, bases []uint64) pdkv.EngineLayout {
	l := pdkv.DefaultEngineLayout()
	l.NumRegions = n
	l.RegionBases = bases
	return l
}

// Registering the same HostBuffer again after closing its registration (an engine that
// registers per request) keeps one pin list entry and one pin per agent, not one per
// registration: the list stays at one buffer, Free is refused while the agent is open (naming
// one agent) and allowed once it is closed.
func TestRegisterCyclesOfOneBufferKeepOnePin(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	ok(t, p.Memory[0].Close())
	before := pdkv.PinnedBuffers(p.Agent)
	for i := 0; i < 100; i++ {
		m, err := p.Agent.RegisterBuffer(0, p.Buffers[0])
		ok(t, err)
		ok(t, m.Close())
	}
	if n := pdkv.PinnedBuffers(p.Agent); n != before {
		t.Fatalf("%d pinned buffers after 100 register/close cycles of one buffer, %d before", n, before)
	}
	err := p.Buffers[0].Free()
	isErr(t, err, pdkv.ErrBusy)
	if !strings.Contains(err.Error(), "with 1 open agent(s)") {
		t.Fatalf("Free: %v", err)
	}
	ok(t, p.Agent.Close())
	ok(t, p.Buffers[0].Free())
}
