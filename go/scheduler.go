package pdkv

/*
#include <pdkv.h>
*/
import "C"

import (
	"unsafe"
)

// AlignedSplitV0604Input holds the inputs of the v0604 Mamba align-mode block-aligned chunk
// split (vLLM #42554).
type AlignedSplitV0604Input struct {
	// NumComputedTokens is the tokens already computed.
	NumComputedTokens uint64
	// NumNewLocalComputedTokens is the new local prefix-cache hit.
	NumNewLocalComputedTokens uint64
	// NumExternalComputedTokens is the tokens loaded by the connector.
	NumExternalComputedTokens uint64
	// NumNewTokens is proposed by budget / threshold.
	NumNewTokens uint64
	// NumPromptTokens is the prompt length.
	NumPromptTokens uint64
	// NumTokens is prompt + output so far.
	NumTokens uint64
	// BlockSize is the Mamba block size in tokens.
	BlockSize uint64
	// UseEagle keeps one block back (EAGLE).
	UseEagle bool
	// LoadKVAsync marks an asynchronous connector load (no split).
	LoadKVAsync bool
}

// MambaAlignedSplitV0604 returns the (possibly reduced) number of new tokens, v0604 form.
// Errors: ErrInvalidArgument (BlockSize 0).
func MambaAlignedSplitV0604(in AlignedSplitV0604Input) (uint64, error) {
	var c C.pdkv_aligned_split_v0604_input_t
	c.struct_size = C.size_t(unsafe.Sizeof(c))
	c.num_computed_tokens = C.uint64_t(in.NumComputedTokens)
	c.num_new_local_computed_tokens = C.uint64_t(in.NumNewLocalComputedTokens)
	c.num_external_computed_tokens = C.uint64_t(in.NumExternalComputedTokens)
	c.num_new_tokens = C.uint64_t(in.NumNewTokens)
	c.num_prompt_tokens = C.uint64_t(in.NumPromptTokens)
	c.num_tokens = C.uint64_t(in.NumTokens)
	c.block_size = C.uint64_t(in.BlockSize)
	c.use_eagle = cBool(in.UseEagle)
	c.load_kv_async = cBool(in.LoadKVAsync)
	var out C.uint64_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_mamba_aligned_split_v0604(&c, &out, &cerr), cerr); err != nil {
		return 0, err
	}
	return uint64(out), nil
}

// AlignedSplitInput holds the inputs of the main-branch Mamba align-mode split.
type AlignedSplitInput struct {
	// Start is the tokens already computed (incl. external).
	Start uint64
	// NumNewTokens is proposed by budget / threshold.
	NumNewTokens uint64
	// NumPromptTokens is the prompt length.
	NumPromptTokens uint64
	// NumTokens is prompt + output so far.
	NumTokens uint64
	// BlockSize is the Mamba block size in tokens.
	BlockSize uint64
	// FloorUnit is a finer unit to floor a sub-block chunk end to (used when the block is
	// wider than every chunk and that floor still advances); nil means no floor (vLLM main).
	// Optional fields are set with Ptr.
	FloorUnit *uint64
	// TailHashBlockSize is the tail hash block size; nil is off.
	TailHashBlockSize *uint64
	// SharedPrefixTokens is the shared prefix; 0 is none.
	SharedPrefixTokens uint64
	// MaxNumScheduledTokens is the step budget; nil is unlimited.
	MaxNumScheduledTokens *uint64
	// LongPrefillTokenThreshold is the long-prefill threshold; nil is none.
	LongPrefillTokenThreshold *uint64
	// UseEagle keeps one block back (EAGLE).
	UseEagle bool
	// LoadKVAsync marks an asynchronous connector load.
	LoadKVAsync bool
	// DeferOversizedBlock returns 0 (the request waits) instead of a sub-block chunk that no
	// floor keeps, when the block is wider than every chunk. The default (false) is vLLM
	// main's: such a request still progresses.
	DeferOversizedBlock bool
}

// MambaAlignedSplit returns the new tokens for this step, main-branch form. 0 means the
// request waits this step: a block that fits in a chunk is not reached by this step's budget,
// or DeferOversizedBlock asked for it. Errors: ErrInvalidArgument (BlockSize 0).
func MambaAlignedSplit(in AlignedSplitInput) (uint64, error) {
	var c C.pdkv_aligned_split_input_t
	c.struct_size = C.size_t(unsafe.Sizeof(c))
	c.start = C.uint64_t(in.Start)
	c.num_new_tokens = C.uint64_t(in.NumNewTokens)
	c.num_prompt_tokens = C.uint64_t(in.NumPromptTokens)
	c.num_tokens = C.uint64_t(in.NumTokens)
	c.block_size = C.uint64_t(in.BlockSize)
	// An optional field is set (its bit with it) when its pointer is non-nil.
	opt := func(p *uint64, bit C.uint64_t, field *C.uint64_t) {
		if p != nil {
			c.field_mask |= bit
			*field = C.uint64_t(*p)
		}
	}
	opt(in.FloorUnit, C.PDKV_SPLIT_FIELD_FLOOR_UNIT, &c.floor_unit)
	opt(in.TailHashBlockSize, C.PDKV_SPLIT_FIELD_TAIL_HASH_BLOCK_SIZE, &c.tail_hash_block_size)
	c.shared_prefix_tokens = C.uint64_t(in.SharedPrefixTokens)
	opt(in.MaxNumScheduledTokens, C.PDKV_SPLIT_FIELD_MAX_NUM_SCHEDULED_TOKENS, &c.max_num_scheduled_tokens)
	opt(in.LongPrefillTokenThreshold, C.PDKV_SPLIT_FIELD_LONG_PREFILL_TOKEN_THRESHOLD, &c.long_prefill_token_threshold)
	c.use_eagle = cBool(in.UseEagle)
	c.load_kv_async = cBool(in.LoadKVAsync)
	if in.DeferOversizedBlock {
		c.defer_oversized_block = 1
	}
	var out C.uint64_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_mamba_aligned_split(&c, &out, &cerr), cerr); err != nil {
		return 0, err
	}
	return uint64(out), nil
}

