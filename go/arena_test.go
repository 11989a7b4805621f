package pdkv

import (
	"sort"
	"testing"
	"unsafe"
)

// The arena's pieces: aligned, zeroed when asked, never overlapping, small ones carved from few
// chunks and large ones allocated alone; a freed arena can be used again.
func TestArenaPiecesAreAlignedDistinctAndZeroed(t *testing.T) {
	var a cArena
	defer a.free()
	type piece struct{ at, n uintptr }
	var got []piece
	sizes := []uintptr{0, 1, 7, 8, 15, 16, 17, 100, 1000, 1023, 1024, 5000, 3, 4095, 64, 64, 64}
	for round := 0; round < 20; round++ {
		for _, n := range sizes {
			p := a.raw(n)
			// Scribble over every byte handed out: an overlap shows as a piece whose later
			// zeroing (alloc) or check below sees another piece's bytes.
			for i, b := 0, unsafe.Slice((*byte)(p), n); i < len(b); i++ {
				b[i] = 0xA5
			}
			z := a.alloc(n)
			for i, b := range unsafe.Slice((*byte)(z), n) {
				if b != 0 {
					t.Fatalf("alloc(%d) byte %d = %#x, want 0", n, i, b)
				}
			}
			for _, q := range []unsafe.Pointer{p, z} {
				if uintptr(q)%arenaAlign != 0 {
					t.Fatalf("piece of %d bytes at %p is not %d-aligned", n, q, arenaAlign)
				}
				m := n
				if m == 0 {
					m = 1
				}
				got = append(got, piece{uintptr(q), m})
			}
		}
	}
	sort.Slice(got, func(i, j int) bool { return got[i].at < got[j].at })
	for i := 1; i < len(got); i++ {
		if got[i-1].at+got[i-1].n > got[i].at {
			t.Fatalf("pieces [%#x,+%d) and [%#x,+%d) overlap", got[i-1].at, got[i-1].n, got[i].at, got[i].n)
		}
	}
	var small uintptr
	large := 0
	for _, n := range sizes {
		r := (n + arenaAlign - 1) &^ (arenaAlign - 1)
		if r == 0 {
			r = arenaAlign
		}
		if r >= arenaLarge {
			large++
		} else {
			small += r
		}
	}
	small, large = 2*20*small, 2*20*large
	if want := int(small/(arenaChunk/2)) + 1 + large; len(a.ptrs) > want {
		t.Fatalf("%d C allocations for %d small bytes and %d large pieces, want at most %d", len(a.ptrs), small, large, want)
	}
	a.free()
	if a.cur != nil || a.ptrs != nil || a.off != 0 {
		t.Fatalf("free left %+v", a)
	}
	if p := a.alloc(8); p == nil || len(a.ptrs) != 1 {
		t.Fatalf("an arena used again after free: %p, %d allocations", p, len(a.ptrs))
	}
	// A chunk freed full of 0xA5 is what malloc is likely to hand out next: alloc must zero it.
	var dirty cArena
	for i, b := 0, unsafe.Slice((*byte)(dirty.raw(512)), 512); i < len(b); i++ {
		b[i] = 0xA5
	}
	dirty.free()
	var clean cArena
	defer clean.free()
	for i, b := range unsafe.Slice((*byte)(clean.alloc(512)), 512) {
		if b != 0 {
			t.Fatalf("alloc(512) after a freed dirty chunk: byte %d = %#x, want 0", i, b)
		}
	}
}

// A pre-shared key copied into C memory is there byte for byte for the call and zeroed before
// the arena frees it.
func TestArenaSecretIsCopiedThenWiped(t *testing.T) {
	var a cArena
	defer a.free()
	key := []byte("0123456789abcdef-pre-shared-key")
	p := a.secret(key)
	c := unsafe.Slice((*byte)(p), len(key))
	if string(c) != string(key) {
		t.Fatalf("secret copy = %q, want %q", c, key)
	}
	a.wipeSecrets()
	for i, b := range c {
		if b != 0 {
			t.Fatalf("byte %d of the key = %#x after wiping, want 0", i, b)
		}
	}
	if string(key) != "0123456789abcdef-pre-shared-key" {
		t.Fatal("the caller's key was changed")
	}
}
