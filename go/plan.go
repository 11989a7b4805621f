package pdkv

/*
#include <pdkv.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// PlanContextParams are the inputs of a plan context: one D rank against the ranks of ONE P
// engine.
type PlanContextParams struct {
	// Local is the D rank (reader).
	Local *EngineMetadata
	// Remote are the P ranks of one engine, any order (at least one).
	Remote []*EngineMetadata
	// LocalGeometry is D's geometry; required (with RemoteGeometry) when a group is Mamba.
	LocalGeometry *Geometry
	// RemoteGeometry is P's geometry; nil together with LocalGeometry for attention-only plans.
	RemoteGeometry *Geometry
	// Mapping, if non-nil, overrides the TP mapping derived from the metadata (it is copied).
	Mapping *TpMapping
	// PermuteOnReceive lets D read P's blocks in P's KV layout when the layouts differ and
	// permute them into its own after receipt (vLLM's enable_permute_local_kv); without it
	// different layouts are ErrUnsupportedLayout.
	PermuteOnReceive bool
}

// PlanContext is everything about one (D rank, P engine) pair that does not change per
// request; build it once after the handshake. Immutable.
type PlanContext struct {
	h handle[C.pdkv_plan_context_t]
}

// NewPlanContext builds a context (metadata, geometries and mapping are copied). Errors:
// ErrNullPointer (nil Local or Remote element), ErrInvalidArgument (no remote ranks, remote
// ranks with different TP sizes, only one geometry given), ErrTpNotDivisible,
// ErrHeadsNotDivisible, ErrClosed.
func NewPlanContext(params PlanContextParams) (*PlanContext, error) {
	var a cArena
	defer a.free()
	var cp C.pdkv_plan_context_params_t
	cp.struct_size = C.size_t(unsafe.Sizeof(cp))
	lp, err := params.Local.ref().acquireArg("params.Local")
	if err != nil {
		return nil, err
	}
	defer params.Local.h.release()
	cp.local = lp
	arr, release, err := acquireAll(&a, params.Remote, "params.Remote")
	if err != nil {
		return nil, err
	}
	defer release()
	cp.remote = arr
	cp.num_remote = C.size_t(len(params.Remote))
	if params.PermuteOnReceive {
		cp.permute_on_receive = 1
	}
	if params.LocalGeometry != nil {
		g, err := params.LocalGeometry.ref().acquire()
		if err != nil {
			return nil, err
		}
		defer params.LocalGeometry.h.release()
		cp.local_geometry = g
	}
	if params.RemoteGeometry != nil {
		g, err := params.RemoteGeometry.ref().acquire()
		if err != nil {
			return nil, err
		}
		defer params.RemoteGeometry.h.release()
		cp.remote_geometry = g
	}
	if params.Mapping != nil {
		m, err := params.Mapping.ref().acquire()
		if err != nil {
			return nil, err
		}
		defer params.Mapping.h.release()
		cp.mapping = m
	}
	var out *C.pdkv_plan_context_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_plan_context_new(&cp, &out, &cerr)
	runtime.KeepAlive(params.Local)
	runtime.KeepAlive(params.Remote)
	runtime.KeepAlive(params.LocalGeometry)
	runtime.KeepAlive(params.RemoteGeometry)
	runtime.KeepAlive(params.Mapping)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	c := &PlanContext{h: handle[C.pdkv_plan_context_t]{ptr: out, free: func(p *C.pdkv_plan_context_t) { C.pdkv_plan_context_free(p) }}}
	runtime.SetFinalizer(c, func(c *PlanContext) { c.h.close() })
	return c, nil
}

// Close frees the context. It is idempotent (closing twice does nothing) and waits for calls in
// flight. Close on a nil *PlanContext does nothing and returns nil, like a second Close.
func (c *PlanContext) Close() error { return closeHandle(c, c.ref()) }

// ref returns the handle of c, or nil for a nil *PlanContext: acquire, acquireArg and closeHandle
// turn that into a nil error (or a no-op) instead of a nil pointer dereference.
func (c *PlanContext) ref() *handle[C.pdkv_plan_context_t] {
	if c == nil {
		return nil
	}
	return &c.h
}

// Mapping returns the context's TP mapping as a new handle (close it).
func (c *PlanContext) Mapping() (*TpMapping, error) {
	p, err := c.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer c.h.release()
	var out *C.pdkv_tp_mapping_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_plan_context_mapping(p, &out, &cerr)
	runtime.KeepAlive(c)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	m := &TpMapping{h: handle[C.pdkv_tp_mapping_t]{ptr: out, free: func(p *C.pdkv_tp_mapping_t) { C.pdkv_tp_mapping_free(p) }}}
	runtime.SetFinalizer(m, func(m *TpMapping) { m.h.close() })
	return m, nil
}

// PlanGroup is one KV-cache group of a request.
type PlanGroup struct {
	// Trim holds the kind, blocks and tokens (tokens per block 0: from the metadata).
	Trim GroupTrimInput
	// Regions are the region indices of the group's layers; empty means all.
	Regions []uint32
	// Layers are the group's model layers over the whole model, strictly ascending (exclusive
	// with Regions). Needed when D's and P's pipeline stages hold different layer windows: a
	// layer's region on a stage is its position among the group's layers in the stage's window,
	// and only the layers both stages hold are read. Empty: regions are paired by index.
	Layers []uint32
}

// cGroups builds the C group array (and everything it points to) in C memory.
func cGroups(a *cArena, groups []PlanGroup) *C.pdkv_plan_group_t {
	if len(groups) == 0 {
		return nil
	}
	gp := (*C.pdkv_plan_group_t)(a.alloc(uintptr(len(groups)) * unsafe.Sizeof(C.pdkv_plan_group_t{})))
	gs := unsafe.Slice(gp, len(groups))
	for i := range groups {
		trim := (*C.pdkv_group_trim_input_t)(a.alloc(unsafe.Sizeof(C.pdkv_group_trim_input_t{})))
		groups[i].Trim.toC(a, trim)
		gs[i].struct_size = C.size_t(unsafe.Sizeof(gs[i]))
		gs[i].trim = trim
		gs[i].regions = a.u32s(groups[i].Regions)
		gs[i].num_regions = C.size_t(len(groups[i].Regions))
		gs[i].layers = a.u32s(groups[i].Layers)
		gs[i].num_layers = C.size_t(len(groups[i].Layers))
	}
	return gp
}

// PlanRead is one read: D's [LocalOffset, +Length) of LocalRegion receives P's
// [RemoteOffset, +Length) of RemoteRegion; offsets are relative to the region bases.
type PlanRead struct {
	// LocalRegion is the D region index.
	LocalRegion uint32
	// LocalOffset is the offset in the D region.
	LocalOffset uint64
	// RemoteRegion is the P region index.
	RemoteRegion uint32
	// RemoteOffset is the offset in the P region.
	RemoteOffset uint64
	// Length is the number of bytes.
	Length uint64
}

// PlanRead mirrors pdkv_plan_read_t field for field; each line fails to compile (a negative or
// out-of-range array index) if a size or offset differs.
var (
	_ = [1]struct{}{}[unsafe.Sizeof(PlanRead{})-unsafe.Sizeof(C.pdkv_plan_read_t{})]
	_ = [1]struct{}{}[unsafe.Sizeof(C.pdkv_plan_read_t{})-unsafe.Sizeof(PlanRead{})]
	_ = [1]struct{}{}[unsafe.Offsetof(PlanRead{}.LocalOffset)-unsafe.Offsetof(C.pdkv_plan_read_t{}.local_offset)]
	_ = [1]struct{}{}[unsafe.Offsetof(C.pdkv_plan_read_t{}.local_offset)-unsafe.Offsetof(PlanRead{}.LocalOffset)]
	_ = [1]struct{}{}[unsafe.Offsetof(PlanRead{}.RemoteRegion)-unsafe.Offsetof(C.pdkv_plan_read_t{}.remote_region)]
	_ = [1]struct{}{}[unsafe.Offsetof(C.pdkv_plan_read_t{}.remote_region)-unsafe.Offsetof(PlanRead{}.RemoteRegion)]
	_ = [1]struct{}{}[unsafe.Offsetof(PlanRead{}.RemoteOffset)-unsafe.Offsetof(C.pdkv_plan_read_t{}.remote_offset)]
	_ = [1]struct{}{}[unsafe.Offsetof(C.pdkv_plan_read_t{}.remote_offset)-unsafe.Offsetof(PlanRead{}.RemoteOffset)]
	_ = [1]struct{}{}[unsafe.Offsetof(PlanRead{}.Length)-unsafe.Offsetof(C.pdkv_plan_read_t{}.length)]
	_ = [1]struct{}{}[unsafe.Offsetof(C.pdkv_plan_read_t{}.length)-unsafe.Offsetof(PlanRead{}.Length)]
)

// TransferPlanInfo holds the scalars of a plan.
type TransferPlanInfo struct {
	// PTpSize is P's TP size.
	PTpSize uint32
	// DTpSize is D's TP size.
	DTpSize uint32
	// DTpRank is the reading D rank.
	DTpRank uint32
	// NumReadRanks is the P ranks with at least one read.
	NumReadRanks int
	// NumNotifyRanks is the P ranks notified.
	NumNotifyRanks int
	// NotificationsPerPRank is what each P rank waits for per request.
	NotificationsPerPRank uint32
	// NumGroups is the number of groups.
	NumGroups int
	// PiecesBeforeCoalescing is the number of pieces before coalescing.
	PiecesBeforeCoalescing uint64
	// PiecesAfterCoalescing is the number of reads after coalescing.
	PiecesAfterCoalescing uint64
	// Bytes is the total bytes moved.
	Bytes uint64
	// AttentionBytes is the attention part of Bytes.
	AttentionBytes uint64
	// MambaBytes is the Mamba part of Bytes.
	MambaBytes uint64
	// Empty is true when there is nothing to read (full prefix hit): notify only.
	Empty bool
	// PPpSize and PPpRank are P's pipeline stages (1, 0 without PP), DPpSize and DPpRank D's:
	// the plan's P ranks are TP ranks of stage PPpRank. The plan moves the layers
	// [LayerBegin, LayerEnd) (LayerEnd 0: through the model's last layer).
	PPpSize, PPpRank, DPpSize, DPpRank uint32
	LayerBegin, LayerEnd               uint32
	// Permute is the receive-side permutation of the blocks each group lists
	// (PlanGroupZero.PermuteBlocks); inactive (equal layouts) when nothing is permuted.
	Permute BlockPermute
}

// BlockPermute says how D permutes one received attention KV block: from the layout the bytes
// arrive in (P's) to D's, one block being Heads x Tokens x HeadBytes.
type BlockPermute struct {
	// From is the layout of the received bytes (P's); To is D's.
	From, To KVLayout
	// Heads is D's KV heads per rank, Tokens its kernel block size, HeadBytes one head's bytes
	// of one token (scales included).
	Heads, Tokens, HeadBytes uint64
}

// Active reports whether blocks are permuted (the layouts differ).
func (p BlockPermute) Active() bool { return p.From != p.To }

// Apply permutes one block in place (PermuteKVBlock with p's shape).
func (p BlockPermute) Apply(block []byte) error {
	return PermuteKVBlock(block, p.From, p.To, p.Heads, p.Tokens, p.HeadBytes)
}

// PermuteKVBlock permutes one attention KV block of heads x tokens x headBytes in place from
// layout from to layout to. Errors: ErrInvalidArgument (a zero dimension, a block of another
// size, a layout that is not HND or NHD).
func PermuteKVBlock(block []byte, from, to KVLayout, heads, tokens, headBytes uint64) error {
	var p *C.uint8_t
	if len(block) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&block[0]))
	}
	var cerr *C.pdkv_error_t
	st := C.pdkv_permute_kv_block(p, C.size_t(len(block)), C.int32_t(from), C.int32_t(to), C.uint64_t(heads),
		C.uint64_t(tokens), C.uint64_t(headBytes), &cerr)
	runtime.KeepAlive(block)
	return check(st, cerr)
}

// PlanGroupZero is the receive-side work of one group.
type PlanGroupZero struct {
	// Kind is the group kind.
	Kind GroupKind
	// Regions are the resolved region indices to zero in.
	Regions []uint32
	// Zero are the D kernel block token ranges to zero.
	Zero []ZeroRange
	// PermuteBlocks are the D kernel blocks (ascending) that arrive in P's layout and must be
	// permuted into D's (TransferPlanInfo.Permute) in each of PermuteRegions, after the data and
	// before the zero ranges.
	PermuteBlocks  []uint64
	PermuteRegions []uint32
	// UnfilledStates are Mamba slots never to publish as cache hits.
	UnfilledStates []uint64
}

// TransferPlan is one request's compiled, validated transfer plan. Immutable.
type TransferPlan struct {
	h handle[C.pdkv_transfer_plan_t]
}

// Compile compiles and validates one request's plan: every D byte needed is written exactly
// once and no read leaves a registered region. Errors: ErrInvalidArgument, ErrNotFound (a P
// rank without metadata), ErrIncompatible, ErrCoverage (names region, offset, length),
// ErrOutOfBounds, ErrOverflow, ErrClosed.
func (c *PlanContext) Compile(groups []PlanGroup) (*TransferPlan, error) {
	p, err := c.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer c.h.release()
	var a cArena
	defer a.free()
	gp := cGroups(&a, groups)
	var out *C.pdkv_transfer_plan_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_transfer_plan_compile(p, gp, C.size_t(len(groups)), &out, &cerr)
	runtime.KeepAlive(c)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	t := &TransferPlan{h: handle[C.pdkv_transfer_plan_t]{ptr: out, free: func(p *C.pdkv_transfer_plan_t) { C.pdkv_transfer_plan_free(p) }}}
	runtime.SetFinalizer(t, func(t *TransferPlan) { t.h.close() })
	return t, nil
}

// NewTransferPlan returns an empty plan (no reads, no groups) to be filled by CompileInto.
func NewTransferPlan() (*TransferPlan, error) {
	var out *C.pdkv_transfer_plan_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_transfer_plan_new(&out, &cerr), cerr); err != nil {
		return nil, err
	}
	t := &TransferPlan{h: handle[C.pdkv_transfer_plan_t]{ptr: out, free: func(p *C.pdkv_transfer_plan_t) { C.pdkv_transfer_plan_free(p) }}}
	runtime.SetFinalizer(t, func(t *TransferPlan) { t.h.close() })
	return t, nil
}

// CompileInto compiles one request's plan into plan, replacing its content: the same plan and
// errors as Compile, reusing the plan's buffers instead of allocating a new one per request.
// Anything read from plan before stays valid (Go copies it out). While it runs every other call
// on plan fails with ErrBusy, and it fails with ErrBusy itself when another call holds plan; on
// failure plan is empty. Errors: those of Compile, ErrBusy, ErrClosed.
func (c *PlanContext) CompileInto(groups []PlanGroup, plan *TransferPlan) error {
	return c.compileInto(groups, plan, func(a *cArena, p *C.pdkv_plan_context_t, gp *C.pdkv_plan_group_t, tp *C.pdkv_transfer_plan_t) error {
		var cerr *C.pdkv_error_t
		st := C.pdkv_transfer_plan_compile_into(p, gp, C.size_t(len(groups)), tp, &cerr)
		return check(st, cerr)
	})
}

// CompileIntoArgs is CompileInto through pdkv_transfer_plan_compile_args, the C entry that takes
// the call's arguments (all but the plan) in one struct, for bindings whose foreign calls cost
// per argument (Python's ctypes); cgo does not, so Go engines have no reason to prefer it. The
// same plan, errors and locking as CompileInto.
func (c *PlanContext) CompileIntoArgs(groups []PlanGroup, plan *TransferPlan) error {
	return c.compileInto(groups, plan, func(a *cArena, p *C.pdkv_plan_context_t, gp *C.pdkv_plan_group_t, tp *C.pdkv_transfer_plan_t) error {
		// The struct and its error slot in C memory: cgo forbids storing a Go pointer in C memory.
		args := (*C.pdkv_compile_args_t)(a.alloc(C.sizeof_pdkv_compile_args_t))
		slot := (**C.pdkv_error_t)(a.alloc(unsafe.Sizeof(uintptr(0))))
		args.struct_size = C.sizeof_pdkv_compile_args_t
		args.ctx = p
		args.groups = gp
		args.n_groups = C.size_t(len(groups))
		args.err = slot
		return check(C.pdkv_transfer_plan_compile_args(tp, args), *slot)
	})
}

// compileInto holds the context shared and plan exclusively, packs groups into C memory and runs
// call (one of the two C entries) on them: what CompileInto and CompileIntoArgs share.
func (c *PlanContext) compileInto(groups []PlanGroup, plan *TransferPlan,
	call func(a *cArena, p *C.pdkv_plan_context_t, gp *C.pdkv_plan_group_t, tp *C.pdkv_transfer_plan_t) error) error {
	p, err := c.ref().acquire()
	if err != nil {
		return err
	}
	defer c.h.release()
	if plan == nil {
		return nilErr("TransferPlan", "plan")
	}
	tp, err := plan.ref().acquireExclusive()
	if err != nil {
		return err
	}
	defer plan.h.releaseExclusive()
	var a cArena
	defer a.free()
	err = call(&a, p, cGroups(&a, groups), tp)
	runtime.KeepAlive(c)
	runtime.KeepAlive(plan)
	return err
}

// Close frees the plan. It is idempotent (closing twice does nothing) and waits for calls in
// flight. Close on a nil *TransferPlan does nothing and returns nil, like a second Close.
func (t *TransferPlan) Close() error { return closeHandle(t, t.ref()) }

// ref returns the handle of t, or nil for a nil *TransferPlan: acquire, acquireArg and closeHandle
// turn that into a nil error (or a no-op) instead of a nil pointer dereference.
func (t *TransferPlan) ref() *handle[C.pdkv_transfer_plan_t] {
	if t == nil {
		return nil
	}
	return &t.h
}

// Validate re-runs the coverage and bounds check of the plan against (ctx, groups), recomputing
// the D bytes the groups need independently of the reads. Errors: ErrCoverage, ErrOutOfBounds,
// the errors of trimming, ErrClosed.
func (t *TransferPlan) Validate(ctx *PlanContext, groups []PlanGroup) error {
	p, err := t.ref().acquire()
	if err != nil {
		return err
	}
	defer t.h.release()
	cp, err := ctx.ref().acquireArg("ctx")
	if err != nil {
		return err
	}
	defer ctx.h.release()
	var a cArena
	defer a.free()
	gp := cGroups(&a, groups)
	var cerr *C.pdkv_error_t
	st := C.pdkv_transfer_plan_validate(p, cp, gp, C.size_t(len(groups)), &cerr)
	runtime.KeepAlive(t)
	runtime.KeepAlive(ctx)
	return check(st, cerr)
}

// Info returns the plan's scalars.
func (t *TransferPlan) Info() (TransferPlanInfo, error) {
	p, err := t.ref().acquire()
	if err != nil {
		return TransferPlanInfo{}, err
	}
	defer t.h.release()
	var ci C.pdkv_transfer_plan_info_t
	ci.struct_size = C.size_t(unsafe.Sizeof(ci))
	var cerr *C.pdkv_error_t
	st := C.pdkv_transfer_plan_get_info(p, &ci, &cerr)
	runtime.KeepAlive(t)
	if err := check(st, cerr); err != nil {
		return TransferPlanInfo{}, err
	}
	return TransferPlanInfo{
		PTpSize: uint32(ci.p_tp_size), DTpSize: uint32(ci.d_tp_size), DTpRank: uint32(ci.d_tp_rank),
		NumReadRanks: int(ci.num_read_ranks), NumNotifyRanks: int(ci.num_notify_ranks),
		NotificationsPerPRank: uint32(ci.notifications_per_p_rank), NumGroups: int(ci.num_groups),
		PiecesBeforeCoalescing: uint64(ci.pieces_before_coalescing), PiecesAfterCoalescing: uint64(ci.pieces_after_coalescing),
		Bytes: uint64(ci.bytes), AttentionBytes: uint64(ci.attention_bytes), MambaBytes: uint64(ci.mamba_bytes),
		Empty:   ci.empty != 0,
		PPpSize: uint32(ci.p_pp_size), PPpRank: uint32(ci.p_pp_rank), DPpSize: uint32(ci.d_pp_size), DPpRank: uint32(ci.d_pp_rank),
		LayerBegin: uint32(ci.layer_begin), LayerEnd: uint32(ci.layer_end),
		Permute: BlockPermute{From: KVLayout(ci.permute_from_layout), To: KVLayout(ci.permute_to_layout),
			Heads: uint64(ci.permute_heads), Tokens: uint64(ci.permute_tokens), HeadBytes: uint64(ci.permute_head_bytes)},
	}, nil
}

// ReadRanks returns the P ranks D reads from, ascending.
func (t *TransferPlan) ReadRanks() ([]uint32, error) {
	return t.ranks(func(p *C.pdkv_transfer_plan_t, r **C.uint32_t, n *C.size_t, e **C.pdkv_error_t) C.pdkv_status_t {
		return C.pdkv_transfer_plan_read_ranks(p, r, n, e)
	})
}

// NotifyRanks returns the P ranks D notifies after its reads (every handshake target), ascending.
func (t *TransferPlan) NotifyRanks() ([]uint32, error) {
	return t.ranks(func(p *C.pdkv_transfer_plan_t, r **C.uint32_t, n *C.size_t, e **C.pdkv_error_t) C.pdkv_status_t {
		return C.pdkv_transfer_plan_notify_ranks(p, r, n, e)
	})
}

// ranks runs one of the rank-list queries and copies the result.
func (t *TransferPlan) ranks(call func(*C.pdkv_transfer_plan_t, **C.uint32_t, *C.size_t, **C.pdkv_error_t) C.pdkv_status_t) ([]uint32, error) {
	p, err := t.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer t.h.release()
	var r *C.uint32_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	if err := check(call(p, &r, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := u32Slice(r, n)
	runtime.KeepAlive(t)
	return out, nil
}

// RankReads returns the reads D issues against P rank pTpRank, in issue order (empty for a rank
// it does not read from), and their total length. Errors: ErrInvalidArgument (pTpRank >= P TP).
func (t *TransferPlan) RankReads(pTpRank uint32) ([]PlanRead, uint64, error) {
	p, err := t.ref().acquire()
	if err != nil {
		return nil, 0, err
	}
	defer t.h.release()
	var r *C.pdkv_plan_read_t
	var n C.size_t
	var bytes C.uint64_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_transfer_plan_rank_reads(p, C.uint32_t(pTpRank), &r, &n, &bytes, &cerr), cerr); err != nil {
		return nil, 0, err
	}
	out := make([]PlanRead, int(n))
	if n > 0 {
		// One bulk copy: PlanRead and pdkv_plan_read_t have the same layout (checked below at
		// compile time).
		copy(out, unsafe.Slice((*PlanRead)(unsafe.Pointer(r)), int(n)))
	}
	runtime.KeepAlive(t)
	return out, uint64(bytes), nil
}

// GroupZero returns the receive-side work of group index (< Info().NumGroups). Errors:
// ErrOutOfBounds (names index and count).
func (t *TransferPlan) GroupZero(index int) (PlanGroupZero, error) {
	p, err := t.ref().acquire()
	if err != nil {
		return PlanGroupZero{}, err
	}
	defer t.h.release()
	if index < 0 {
		return PlanGroupZero{}, goErr(StatusOutOfBounds, "group index %d is negative", index)
	}
	var z C.pdkv_plan_group_zero_t
	z.struct_size = C.size_t(unsafe.Sizeof(z))
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_transfer_plan_group_zero(p, C.size_t(index), &z, &cerr), cerr); err != nil {
		return PlanGroupZero{}, err
	}
	out := PlanGroupZero{
		Kind:           GroupKind(z.kind),
		Regions:        u32Slice(z.regions, z.num_regions),
		Zero:           zeroRanges(z.zero, z.num_zero),
		UnfilledStates: u64Slice(z.unfilled_states, z.num_unfilled_states),
		PermuteBlocks:  u64Slice(z.permute_blocks, z.num_permute_blocks),
		PermuteRegions: u32Slice(z.permute_regions, z.num_permute_regions),
	}
	runtime.KeepAlive(t)
	return out, nil
}

// JSON returns the plan's human-readable JSON dump (stable key order), from an owned library
// string.
func (t *TransferPlan) JSON() (string, error) {
	p, err := t.ref().acquire()
	if err != nil {
		return "", err
	}
	defer t.h.release()
	var s *C.pdkv_string_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_transfer_plan_to_json_string(p, &s, &cerr), cerr); err != nil {
		return "", err
	}
	defer C.pdkv_string_free(s)
	var text *C.char
	var n C.size_t
	cerr = nil
	if err := check(C.pdkv_string_text(s, &text, &n, &cerr), cerr); err != nil {
		return "", err
	}
	out := C.GoStringN(text, C.int(n))
	runtime.KeepAlive(t)
	return out, nil
}

// AppendJSON appends the same JSON dump to dst, written by the library straight into Go memory
// (the caller-buffer form of the C API).
func (t *TransferPlan) AppendJSON(dst []byte) ([]byte, error) {
	p, err := t.ref().acquire()
	if err != nil {
		return dst, err
	}
	defer t.h.release()
	// +1: the library NUL-terminates the text; the NUL is not part of the appended bytes.
	out, err := appendViaCallerBuffer(dst, 1, func(buf unsafe.Pointer, capacity C.size_t, n *C.size_t, cerr **C.pdkv_error_t) C.pdkv_status_t {
		return C.pdkv_transfer_plan_to_json(p, (*C.char)(buf), capacity, n, cerr)
	})
	runtime.KeepAlive(t)
	return out, err
}
