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

// Backend is an attention backend (pdkv_attention_backend_t); it fixes the preferred block
// size and the kernel block sizes.
type Backend int32

// Attention backends.
const (
	// BackendFlashAttn is FlashAttention: MultipleOf(16).
	BackendFlashAttn Backend = C.PDKV_BACKEND_FLASH_ATTN
	// BackendTriton is the Triton backend: MultipleOf(16).
	BackendTriton Backend = C.PDKV_BACKEND_TRITON
	// BackendFlashInfer is FlashInfer: [16, 32, 64].
	BackendFlashInfer Backend = C.PDKV_BACKEND_FLASHINFER
	// BackendFlashMLA is FlashMLA: [64], MLA only.
	BackendFlashMLA Backend = C.PDKV_BACKEND_FLASHMLA
	// BackendCutlassMLA is CUTLASS MLA: [128], MLA only.
	BackendCutlassMLA Backend = C.PDKV_BACKEND_CUTLASS_MLA
	// BackendFlashInferMLA is FlashInfer MLA: [32, 64], MLA only.
	BackendFlashInferMLA Backend = C.PDKV_BACKEND_FLASHINFER_MLA
	// BackendCustom uses EngineConfig.PreferredBlockSize, KernelBlockSizes and
	// KernelBlockMultipleOf.
	BackendCustom Backend = C.PDKV_BACKEND_CUSTOM
)

// String returns the stable backend name ("flash_attn", ..., "custom"; "unknown" otherwise).
func (b Backend) String() string { return C.GoString(C.pdkv_backend_name(C.int32_t(b))) }

// BackendFromName returns the backend for a pdkv or vLLM name, case-insensitive
// ("flashinfer", "FLASH_ATTN"). Errors: ErrNotFound (names the string and the valid names).
func BackendFromName(name string) (Backend, error) {
	cs, err := cString("backend name", name)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cs))
	var out C.int32_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_backend_from_name(cs, &out, &cerr), cerr); err != nil {
		return 0, err
	}
	return Backend(out), nil
}

// MambaCacheMode is the prefix-cache mode of the Mamba state (vLLM "none" | "align" | "all").
type MambaCacheMode int32

// Mamba prefix-cache modes.
const (
	// MambaCacheNone keeps one state per request.
	MambaCacheNone MambaCacheMode = C.PDKV_MAMBA_CACHE_NONE
	// MambaCacheAlign caches states at block-aligned positions.
	MambaCacheAlign MambaCacheMode = C.PDKV_MAMBA_CACHE_ALIGN
	// MambaCacheAll caches a state every mamba block.
	MambaCacheAll MambaCacheMode = C.PDKV_MAMBA_CACHE_ALL
)

// ConvLayout is the layout of the Mamba conv state. Only ConvLayoutDS is transferable.
type ConvLayout int32

// Conv state layouts.
const (
	// ConvLayoutDS keeps each projection contiguous (required for byte-exact transfer).
	ConvLayoutDS ConvLayout = C.PDKV_CONV_LAYOUT_DS
	// ConvLayoutSD is rejected with ErrUnsupportedLayout.
	ConvLayoutSD ConvLayout = C.PDKV_CONV_LAYOUT_SD
)

// ElementFormat is the identity of a dtype beyond its byte size (pdkv_element_format_t): formats
// of equal size (FP8 e4m3 and e5m2, int8 and fp8 per-token-head, bfloat16 and float16) move the
// same bytes but decode differently, so the handshake refuses a pair whose named formats differ.
// FormatUnknown (the zero value): not named, compatible with any format.
type ElementFormat int32

