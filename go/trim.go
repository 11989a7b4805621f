package pdkv

/*
#include <pdkv.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// GroupTrimInput holds one group's trimming inputs. Attention kinds use KERNEL block ids of
// each side; Mamba groups use logical ids, exchange-clipped exactly once. Id 0 is the null block.
type GroupTrimInput struct {
	// Kind is the group kind.
	Kind GroupKind
	// CacheMode is the Mamba cache mode (Mamba groups only).
	CacheMode MambaCacheMode
	// LocalBlocks are the D blocks still to fill (after D's prefix hit).
	LocalBlocks []uint64
	// RemoteBlocks are the P blocks of the request.
	RemoteBlocks []uint64
	// LocalTokensPerBlock is D's tokens per block (kernel block size for attention kinds, Mamba
	// block size in "all" mode); nil in a transfer plan: from the metadata (NewGroupTrim needs it
	// for attention kinds and "all" mode). Set it with Ptr.
	LocalTokensPerBlock *uint64
	// RemoteTokensPerBlock is P's tokens per block; nil in a transfer plan: from the metadata.
	RemoteTokensPerBlock *uint64
	// RemoteComputedTokens is the prompt tokens P computed (N-1 rule already applied).
	RemoteComputedTokens uint64
	// LocalHitTokens is the tokens D already holds (its prefix-cache hit).
	LocalHitTokens uint64
	// SlidingWindow is the window in tokens (sliding-window groups).
	SlidingWindow uint64
	// LocalFirstBlock is the block-table index of LocalBlocks[0]; nil: LocalHitTokens / tokens
	// per block.
	LocalFirstBlock *uint64
	// RemoteFirstBlock is the block-table index of RemoteBlocks[0] (0 unless clipped).
	RemoteFirstBlock uint64
	// LocalKernelBlocksPerID (attention kinds): kernel blocks each LocalBlocks id stands for.
	// nil or 1: kernel ids. k > 1: logical ids as the block table keeps them (logical block b is
	// kernel blocks b*k .. b*k+k-1; id 0 is null with all k), so nothing expands them. Block-table
	// indexes and tokens per block stay in kernel blocks. Mamba groups: nil or 1.
	LocalKernelBlocksPerID *uint64
	// RemoteKernelBlocksPerID is the same for RemoteBlocks.
	RemoteKernelBlocksPerID *uint64
}

// toC fills a C trim input whose arrays live in the arena.
func (in *GroupTrimInput) toC(a *cArena, c *C.pdkv_group_trim_input_t) {
	c.struct_size = C.size_t(unsafe.Sizeof(*c))
	c.kind = C.int32_t(in.Kind)
	c.cache_mode = C.int32_t(in.CacheMode)
	c.local_blocks = a.u64s(in.LocalBlocks)
	c.num_local_blocks = C.size_t(len(in.LocalBlocks))
	c.remote_blocks = a.u64s(in.RemoteBlocks)
	c.num_remote_blocks = C.size_t(len(in.RemoteBlocks))
	// An optional field is set (its bit with it) when its pointer is non-nil; of a pair sharing
	// one bit, a nil side takes its default (tokens per block: 0, refused; kernel blocks: 1).
	c.field_mask = 0
	if in.LocalTokensPerBlock != nil || in.RemoteTokensPerBlock != nil {
		c.field_mask |= C.PDKV_TRIM_FIELD_TOKENS_PER_BLOCK
		c.local_tokens_per_block = C.uint64_t(deref(in.LocalTokensPerBlock, 0))
		c.remote_tokens_per_block = C.uint64_t(deref(in.RemoteTokensPerBlock, 0))
	}
	c.remote_computed_tokens = C.uint64_t(in.RemoteComputedTokens)
	c.local_hit_tokens = C.uint64_t(in.LocalHitTokens)
	c.sliding_window = C.uint64_t(in.SlidingWindow)
	if in.LocalFirstBlock != nil {
		c.field_mask |= C.PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK
		c.local_first_block = C.uint64_t(*in.LocalFirstBlock)
	}
	c.remote_first_block = C.uint64_t(in.RemoteFirstBlock)
	if in.LocalKernelBlocksPerID != nil || in.RemoteKernelBlocksPerID != nil {
		c.field_mask |= C.PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID
		c.local_kernel_blocks_per_id = C.uint64_t(deref(in.LocalKernelBlocksPerID, 1))
		c.remote_kernel_blocks_per_id = C.uint64_t(deref(in.RemoteKernelBlocksPerID, 1))
	}
}

// Ptr returns a pointer to v: how an optional field of an input struct is set.
func Ptr[T any](v T) *T { return &v }

// deref is *p, or def when p is nil.
func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// TokenRun is NumTokens tokens copied from RemoteBlock (from RemoteTokenBegin) into LocalBlock
// (from LocalTokenBegin); it never crosses a block boundary.
type TokenRun struct {
	// LocalBlock is the D block.
	LocalBlock uint64
	// LocalTokenBegin is the first token offset in the D block.
	LocalTokenBegin uint64
	// RemoteBlock is the P block.
	RemoteBlock uint64
	// RemoteTokenBegin is the first token offset in the P block.
	RemoteTokenBegin uint64
	// NumTokens is the run length.
	NumTokens uint64
}

// StatePair is one whole Mamba state copied from RemoteBlock into LocalBlock; Tokens is the
// prompt tokens the state has consumed.
type StatePair struct {
	// LocalBlock is the D slot.
	LocalBlock uint64
	// RemoteBlock is the P slot.
	RemoteBlock uint64
	// Tokens is the prompt tokens the state has consumed.
	Tokens uint64
}

// GroupTrim is the trimmed transfer of one group (pdkv_group_trim_t). Immutable.
type GroupTrim struct {
	h handle[C.pdkv_group_trim_t]
}

// NewGroupTrim trims one group. Errors: ErrInvalidArgument (unknown kind / cache mode, zero
// tokens per block where needed), ErrCoverage (a token or the final state D needs has no local
// slot or no remote source), ErrOverflow.
func NewGroupTrim(input GroupTrimInput) (*GroupTrim, error) {
	var a cArena
	defer a.free()
	var ci C.pdkv_group_trim_input_t
	input.toC(&a, &ci)
	var out *C.pdkv_group_trim_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_group_trim_new(&ci, &out, &cerr), cerr); err != nil {
		return nil, err
	}
	g := &GroupTrim{h: handle[C.pdkv_group_trim_t]{ptr: out, free: func(p *C.pdkv_group_trim_t) { C.pdkv_group_trim_free(p) }}}
	runtime.SetFinalizer(g, func(g *GroupTrim) { g.h.close() })
	return g, nil
}

// Close frees the trim. It is idempotent (closing twice does nothing) and waits for calls in
// flight. Close on a nil *GroupTrim does nothing and returns nil, like a second Close.
func (g *GroupTrim) Close() error { return closeHandle(g, g.ref()) }

// ref returns the handle of g, or nil for a nil *GroupTrim: acquire, acquireArg and closeHandle
// turn that into a nil error (or a no-op) instead of a nil pointer dereference.
func (g *GroupTrim) ref() *handle[C.pdkv_group_trim_t] {
	if g == nil {
		return nil
	}
	return &g.h
}

// Summary returns the group kind and the tokens transferred.
func (g *GroupTrim) Summary() (kind GroupKind, transferredTokens uint64, err error) {
	p, err := g.ref().acquire()
	if err != nil {
		return 0, 0, err
	}
	defer g.h.release()
	var k C.int32_t
	var n C.uint64_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_group_trim_summary(p, &k, &n, &cerr)
	runtime.KeepAlive(g)
	if err := check(st, cerr); err != nil {
		return 0, 0, err
	}
	return GroupKind(k), uint64(n), nil
}

// Runs returns the token runs (attention kinds, token order).
func (g *GroupTrim) Runs() ([]TokenRun, error) {
	p, err := g.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer g.h.release()
	var r *C.pdkv_token_run_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_group_trim_runs(p, &r, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := make([]TokenRun, int(n))
	if n > 0 {
		for i, x := range unsafe.Slice(r, int(n)) {
			out[i] = TokenRun{uint64(x.local_block), uint64(x.local_token_begin), uint64(x.remote_block), uint64(x.remote_token_begin), uint64(x.num_tokens)}
		}
	}
	runtime.KeepAlive(g)
	return out, nil
}

// States returns the state pairs (Mamba groups, position order).
func (g *GroupTrim) States() ([]StatePair, error) {
	p, err := g.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer g.h.release()
	var r *C.pdkv_state_pair_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_group_trim_states(p, &r, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := make([]StatePair, int(n))
	if n > 0 {
		for i, x := range unsafe.Slice(r, int(n)) {
			out[i] = StatePair{uint64(x.local_block), uint64(x.remote_block), uint64(x.tokens)}
		}
	}
	runtime.KeepAlive(g)
	return out, nil
}

// ZeroRanges returns the token ranges of listed local blocks D neither holds nor receives
// (attention kinds): zero them.
func (g *GroupTrim) ZeroRanges() ([]ZeroRange, error) {
	p, err := g.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer g.h.release()
	var r *C.pdkv_zero_range_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_group_trim_zero_ranges(p, &r, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := zeroRanges(r, n)
	runtime.KeepAlive(g)
	return out, nil
}

// UnfilledStates returns the listed local Mamba slots no remote state fills; never publish
// them as cache hits.
func (g *GroupTrim) UnfilledStates() ([]uint64, error) {
	p, err := g.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer g.h.release()
	var r *C.uint64_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_group_trim_unfilled_states(p, &r, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := u64Slice(r, n)
	runtime.KeepAlive(g)
	return out, nil
}
