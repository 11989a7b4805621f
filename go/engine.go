package pdkv

/*
#include <pdkv.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// The engine-level API (pdkv/engine.h): describe an engine rank once (model, settings, TP rank,
// where its KV tensors live); pdkv derives its KV-cache groups as vLLM's hybrid KV-cache manager
// forms them, its handshake metadata and registration descriptors. Per request, PlanRequest takes
// per group the logical block ids of D's block table and those P exported, the prompt length and
// D's prefix-cache hit, and returns the same TransferPlan Compile does: the N-1 rule, kernel-id
// expansion and the Mamba slots of each cache mode are pdkv's job. A request that does not fit
// the engine is ErrInvalidArgument saying what to pass instead.

// EngineOptions describe one engine rank.
type EngineOptions struct {
	// EngineID is the non-empty id the engine advertises.
	EngineID string
	// TpRank is this rank (< Config.TpSize).
	TpRank uint32
	// NumLogicalBlocks is the logical blocks per region, null block 0 included.
	NumLogicalBlocks uint64
	// Base is the address of region 0 when RegionBases is empty (regions back to back).
	Base uint64
	// RegionBases, if non-empty, holds one address per region.
	RegionBases []uint64
	// KVLayout is the attention KV layout (default HND).
	KVLayout KVLayout
	// PrefixCaching is nil to derive it (on iff the Mamba cache mode is not none), else on/off.
	PrefixCaching *bool
}

// DefaultEngineOptions returns the library's defaults (pdkv_engine_options_init): engine id
// "engine", rank 0, 64 logical blocks, regions back to back from 2^40, HND, derived prefix
// caching.
func DefaultEngineOptions() EngineOptions {
	var c C.pdkv_engine_options_t
	if err := check(C.pdkv_engine_options_init(&c, nil), nil); err != nil {
		panic("pdkv_engine_options_init failed: " + err.Error())
	}
	return EngineOptions{
		EngineID:         C.GoString(c.engine_id),
		TpRank:           uint32(c.tp_rank),
		NumLogicalBlocks: uint64(c.num_logical_blocks),
		Base:             uint64(c.base),
		KVLayout:         KVLayout(c.kv_layout),
	}
}

// Engine is one engine rank described once (pdkv_engine_t). Immutable; safe for concurrent use.
type Engine struct {
	h handle[C.pdkv_engine_t]
}

// NewEngine describes an engine rank running model with config. Errors: ErrInvalidArgument (a
// model whose groups pdkv does not form, RegionBases of another count than the engine's regions,
// a rank past the TP size, ...), the errors of NewGeometry, ErrClosed (model closed).
func NewEngine(model *Model, config EngineConfig, opts EngineOptions) (*Engine, error) {
	mp, err := model.ref().acquireArg("model")
	if err != nil {
		return nil, err
	}
	defer model.h.release()
	var a cArena
	defer a.free()
	var o C.pdkv_engine_options_t
	if err := check(C.pdkv_engine_options_init(&o, nil), nil); err != nil {
		return nil, err
	}
	cc := (*C.pdkv_engine_config_t)(a.alloc(unsafe.Sizeof(C.pdkv_engine_config_t{})))
	freeConfig := config.toC(cc)
	defer freeConfig()
	id, err := a.str("opts.EngineID", opts.EngineID)
	if err != nil {
		return nil, err
	}
	o.model = mp
	o.config = cc
	o.engine_id = id
	o.tp_rank = C.uint32_t(opts.TpRank)
	o.num_logical_blocks = C.uint64_t(opts.NumLogicalBlocks)
	o.base = C.uint64_t(opts.Base)
	o.region_bases = a.u64s(opts.RegionBases)
	o.num_region_bases = C.size_t(len(opts.RegionBases))
	o.kv_layout = C.int32_t(opts.KVLayout)
	if opts.PrefixCaching != nil {
		o.field_mask |= C.PDKV_ENGINE_FIELD_PREFIX_CACHING
		o.prefix_caching = cBool(*opts.PrefixCaching)
	}
	var out *C.pdkv_engine_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_engine_new(&o, &out, &cerr)
	runtime.KeepAlive(model)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	e := &Engine{h: handle[C.pdkv_engine_t]{ptr: out, free: func(p *C.pdkv_engine_t) { C.pdkv_engine_free(p) }}}
	runtime.SetFinalizer(e, func(e *Engine) { e.h.close() })
	return e, nil
}

// Close frees the engine. It is idempotent (closing twice does nothing) and waits for calls in
// flight. Close on a nil *Engine does nothing and returns nil, like a second Close.
func (e *Engine) Close() error { return closeHandle(e, e.ref()) }

// ref returns the handle of e, or nil for a nil *Engine.
func (e *Engine) ref() *handle[C.pdkv_engine_t] {
	if e == nil {
		return nil
	}
	return &e.h
}

// EngineInfo holds the scalars of an engine.
type EngineInfo struct {
	// NumGroups is the number of KV-cache groups; NumRegions the registered KV tensors.
	NumGroups  int
	NumRegions uint32
	// TpSize and TpRank are the engine's TP size and this rank.
	TpSize, TpRank uint32
	// CacheMode is the Mamba cache mode (pure attention: none).
	CacheMode MambaCacheMode
	// LogicalBlockSize is the tokens per block of the block table, KernelBlockSize per kernel
	// block, PhysicalBlocksPerLogical the kernel blocks per logical block.
	LogicalBlockSize, KernelBlockSize, PhysicalBlocksPerLogical uint64
	// NumLogicalBlocks is the logical blocks per region.
	NumLogicalBlocks uint64
	// NumSpeculativeTokens is the Mamba scratch slots at the end of each Mamba list.
	NumSpeculativeTokens uint64
	// PrefixCaching reports whether the engine can hold a prefix-cache hit.
	PrefixCaching bool
}

// Info returns the engine's scalars. Errors: ErrClosed.
func (e *Engine) Info() (EngineInfo, error) {
	p, err := e.ref().acquire()
	if err != nil {
		return EngineInfo{}, err
	}
	defer e.h.release()
	var i C.pdkv_engine_info_t
	i.struct_size = C.size_t(unsafe.Sizeof(i))
	var cerr *C.pdkv_error_t
	st := C.pdkv_engine_get_info(p, &i, &cerr)
	runtime.KeepAlive(e)
	if err := check(st, cerr); err != nil {
		return EngineInfo{}, err
	}
	return EngineInfo{
		NumGroups: int(i.num_groups), NumRegions: uint32(i.num_regions), TpSize: uint32(i.tp_size),
		TpRank: uint32(i.tp_rank), CacheMode: MambaCacheMode(i.cache_mode),
		LogicalBlockSize: uint64(i.logical_block_size), KernelBlockSize: uint64(i.kernel_block_size),
		PhysicalBlocksPerLogical: uint64(i.physical_blocks_per_logical),
		NumLogicalBlocks:         uint64(i.num_logical_blocks), NumSpeculativeTokens: uint64(i.num_speculative_tokens),
		PrefixCaching: i.prefix_caching != 0,
	}, nil
}

// EngineGroup is one KV-cache group: its kind, its model layers (ascending) and the region each
// layer uses (Regions[i] for Layers[i]).
type EngineGroup struct {
	Kind    GroupKind
	Layers  []uint32
	Regions []uint32
}

// Group returns KV-cache group index (copied). Errors: ErrOutOfBounds (past the last group),
// ErrClosed.
func (e *Engine) Group(index int) (EngineGroup, error) {
	if index < 0 {
		return EngineGroup{}, goErr(StatusOutOfBounds, "KV-cache group index %d is negative", index)
	}
	p, err := e.ref().acquire()
	if err != nil {
		return EngineGroup{}, err
	}
	defer e.h.release()
	var g C.pdkv_engine_group_t
	g.struct_size = C.size_t(unsafe.Sizeof(g))
	var cerr *C.pdkv_error_t
	st := C.pdkv_engine_group(p, C.size_t(index), &g, &cerr)
	if err := check(st, cerr); err != nil {
		runtime.KeepAlive(e)
		return EngineGroup{}, err
	}
	out := EngineGroup{Kind: GroupKind(g.kind), Layers: u32Slice(g.layers, g.num_layers),
		Regions: u32Slice(g.regions, g.num_regions)}
	runtime.KeepAlive(e)
	return out, nil
}

// Groups returns every KV-cache group, in the order a request lists its groups. Errors: ErrClosed.
func (e *Engine) Groups() ([]EngineGroup, error) {
	info, err := e.Info()
	if err != nil {
		return nil, err
	}
	out := make([]EngineGroup, info.NumGroups)
	for i := range out {
		if out[i], err = e.Group(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Metadata returns the metadata this rank advertises in the handshake, a new handle (close it).
// Errors: ErrClosed.
func (e *Engine) Metadata() (*EngineMetadata, error) {
	p, err := e.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer e.h.release()
	var out *C.pdkv_engine_metadata_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_engine_get_metadata(p, &out, &cerr)
	runtime.KeepAlive(e)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	return newEngineMetadata(out), nil
}

// RegistrationDescriptors returns the rank's registration descriptors in vLLM's local-handle
// order: every kernel block of every region as attention descriptors, then (Mamba models) every
// logical block's conv projections and temporal state. Errors: ErrOverflow, ErrClosed.
func (e *Engine) RegistrationDescriptors() (*DescriptorList, error) {
	p, err := e.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer e.h.release()
	var out *C.pdkv_descriptor_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_engine_registration_descriptors(p, &out, &cerr)
	runtime.KeepAlive(e)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	return newDescriptorList(out), nil
}

// PlanContext builds the plan context of this (D) engine and one P engine: the metadata of each
// of its ranks (any order, each once) and its settings. Errors: ErrInvalidArgument (no P rank, a
// P rank of another model or TP size), ErrNullPointer (a nil element), the errors of
// NewPlanContext, ErrClosed.
func (e *Engine) PlanContext(remote []*EngineMetadata, remoteConfig EngineConfig, permuteOnReceive bool) (*PlanContext, error) {
	p, err := e.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer e.h.release()
	var a cArena
	defer a.free()
	arr, release, err := acquireAll(&a, remote, "remote")
	if err != nil {
		return nil, err
	}
	defer release()
	cc := (*C.pdkv_engine_config_t)(a.alloc(unsafe.Sizeof(C.pdkv_engine_config_t{})))
	freeConfig := remoteConfig.toC(cc)
	defer freeConfig()
	var peer C.pdkv_engine_peer_t
	peer.struct_size = C.size_t(unsafe.Sizeof(peer))
	peer.remote = arr
	peer.num_remote = C.size_t(len(remote))
	peer.remote_config = cc
	if permuteOnReceive {
		peer.permute_on_receive = 1
	}
	var out *C.pdkv_plan_context_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_engine_plan_context_new(p, &peer, &out, &cerr)
	runtime.KeepAlive(e)
	runtime.KeepAlive(remote)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	c := &PlanContext{h: handle[C.pdkv_plan_context_t]{ptr: out, free: func(p *C.pdkv_plan_context_t) { C.pdkv_plan_context_free(p) }}}
	runtime.SetFinalizer(c, func(c *PlanContext) { c.h.close() })
	return c, nil
}

// RequestGroup is one group of a request, in the engine's group order: D's block table for the
// group (logical ids from the request's first block, hit blocks included; a Mamba list as the
// table holds it) and P's logical ids as P exported them (exchange-clipped).
type RequestGroup struct {
	LocalBlockIDs  []uint64
	RemoteBlockIDs []uint64
}

// EngineRequest is one request as D's scheduler holds it.
type EngineRequest struct {
	// Groups holds one entry per engine group.
	Groups []RequestGroup
	// NumPromptTokens is the prompt length N (P computes N-1 of them for Mamba models).
	NumPromptTokens uint64
	// NumLocalComputedTokens is D's prefix-cache hit, whole blocks.
	NumLocalComputedTokens uint64
}

// PlanRequest compiles one request's plan against ctx (built for this engine). Errors:
// ErrInvalidArgument (a request that does not fit the engine: the message names the value and
// what to pass instead), the errors of Compile (ErrCoverage, ...), ErrClosed.
func (e *Engine) PlanRequest(ctx *PlanContext, req EngineRequest) (*TransferPlan, error) {
	var out *C.pdkv_transfer_plan_t
	err := e.planRequest(ctx, req, func(p *C.pdkv_engine_t, cp *C.pdkv_plan_context_t, r *C.pdkv_engine_request_t) error {
		var cerr *C.pdkv_error_t
		return check(C.pdkv_engine_plan_request(p, cp, r, &out, &cerr), cerr)
	})
	if err != nil {
		return nil, err
	}
	t := &TransferPlan{h: handle[C.pdkv_transfer_plan_t]{ptr: out, free: func(p *C.pdkv_transfer_plan_t) { C.pdkv_transfer_plan_free(p) }}}
	runtime.SetFinalizer(t, func(t *TransferPlan) { t.h.close() })
	return t, nil
}

// PlanRequestInto plans the request into plan (from NewTransferPlan or an earlier plan), replacing
// its content, as CompileInto is to Compile: the same plan and errors as PlanRequest without a new
// handle, the library reusing the plan's buffers (pdkv_engine_plan_request_into allocates nothing
// once the plan has grown). Slices obtained from plan before the call must not be used after it.
// On error plan holds an empty plan. plan is held exclusively for the call (other calls on it
// wait); engine and ctx may be shared. Errors: those of PlanRequest; ErrInvalidArgument (plan nil).
func (e *Engine) PlanRequestInto(ctx *PlanContext, req EngineRequest, plan *TransferPlan) error {
	return e.planRequest(ctx, req, func(p *C.pdkv_engine_t, cp *C.pdkv_plan_context_t, r *C.pdkv_engine_request_t) error {
		if plan == nil {
			return nilErr("TransferPlan", "plan")
		}
		tp, err := plan.ref().acquireExclusive()
		if err != nil {
			return err
		}
		defer plan.h.releaseExclusive()
		var cerr *C.pdkv_error_t
		err = check(C.pdkv_engine_plan_request_into(p, cp, r, tp, &cerr), cerr)
		runtime.KeepAlive(plan)
		return err
	})
}

// planRequest holds the engine and ctx, packs req into C memory and runs call (one of the two C
// entries) on it: what PlanRequest and PlanRequestInto share.
func (e *Engine) planRequest(ctx *PlanContext, req EngineRequest,
	call func(p *C.pdkv_engine_t, cp *C.pdkv_plan_context_t, r *C.pdkv_engine_request_t) error) error {
	p, err := e.ref().acquire()
	if err != nil {
		return err
	}
	defer e.h.release()
	cp, err := ctx.ref().acquireArg("ctx")
	if err != nil {
		return err
	}
	defer ctx.h.release()
	var a cArena
	defer a.free()
	var gp *C.pdkv_engine_request_group_t
	if len(req.Groups) > 0 {
		gp = (*C.pdkv_engine_request_group_t)(a.alloc(uintptr(len(req.Groups)) * unsafe.Sizeof(C.pdkv_engine_request_group_t{})))
		gs := unsafe.Slice(gp, len(req.Groups))
		for i, g := range req.Groups {
			gs[i].local_block_ids = a.u64s(g.LocalBlockIDs)
			gs[i].num_local_block_ids = C.size_t(len(g.LocalBlockIDs))
			gs[i].remote_block_ids = a.u64s(g.RemoteBlockIDs)
			gs[i].num_remote_block_ids = C.size_t(len(g.RemoteBlockIDs))
		}
	}
	var r C.pdkv_engine_request_t
	r.struct_size = C.size_t(unsafe.Sizeof(r))
	r.groups = gp
	r.num_groups = C.size_t(len(req.Groups))
	r.num_prompt_tokens = C.uint64_t(req.NumPromptTokens)
	r.num_local_computed_tokens = C.uint64_t(req.NumLocalComputedTokens)
	err = call(p, cp, &r)
	runtime.KeepAlive(e)
	runtime.KeepAlive(ctx)
	return err
}