// Element formats.
const (
	// FormatUnknown: not named (only byte sizes given), or metadata from an older pdkv.
	FormatUnknown ElementFormat = C.PDKV_FORMAT_UNKNOWN
	// FormatBFloat16 is bfloat16.
	FormatBFloat16 ElementFormat = C.PDKV_FORMAT_BFLOAT16
	// FormatFloat16 is float16.
	FormatFloat16 ElementFormat = C.PDKV_FORMAT_FLOAT16
	// FormatFloat32 is float32.
	FormatFloat32 ElementFormat = C.PDKV_FORMAT_FLOAT32
	// FormatFP8E4M3 is fp8 e4m3 (vLLM's "fp8" on CUDA and "fp8_e4m3").
	FormatFP8E4M3 ElementFormat = C.PDKV_FORMAT_FP8_E4M3
	// FormatFP8E5M2 is fp8 e5m2.
	FormatFP8E5M2 ElementFormat = C.PDKV_FORMAT_FP8_E5M2
	// FormatInt8PerTokenHead is int8 K/V with two fp32 scales per token and head (KV cache only).
	FormatInt8PerTokenHead ElementFormat = C.PDKV_FORMAT_INT8_PER_TOKEN_HEAD
	// FormatFP8PerTokenHead is fp8 K/V with two fp32 scales per token and head (KV cache only).
	FormatFP8PerTokenHead ElementFormat = C.PDKV_FORMAT_FP8_PER_TOKEN_HEAD
	// FormatInt4PerTokenHead is int4 K/V with two fp32 scales per token and head (KV cache only).
	FormatInt4PerTokenHead ElementFormat = C.PDKV_FORMAT_INT4_PER_TOKEN_HEAD
)

// String returns the canonical format name ("fp8_e4m3", "bfloat16", ...; "unknown" otherwise).
func (f ElementFormat) String() string { return C.GoString(C.pdkv_element_format_name(C.int32_t(f))) }

// ElementFormatFromName returns the element format of a canonical or vLLM name, case-insensitive
// ("fp8_e5m2", "fp8" = fp8_e4m3, "bf16", "int8_per_token_head"; "auto": FormatUnknown). Errors:
// ErrNotFound (names the string and the canonical names).
func ElementFormatFromName(name string) (ElementFormat, error) {
	cs, err := cString("element format name", name)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cs))
	var out C.int32_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_element_format_from_name(cs, &out, &cerr), cerr); err != nil {
		return 0, err
	}
	return ElementFormat(out), nil
}

// EngineConfig holds the settings of one engine (P or D) that change the geometry. Byte sizes
// of 0 mean "auto". Start from DefaultEngineConfig and override.
type EngineConfig struct {
	// TpSize is the tensor-parallel size, >= 1.
	TpSize uint32
	// KVCacheDtypeBytes is the KV cache dtype size; nil ("auto"): the model dtype. Optional
	// fields are set with Ptr.
	KVCacheDtypeBytes *uint32
	// ConvStateDtypeBytes is the conv state dtype size; nil ("auto"): the model dtype.
	ConvStateDtypeBytes *uint32
	// SSMStateDtypeBytes is the SSM state dtype size; nil ("auto"): the model default, else the
	// conv dtype.
	SSMStateDtypeBytes *uint32
	// NumSpeculativeTokens is the number of speculative tokens.
	NumSpeculativeTokens uint32
	// UserBlockSize is --block-size; nil: not given.
	UserBlockSize *uint32
	// UserMambaBlockSize is --mamba-block-size ("all" mode); nil: the model chunk size.
	UserMambaBlockSize *uint32
	// Backend is the attention backend.
	Backend Backend
	// PreferredBlockSize is the backend's preferred block size (BackendCustom only).
	PreferredBlockSize uint32
	// KernelBlockSizes lists explicit supported kernel sizes (BackendCustom only); empty means
	// KernelBlockMultipleOf applies. The slice is copied into C memory for each call.
	KernelBlockSizes []uint32
	// KernelBlockMultipleOf is MultipleOf(n) when no explicit list is given (BackendCustom only).
	KernelBlockMultipleOf uint32
	// MambaCacheMode is the Mamba prefix-cache mode.
	MambaCacheMode MambaCacheMode
	// ConvLayout is the conv state layout.
	ConvLayout ConvLayout
	// KVCacheElementBits is the KV element format's bits per K/V element (4, 8, 16, 32, 64); nil
	// means 8 * the KV dtype bytes. A set KVCacheDtypeBytes must agree with it.
	KVCacheElementBits *uint32
	// KVCacheHeadExtraBytes is the bytes packed per token per KV head beside K and V (vLLM's
	// per-token-head scales: 8); they travel with the head in every head-sliced read. 0: none.
	KVCacheHeadExtraBytes uint32
	// ModelFormat, KVCacheFormat, ConvStateFormat and SSMStateFormat name the element formats of
	// the model (--dtype), the KV cache (--kv-cache-dtype) and the Mamba conv / SSM state;
	// FormatUnknown (the zero value) leaves one unnamed, except that a size left "auto" takes the
	// format it falls back to (KV cache and conv state: ModelFormat). They label the sizes above
	// and must agree with them (ErrInvalidArgument naming both); the handshake refuses a peer
	// whose known format differs, and treats an unknown one as compatible.
	ModelFormat     ElementFormat
	KVCacheFormat   ElementFormat
	ConvStateFormat ElementFormat
	SSMStateFormat  ElementFormat
}