// RemoteDecodePrefill is the P side of a request decoded remotely.
type RemoteDecodePrefill struct {
	// NumPromptTokens is the prompt length.
	NumPromptTokens uint64
	// MaxTokens is the request's max_tokens.
	MaxTokens uint64
	// Truncated says the N-1 truncation was applied.
	Truncated bool
}

// TruncateForRemoteDecode applies the P side of the N-1 rule: Mamba truncates the prompt to
// N-1 (N > 1) and sets MaxTokens to 1, once (idempotent); non-Mamba models only get MaxTokens 1.
func TruncateForRemoteDecode(in RemoteDecodePrefill, hasMamba bool) (RemoteDecodePrefill, error) {
	var c C.pdkv_remote_decode_prefill_t
	c.struct_size = C.size_t(unsafe.Sizeof(c))
	c.num_prompt_tokens = C.uint64_t(in.NumPromptTokens)
	c.max_tokens = C.uint64_t(in.MaxTokens)
	c.truncated = cBool(in.Truncated)
	var o C.pdkv_remote_decode_prefill_t
	o.struct_size = C.size_t(unsafe.Sizeof(o))
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_truncate_for_remote_decode(&c, cBool(hasMamba), &o, &cerr), cerr); err != nil {
		return RemoteDecodePrefill{}, err
	}
	return RemoteDecodePrefill{NumPromptTokens: uint64(o.num_prompt_tokens), MaxTokens: uint64(o.max_tokens), Truncated: o.truncated != 0}, nil
}

// RemoteDecodePrefillPlan is what P schedules for a remotely decoded request.
type RemoteDecodePrefillPlan struct {
	// NumPromptTokens is the prompt length after truncation.
	NumPromptTokens uint64
	// ComputedTokens is the usable local hit.
	ComputedTokens uint64
	// NewTokens is the tokens to compute, >= 1.
	NewTokens uint64
}

// PlanRemoteDecodePrefill fixes vLLM #53514: the hit is capped after truncation at the last
// whole block strictly before the last prompt token. Errors: ErrInvalidArgument (blockSize 0,
// 0-token prompt).
func PlanRemoteDecodePrefill(numPromptTokens, localHitTokens, blockSize uint64, hasMamba bool) (RemoteDecodePrefillPlan, error) {
	var o C.pdkv_remote_decode_prefill_plan_t
	o.struct_size = C.size_t(unsafe.Sizeof(o))
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_plan_remote_decode_prefill(C.uint64_t(numPromptTokens), C.uint64_t(localHitTokens), C.uint64_t(blockSize), cBool(hasMamba), &o, &cerr), cerr); err != nil {
		return RemoteDecodePrefillPlan{}, err
	}
	return RemoteDecodePrefillPlan{NumPromptTokens: uint64(o.num_prompt_tokens), ComputedTokens: uint64(o.computed_tokens), NewTokens: uint64(o.new_tokens)}, nil
}

// OffloadLayer is one registered KV tensor: its size and the page (bytes per block) of the
// layer using it.
type OffloadLayer struct {
	// TensorBytes is the tensor size.
	TensorBytes uint64
	// PageBytes is the bytes per block.
	PageBytes uint64
}

// OffloadGeometry is the KV offload geometry.
type OffloadGeometry struct {
	// NumBlocks comes from the KV cache configuration, never a tensor shape.
	NumBlocks uint64
	// HashBlocksPerBlock is gpu_block_size / hash_block_size.
	HashBlocksPerBlock uint64
}

// DeriveOffloadGeometry derives the offload geometry (vLLM #38554). Errors: ErrInvalidArgument
// (gpuBlockSize not a multiple of hashBlockSize, naming both; a zero size), ErrOutOfBounds (a
// tensor smaller than configNumBlocks pages), ErrOverflow.
func DeriveOffloadGeometry(configNumBlocks, gpuBlockSize, hashBlockSize uint64, layers []OffloadLayer) (OffloadGeometry, error) {
	var lp *C.pdkv_offload_layer_t
	var keep []C.pdkv_offload_layer_t
	if len(layers) > 0 {
		keep = make([]C.pdkv_offload_layer_t, len(layers))
		for i, l := range layers {
			keep[i] = C.pdkv_offload_layer_t{tensor_bytes: C.uint64_t(l.TensorBytes), page_bytes: C.uint64_t(l.PageBytes)}
		}
		lp = &keep[0]
	}
	var o C.pdkv_offload_geometry_t
	o.struct_size = C.size_t(unsafe.Sizeof(o))
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_derive_offload_geometry(C.uint64_t(configNumBlocks), C.uint64_t(gpuBlockSize), C.uint64_t(hashBlockSize), lp, C.size_t(len(layers)), &o, &cerr), cerr); err != nil {
		return OffloadGeometry{}, err
	}
	return OffloadGeometry{NumBlocks: uint64(o.num_blocks), HashBlocksPerBlock: uint64(o.hash_blocks_per_block)}, nil
}
