package pdkv

/*
#include <stdlib.h>
#include <pdkv.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// cArena collects the C memory an input that holds pointers is built in (cgo forbids Go
// pointers inside memory passed to C), freed together after the call. Small pieces are carved
// from 4 KiB chunks: a request's structs and ids take one C allocation (a cgo call each way)
// instead of one per piece, which cost ~2 us per plan compile with five groups.
type cArena struct {
	ptrs []unsafe.Pointer // every C allocation the arena owns: chunks, large pieces, strings
	cur  unsafe.Pointer   // the chunk pieces are carved from, nil before the first
	off  uintptr          // bytes of cur handed out
	size uintptr          // bytes in cur
	wipe [][]byte         // secrets copied in (a pre-shared key): zeroed before the memory is freed
}

const (
	arenaChunk = 4096 // bytes per chunk
	arenaAlign = 16   // every piece starts at a multiple of this, as malloc's do
	arenaLarge = 1024 // a piece this large gets an allocation of its own
)

// raw returns n bytes of C memory (at least 1 byte, never NULL) that the caller overwrites.
func (a *cArena) raw(n uintptr) unsafe.Pointer {
	if n == 0 {
		n = 1
	}
	n = (n + arenaAlign - 1) &^ (arenaAlign - 1)
	if n >= arenaLarge {
		return a.own(n)
	}
	if a.cur == nil || a.size-a.off < n {
		a.cur, a.off, a.size = a.own(arenaChunk), 0, arenaChunk
	}
	p := unsafe.Add(a.cur, a.off)
	a.off += n
	return p
}

// own makes one C allocation of n bytes that the arena frees.
func (a *cArena) own(n uintptr) unsafe.Pointer {
	p := C.malloc(C.size_t(n))
	if p == nil {
		panic("pdkv: C allocation failed")
	}
	a.ptrs = append(a.ptrs, p)
	return p
}

// alloc returns n zeroed bytes of C memory (at least 1 byte, never NULL).
func (a *cArena) alloc(n uintptr) unsafe.Pointer {
	p := a.raw(n)
	b := unsafe.Slice((*byte)(p), n)
	for i := range b {
		b[i] = 0
	}
	return p
}

// u64s copies vs into C memory; nil for an empty slice.
func (a *cArena) u64s(vs []uint64) *C.uint64_t {
	if len(vs) == 0 {
		return nil
	}
	p := a.raw(uintptr(len(vs)) * 8)
	copy(unsafe.Slice((*uint64)(p), len(vs)), vs)
	return (*C.uint64_t)(p)
}

// u32s copies vs into C memory; nil for an empty slice.
func (a *cArena) u32s(vs []uint32) *C.uint32_t {
	if len(vs) == 0 {
		return nil
	}
	p := a.raw(uintptr(len(vs)) * 4)
	copy(unsafe.Slice((*uint32)(p), len(vs)), vs)
	return (*C.uint32_t)(p)
}

// str copies s into C memory, rejecting NUL bytes.
func (a *cArena) str(arg, s string) (*C.char, error) {
	cs, err := cString(arg, s)
	if err != nil {
		return nil, err
	}
	a.ptrs = append(a.ptrs, unsafe.Pointer(cs))
	return cs, nil
}

// secret copies b into C memory that free zeroes before releasing it (no key bytes are left
// in the C heap after the call).
func (a *cArena) secret(b []byte) unsafe.Pointer {
	p := a.own(uintptr(len(b)) + 1)
	c := unsafe.Slice((*byte)(p), len(b))
	copy(c, b)
	a.wipe = append(a.wipe, c)
	return p
}

// wipeSecrets zeroes every secret copied in.
func (a *cArena) wipeSecrets() {
	for _, c := range a.wipe {
		for i := range c {
			c[i] = 0
		}
	}
}

// free zeroes the secrets and releases every allocation.
func (a *cArena) free() {
	a.wipeSecrets()
	for _, p := range a.ptrs {
		C.free(p)
	}
	*a = cArena{}
}

// takeU64List copies an owned pdkv_u64_list_t into a Go slice and frees it.
func takeU64List(st C.pdkv_status_t, list *C.pdkv_u64_list_t, cerr *C.pdkv_error_t) ([]uint64, error) {
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	defer C.pdkv_u64_list_free(list)
	var items *C.uint64_t
	var n C.size_t
	cerr = nil
	if err := check(C.pdkv_u64_list_items(list, &items, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	return u64Slice(items, n), nil
}

// GroupKind is the kind of one KV cache group (pdkv_group_kind_t).
type GroupKind int32

// KV cache group kinds.
const (
	// GroupAttention is full attention (incl. MLA): one slot per token.
	GroupAttention GroupKind = C.PDKV_GROUP_ATTENTION
	// GroupSlidingWindow is attention that only needs the last window tokens.
	GroupSlidingWindow GroupKind = C.PDKV_GROUP_SLIDING_WINDOW
	// GroupMamba is SSM state: one block is the whole state, never split.
	GroupMamba GroupKind = C.PDKV_GROUP_MAMBA
)

// String returns the stable name ("attention", "sliding_window", "mamba"; "unknown" otherwise).
func (k GroupKind) String() string { return C.GoString(C.pdkv_group_kind_name(C.int32_t(k))) }

// GroupKindFromName returns the kind whose String is name (ErrInvalidArgument otherwise).
func GroupKindFromName(name string) (GroupKind, error) {
	for _, k := range []GroupKind{GroupAttention, GroupSlidingWindow, GroupMamba} {
		if k.String() == name {
			return k, nil
		}
	}
	return 0, goErr(StatusInvalidArgument, "unknown group kind %q (attention, sliding_window, mamba)", name)
}

// LogicalToKernelBlockIDs maps logical block ids to kernel block ids with the ppl of the engine
// that owns them: attention kinds L -> [L*ppl .. L*ppl+ppl-1]; Mamba unchanged.
// Errors: ErrInvalidArgument (unknown kind, ppl 0), ErrOverflow.
func LogicalToKernelBlockIDs(logical []uint64, kind GroupKind, blocksPerLogical uint64) ([]uint64, error) {
	var a cArena
	defer a.free()
	var out *C.pdkv_u64_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_logical_to_kernel_block_ids(a.u64s(logical), C.size_t(len(logical)), C.int32_t(kind), C.uint64_t(blocksPerLogical), &out, &cerr)
	return takeU64List(st, out, cerr)
}

// MapBlockIDsForBlockSizeRatio maps local (D) kernel ids to remote (P) kernel granularity when
// a D kernel block holds blockSizeRatio P blocks: attention b -> [b*bsr .. b*bsr+bsr-1], the
// concatenation clipped to remoteLen entries; Mamba 1:1. Errors: ErrInvalidArgument, ErrOverflow.
func MapBlockIDsForBlockSizeRatio(local []uint64, kind GroupKind, blockSizeRatio, remoteLen uint64) ([]uint64, error) {
	var a cArena
	defer a.free()
	var out *C.pdkv_u64_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_map_block_ids_for_block_size_ratio(a.u64s(local), C.size_t(len(local)), C.int32_t(kind), C.uint64_t(blockSizeRatio), C.uint64_t(remoteLen), &out, &cerr)
	return takeU64List(st, out, cerr)
}

// GroupBlockIDs is one group's block ids for DescriptorIDs: kernel ids (attention kinds) or
// logical ids (Mamba).
type GroupBlockIDs struct {
	// Kind is the group kind.
	Kind GroupKind
	// IDs are the block ids.
	IDs []uint64
}

// DescriptorLayout says how an engine's descriptors are laid out: all attention descriptors
// region-major, then all Mamba descriptors region-major.
type DescriptorLayout struct {
	// NumBlocks is the kernel blocks of the engine whose handle is addressed.
	NumBlocks uint64
	// BlockSizeRatio is bsr (local handle only; the remote uses 1).
	BlockSizeRatio uint64
	// BlocksPerLogical is the ppl of that engine.
	BlocksPerLogical uint64
	// NumAttentionRegions is the number of attention regions.
	NumAttentionRegions uint64
	// NumMambaRegions is the number of Mamba regions.
	NumMambaRegions uint64
}

// DescriptorIDs returns the descriptor ids of the groups, in order (vLLM's desc-id rule).
// Errors: ErrInvalidArgument (unknown kind, zero sizes, NumBlocks % ppl != 0), ErrOutOfBounds
// (a block id outside its region), ErrOverflow.
func DescriptorIDs(groups []GroupBlockIDs, layout DescriptorLayout) ([]uint64, error) {
	var a cArena
	defer a.free()
	var gp *C.pdkv_group_block_ids_t
	if len(groups) > 0 {
		gp = (*C.pdkv_group_block_ids_t)(a.alloc(uintptr(len(groups)) * unsafe.Sizeof(C.pdkv_group_block_ids_t{})))
		gs := unsafe.Slice(gp, len(groups))
		for i := range gs {
			e := &gs[i]
			e.kind = C.int32_t(groups[i].Kind)
			e.ids = a.u64s(groups[i].IDs)
			e.num_ids = C.size_t(len(groups[i].IDs))
		}
	}
	var cl C.pdkv_descriptor_layout_t
	cl.struct_size = C.size_t(unsafe.Sizeof(cl))
	cl.num_blocks = C.uint64_t(layout.NumBlocks)
	cl.block_size_ratio = C.uint64_t(layout.BlockSizeRatio)
	cl.blocks_per_logical = C.uint64_t(layout.BlocksPerLogical)
	cl.num_attention_regions = C.uint64_t(layout.NumAttentionRegions)
	cl.num_mamba_regions = C.uint64_t(layout.NumMambaRegions)
	var out *C.pdkv_u64_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_descriptor_ids(gp, C.size_t(len(groups)), &cl, &out, &cerr)
	return takeU64List(st, out, cerr)
}

// MambaDescriptorIDs returns the Mamba descriptor ids of logical blocks in a region-major Mamba
// list starting at firstID: firstID + (region*descsPerRegion + k)*numLogicalBlocks + block.
// Errors: ErrOutOfBounds (a block id >= numLogicalBlocks), ErrOverflow.
func MambaDescriptorIDs(logicalBlockIDs []uint64, numLogicalBlocks, numRegions, descsPerRegion, firstID uint64) ([]uint64, error) {
	var a cArena
	defer a.free()
	var out *C.pdkv_u64_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_mamba_descriptor_ids(a.u64s(logicalBlockIDs), C.size_t(len(logicalBlockIDs)), C.uint64_t(numLogicalBlocks), C.uint64_t(numRegions), C.uint64_t(descsPerRegion), C.uint64_t(firstID), &out, &cerr)
	return takeU64List(st, out, cerr)
}

// ExchangeClipParams says which of a request's block ids are worth exchanging (vLLM
// get_exchange_clipped_blocks).
type ExchangeClipParams struct {
	// Kind is the group kind.
	Kind GroupKind
	// HMAEnabled is the hybrid KV cache manager flag; without it lists pass unchanged.
	HMAEnabled bool
	// SlidingWindow is the window in tokens (sliding-window groups).
	SlidingWindow uint64
	// BlockSize is the tokens per logical block (sliding-window groups).
	BlockSize uint64
	// CacheMode is the Mamba cache mode (Mamba groups).
	CacheMode MambaCacheMode
	// NumSpeculativeBlocks is the Mamba scratch slots at the end of the list.
	NumSpeculativeBlocks uint64
}

// ClipExchangeBlocks clips one group's list: full attention unchanged; sliding window keeps the
// last SlidingWindowBlocksToKeep blocks; Mamba drops the trailing speculative slots and
// single-state modes keep only the last slot. Clip exactly once. Errors: ErrInvalidArgument.
func ClipExchangeBlocks(ids []uint64, params ExchangeClipParams) ([]uint64, error) {
	var a cArena
	defer a.free()
	var cp C.pdkv_exchange_clip_params_t
	cp.struct_size = C.size_t(unsafe.Sizeof(cp))
	cp.kind = C.int32_t(params.Kind)
	cp.hma_enabled = cBool(params.HMAEnabled)
	cp.sliding_window = C.uint64_t(params.SlidingWindow)
	cp.block_size = C.uint64_t(params.BlockSize)
	cp.cache_mode = C.int32_t(params.CacheMode)
	cp.num_speculative_blocks = C.uint64_t(params.NumSpeculativeBlocks)
	var out *C.pdkv_u64_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_clip_exchange_blocks(a.u64s(ids), C.size_t(len(ids)), &cp, &out, &cerr)
	return takeU64List(st, out, cerr)
}

// ZeroRange is tokens [TokenBegin, TokenEnd) inside kernel block Block.
type ZeroRange struct {
	// Block is the kernel block id.
	Block uint64
	// TokenBegin is the first token offset within the block.
	TokenBegin uint64
	// TokenEnd is one past the last token offset.
	TokenEnd uint64
}

// TokenInterval is the absolute token positions [Begin, End) of a request.
type TokenInterval struct {
	// Begin is the first position.
	Begin uint64
	// End is one past the last position.
	End uint64
}

// zeroRanges copies C zero ranges into a Go slice.
func zeroRanges(p *C.pdkv_zero_range_t, n C.size_t) []ZeroRange {
	out := make([]ZeroRange, int(n))
	if n > 0 && p != nil {
		for i, z := range unsafe.Slice(p, int(n)) {
			out[i] = ZeroRange{Block: uint64(z.block), TokenBegin: uint64(z.token_begin), TokenEnd: uint64(z.token_end)}
		}
	}
	return out
}

// takeZeroRangeList copies an owned pdkv_zero_range_list_t into a Go slice and frees it.
func takeZeroRangeList(st C.pdkv_status_t, list *C.pdkv_zero_range_list_t, cerr *C.pdkv_error_t) ([]ZeroRange, error) {
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	defer C.pdkv_zero_range_list_free(list)
	var items *C.pdkv_zero_range_t
	var n C.size_t
	cerr = nil
	if err := check(C.pdkv_zero_range_list_items(list, &items, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	return zeroRanges(items, n), nil
}

// ReceiveZeroRanges is vLLM's receive-side zeroing for one attention group. Errors:
// ErrInvalidArgument (tokensPerBlock % bsr != 0, zero sizes), ErrOverflow.
func ReceiveZeroRanges(localBlocks []uint64, tokensPerBlock, blockSizeRatio, remoteKernelLen uint64) ([]ZeroRange, error) {
	var a cArena
	defer a.free()
	var out *C.pdkv_zero_range_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_receive_zero_ranges(a.u64s(localBlocks), C.size_t(len(localBlocks)), C.uint64_t(tokensPerBlock), C.uint64_t(blockSizeRatio), C.uint64_t(remoteKernelLen), &out, &cerr)
	return takeZeroRangeList(st, out, cerr)
}

// UncoveredTokenRanges is the generalised zeroing: every token of the listed blocks D neither
// holds (position < heldTokens) nor receives (no written interval covers it), merged per block;
// null blocks (id 0) are never zeroed. Errors: ErrInvalidArgument (tokensPerBlock 0), ErrOverflow.
func UncoveredTokenRanges(localBlocks []uint64, firstBlockIndex, tokensPerBlock, heldTokens uint64, written []TokenInterval) ([]ZeroRange, error) {
	var a cArena
	defer a.free()
	var wp *C.pdkv_token_interval_t
	if len(written) > 0 {
		wp = (*C.pdkv_token_interval_t)(a.alloc(uintptr(len(written)) * unsafe.Sizeof(C.pdkv_token_interval_t{})))
		ws := unsafe.Slice(wp, len(written))
		for i, w := range written {
			ws[i] = C.pdkv_token_interval_t{begin: C.uint64_t(w.Begin), end: C.uint64_t(w.End)}
		}
	}
	var out *C.pdkv_zero_range_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_uncovered_token_ranges(a.u64s(localBlocks), C.size_t(len(localBlocks)), C.uint64_t(firstBlockIndex), C.uint64_t(tokensPerBlock), C.uint64_t(heldTokens), wp, C.size_t(len(written)), &out, &cerr)
	runtime.KeepAlive(written)
	return takeZeroRangeList(st, out, cerr)
}