// DefaultEngineConfig returns the library defaults (TP 1, auto dtypes, FlashAttention, cache
// mode none, DS layout), as pdkv_engine_config_init fills them.
func DefaultEngineConfig() EngineConfig {
	var c C.pdkv_engine_config_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_engine_config_init(&c, &cerr), cerr); err != nil {
		// Only a NULL config can fail, and &c is never NULL.
		panic(err)
	}
	return EngineConfig{
		TpSize:                uint32(c.tp_size),
		NumSpeculativeTokens:  uint32(c.num_speculative_tokens),
		Backend:               Backend(c.attention_backend),
		PreferredBlockSize:    uint32(c.preferred_block_size),
		KernelBlockMultipleOf: uint32(c.kernel_block_multiple_of),
		MambaCacheMode:        MambaCacheMode(c.mamba_cache_mode),
		ConvLayout:            ConvLayout(c.conv_layout),
	}
}

// toC fills a C engine config. The kernel block sizes are copied into C memory (the struct
// must not hold a Go pointer); call the returned function to free it after the C call.
func (c *EngineConfig) toC(out *C.pdkv_engine_config_t) func() {
	var cerr *C.pdkv_error_t
	C.pdkv_engine_config_init(out, &cerr)
	C.pdkv_error_free(cerr)
	out.tp_size = C.uint32_t(c.TpSize)
	// An optional field is set (its bit with it) when its pointer is non-nil.
	opt := func(p *uint32, bit C.uint64_t, field *C.uint32_t) {
		if p != nil {
			out.field_mask |= bit
			*field = C.uint32_t(*p)
		}
	}
	opt(c.KVCacheDtypeBytes, C.PDKV_CONFIG_FIELD_KV_CACHE_DTYPE, &out.kv_cache_dtype_bytes)
	opt(c.ConvStateDtypeBytes, C.PDKV_CONFIG_FIELD_CONV_STATE_DTYPE, &out.conv_state_dtype_bytes)
	opt(c.SSMStateDtypeBytes, C.PDKV_CONFIG_FIELD_SSM_STATE_DTYPE, &out.ssm_state_dtype_bytes)
	opt(c.UserBlockSize, C.PDKV_CONFIG_FIELD_BLOCK_SIZE, &out.user_block_size)
	opt(c.UserMambaBlockSize, C.PDKV_CONFIG_FIELD_MAMBA_BLOCK_SIZE, &out.user_mamba_block_size)
	if c.KVCacheElementBits != nil {
		out.field_mask |= C.PDKV_CONFIG_FIELD_KV_CACHE_ELEMENT_BITS
		out.kv_cache_element_bits = C.uint64_t(*c.KVCacheElementBits)
	}
	out.num_speculative_tokens = C.uint32_t(c.NumSpeculativeTokens)
	out.attention_backend = C.int32_t(c.Backend)
	out.preferred_block_size = C.uint32_t(c.PreferredBlockSize)
	out.kernel_block_multiple_of = C.uint32_t(c.KernelBlockMultipleOf)
	out.mamba_cache_mode = C.int32_t(c.MambaCacheMode)
	out.conv_layout = C.int32_t(c.ConvLayout)
	out.kv_cache_head_extra_bytes = C.uint64_t(c.KVCacheHeadExtraBytes)
	format := func(f ElementFormat, bit C.uint64_t, field *C.int32_t) {
		if f != FormatUnknown {
			out.field_mask |= bit
			*field = C.int32_t(f)
		}
	}
	format(c.ModelFormat, C.PDKV_CONFIG_FIELD_MODEL_FORMAT, &out.model_format)
	format(c.KVCacheFormat, C.PDKV_CONFIG_FIELD_KV_CACHE_FORMAT, &out.kv_cache_format)
	format(c.ConvStateFormat, C.PDKV_CONFIG_FIELD_CONV_STATE_FORMAT, &out.conv_state_format)
	format(c.SSMStateFormat, C.PDKV_CONFIG_FIELD_SSM_STATE_FORMAT, &out.ssm_state_format)
	out.kernel_block_sizes = nil
	out.num_kernel_block_sizes = 0
	if len(c.KernelBlockSizes) == 0 {
		return func() {}
	}
	n := len(c.KernelBlockSizes)
	mem := (*C.uint32_t)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.uint32_t(0)))))
	copy(unsafe.Slice((*uint32)(unsafe.Pointer(mem)), n), c.KernelBlockSizes)
	out.kernel_block_sizes = mem
	out.num_kernel_block_sizes = C.size_t(n)
	return func() { C.free(unsafe.Pointer(mem)) }
}

// GeometryInfo holds the scalars of a geometry (pdkv_geometry_info_t).
type GeometryInfo struct {
	// TpSize is the engine's TP size.
	TpSize uint32
	// KVHeadsPerRank is max(1, K/TP); MLA: 1.
	KVHeadsPerRank uint32
	// AttnBytesPerToken is the attention bytes per token per rank.
	AttnBytesPerToken uint64
	// Hybrid is true when the model has Mamba layers.
	Hybrid bool
	// MambaType is the model's Mamba layer kind.
	MambaType MambaType
	// ConvRows is conv_kernel - 1 (+ speculative tokens).
	ConvRows uint64
	// ConvDimLocal is the conv channels per rank.
	ConvDimLocal uint64
	// ConvDtypeBytes is the conv state dtype size.
	ConvDtypeBytes uint32
	// SSMDtypeBytes is the SSM state dtype size.
	SSMDtypeBytes uint32
	// ConvBytes is the conv state per rank per logical block.
	ConvBytes uint64
	// SSMBytes is the temporal state per rank per logical block.
	SSMBytes uint64
	// MambaPageBytes is conv + ssm, unpadded.
	MambaPageBytes uint64
	// Align is the rounding unit of the block-size rule.
	Align uint32
	// MinBlockSize is the smallest block whose attention page holds a Mamba page.
	MinBlockSize uint64
	// BlockSize is the logical block size in tokens.
	BlockSize uint64
	// BlockSizeRaised is true when BlockSize was raised to MinBlockSize.
	BlockSizeRaised bool
	// MambaBlockSize is the tokens per Mamba state ("none" mode: 0).
	MambaBlockSize uint64
	// AttnPageBytes is BlockSize * AttnBytesPerToken.
	AttnPageBytes uint64
	// MambaPagePaddedBytes equals AttnPageBytes for hybrids, else 0.
	MambaPagePaddedBytes uint64
	// PaddingPPM is 1e6 * (padded - page) / page, rounded down.
	PaddingPPM uint64
	// PaddingPercent is 100 * (padded - page) / page (vLLM prints it %.2f).
	PaddingPercent float64
	// KernelBlockSize is the tokens per kernel block.
	KernelBlockSize uint64
	// PhysicalPerLogical is ppl = BlockSize / KernelBlockSize.
	PhysicalPerLogical uint64
	// KernelPageBytes is AttnPageBytes / ppl (block_len in the handshake).
	KernelPageBytes uint64
	// NumProjections is the number of conv projections (Geometry.Projection).
	NumProjections int
	// NumTemporalDims is the rank of the temporal state (Geometry.TemporalShape).
	NumTemporalDims int
	// NumLogLines is the number of vLLM log lines (Geometry.LogLine).
	NumLogLines int
	// MLABytesPerToken is, for the MLA-typed layers of a GQA model, the bytes per token of their
	// replicated latent (the same at every TP); 0 for other models.
	MLABytesPerToken uint64
	// MLAKernelPageBytes is KernelBlockSize * MLABytesPerToken.
	MLAKernelPageBytes uint64
	// KVHeadBytesPerToken is one KV head's entry per token: its K and V elements plus the
	// per-token-head extras; AttnBytesPerToken = KVHeadsPerRank * this.
	KVHeadBytesPerToken uint64
}

// ConvProjection is one projection of the conv channels (Mamba2 x/B/C, GDN Q/K/V, Mamba1 x).
type ConvProjection struct {
	// Name is "x", "B", "C", "Q", "K" or "V".
	Name string
	// DimLocal is the channels held by one rank.
	DimLocal uint64
	// DimTotal is the channels of the whole model.
	DimTotal uint64
	// Replicated is true when each rank holds a copy (Mamba2 B/C with n_groups < TP).
	Replicated bool
	// Bytes is DimLocal * conv rows * conv dtype.
	Bytes uint64
	// Offset is the byte offset in the page.
	Offset uint64
}

// Geometry is the per-engine geometry of a model (pdkv_geometry_t): attention bytes per
// token, Mamba page, block-size rule, padded pages, kernel block size. Immutable.
type Geometry struct {
	h handle[C.pdkv_geometry_t]
}

// NewGeometry derives the geometry of model on the engine config. Errors: ErrInvalidArgument,
// ErrHeadsNotDivisible, ErrUnsupportedMambaType, ErrUnsupportedLayout, ErrIncompatible,
// ErrOverflow, ErrClosed (model closed).
func NewGeometry(model *Model, config EngineConfig) (*Geometry, error) {
	mp, err := model.ref().acquireArg("model")
	if err != nil {
		return nil, err
	}
	defer model.h.release()
	var cc C.pdkv_engine_config_t
	free := config.toC(&cc)
	defer free()
	var out *C.pdkv_geometry_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_geometry_new(mp, &cc, &out, &cerr)
	runtime.KeepAlive(model)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	g := &Geometry{h: handle[C.pdkv_geometry_t]{ptr: out, free: func(p *C.pdkv_geometry_t) { C.pdkv_geometry_free(p) }}}
	runtime.SetFinalizer(g, func(g *Geometry) { g.h.close() })
	return g, nil
}

// Close frees the geometry. It is idempotent (closing twice does nothing) and waits for calls in
// flight. Close on a nil *Geometry does nothing and returns nil, like a second Close.
func (g *Geometry) Close() error { return closeHandle(g, g.ref()) }

// ref returns the handle of g, or nil for a nil *Geometry: acquire, acquireArg and closeHandle
// turn that into a nil error (or a no-op) instead of a nil pointer dereference.
func (g *Geometry) ref() *handle[C.pdkv_geometry_t] {
	if g == nil {
		return nil
	}
	return &g.h
}

// Info returns the geometry's scalars.
func (g *Geometry) Info() (GeometryInfo, error) {
	p, err := g.ref().acquire()
	if err != nil {
		return GeometryInfo{}, err
	}
	defer g.h.release()
	var ci C.pdkv_geometry_info_t
	ci.struct_size = C.size_t(unsafe.Sizeof(ci))
	var cerr *C.pdkv_error_t
	st := C.pdkv_geometry_get_info(p, &ci, &cerr)
	runtime.KeepAlive(g)
	if err := check(st, cerr); err != nil {
		return GeometryInfo{}, err
	}
	return GeometryInfo{
		TpSize:               uint32(ci.tp_size),
		KVHeadsPerRank:       uint32(ci.kv_heads_per_rank),
		AttnBytesPerToken:    uint64(ci.attn_bytes_per_token),
		Hybrid:               ci.hybrid != 0,
		MambaType:            MambaType(ci.mamba_type),
		ConvRows:             uint64(ci.conv_rows),
		ConvDimLocal:         uint64(ci.conv_dim_local),
		ConvDtypeBytes:       uint32(ci.conv_dtype_bytes),
		SSMDtypeBytes:        uint32(ci.ssm_dtype_bytes),
		ConvBytes:            uint64(ci.conv_bytes),
		SSMBytes:             uint64(ci.ssm_bytes),
		MambaPageBytes:       uint64(ci.mamba_page_bytes),
		Align:                uint32(ci.align),
		MinBlockSize:         uint64(ci.min_block_size),
		BlockSize:            uint64(ci.block_size),
		BlockSizeRaised:      ci.block_size_raised != 0,
		MambaBlockSize:       uint64(ci.mamba_block_size),
		AttnPageBytes:        uint64(ci.attn_page_bytes),
		MambaPagePaddedBytes: uint64(ci.mamba_page_padded_bytes),
		PaddingPPM:           uint64(ci.padding_ppm),
		PaddingPercent:       float64(ci.padding_percent),
		KernelBlockSize:      uint64(ci.kernel_block_size),
		PhysicalPerLogical:   uint64(ci.physical_per_logical),
		KernelPageBytes:      uint64(ci.kernel_page_bytes),
		NumProjections:       int(ci.num_projections),
		NumTemporalDims:      int(ci.num_temporal_dims),
		NumLogLines:          int(ci.num_log_lines),
		MLABytesPerToken:     uint64(ci.mla_bytes_per_token),
		MLAKernelPageBytes:   uint64(ci.mla_kernel_page_bytes),
		KVHeadBytesPerToken:  uint64(ci.kv_head_bytes_per_token),
	}, nil
}

// Projection returns conv projection index (< Info().NumProjections). Errors: ErrOutOfBounds
// (names index and count).
func (g *Geometry) Projection(index int) (ConvProjection, error) {
	p, err := g.ref().acquire()
	if err != nil {
		return ConvProjection{}, err
	}
	defer g.h.release()
	if index < 0 {
		return ConvProjection{}, goErr(StatusOutOfBounds, "projection index %d is negative", index)
	}
	var cp C.pdkv_conv_projection_t
	cp.struct_size = C.size_t(unsafe.Sizeof(cp))
	var cerr *C.pdkv_error_t
	st := C.pdkv_geometry_projection(p, C.size_t(index), &cp, &cerr)
	if err := check(st, cerr); err != nil {
		runtime.KeepAlive(g)
		return ConvProjection{}, err
	}
	out := ConvProjection{
		Name:       C.GoString(cp.name),
		DimLocal:   uint64(cp.dim_local),
		DimTotal:   uint64(cp.dim_total),
		Replicated: cp.replicated != 0,
		Bytes:      uint64(cp.bytes),
		Offset:     uint64(cp.offset),
	}
	runtime.KeepAlive(g)
	return out, nil
}

// Projections returns every conv projection in page order.
func (g *Geometry) Projections() ([]ConvProjection, error) {
	info, err := g.Info()
	if err != nil {
		return nil, err
	}
	out := make([]ConvProjection, 0, info.NumProjections)
	for i := 0; i < info.NumProjections; i++ {
		pr, err := g.Projection(i)
		if err != nil {
			return nil, err
		}
		out = append(out, pr)
	}
	return out, nil
}

// TemporalShape returns the per-rank temporal (SSM) state shape.
func (g *Geometry) TemporalShape() ([]uint64, error) {
	p, err := g.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer g.h.release()
	var dims *C.uint64_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_geometry_temporal_shape(p, &dims, &n, &cerr)
	if err := check(st, cerr); err != nil {
		runtime.KeepAlive(g)
		return nil, err
	}
	out := u64Slice(dims, n)
	runtime.KeepAlive(g)
	return out, nil
}

// LogLine returns vLLM's INFO log line index (< Info().NumLogLines) for this engine, verbatim.
// Errors: ErrOutOfBounds.
func (g *Geometry) LogLine(index int) (string, error) {
	p, err := g.ref().acquire()
	if err != nil {
		return "", err
	}
	defer g.h.release()
	if index < 0 {
		return "", goErr(StatusOutOfBounds, "log line index %d is negative", index)
	}
	var line *C.char
	var cerr *C.pdkv_error_t
	st := C.pdkv_geometry_log_line(p, C.size_t(index), &line, &cerr)
	if err := check(st, cerr); err != nil {
		runtime.KeepAlive(g)
		return "", err
	}
	out := C.GoString(line)
	runtime.KeepAlive(g)
	return out, nil
}

// LogLines returns every vLLM log line of this engine.
func (g *Geometry) LogLines() ([]string, error) {
	info, err := g.Info()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, info.NumLogLines)
	for i := 0; i < info.NumLogLines; i++ {
		l, err := g.LogLine(i)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}
