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

// MambaType is the kind of Mamba-like layer of a model (pdkv_mamba_type_t).
type MambaType int32

// Mamba layer kinds. Only MambaMamba1, MambaMamba2 and MambaGDN can be transferred.
const (
	// MambaNone is a pure attention model.
	MambaNone MambaType = C.PDKV_MAMBA_NONE
	// MambaMamba1 is Mamba1 (Jamba).
	MambaMamba1 MambaType = C.PDKV_MAMBA_MAMBA1
	// MambaMamba2 is Mamba2 (Nemotron-H, Falcon-H1, Granite-4.0-H, Zamba2).
	MambaMamba2 MambaType = C.PDKV_MAMBA_MAMBA2
	// MambaGDN is the gated delta net (Qwen3-Next, Qwen3.5).
	MambaGDN MambaType = C.PDKV_MAMBA_GDN
	// MambaShortConv is LFM2's short convolution (unsupported for transfer).
	MambaShortConv MambaType = C.PDKV_MAMBA_SHORT_CONV
	// MambaLinear is lightning / linear attention (unsupported for transfer).
	MambaLinear MambaType = C.PDKV_MAMBA_LINEAR
	// MambaKDA is Kimi delta attention (unsupported for transfer).
	MambaKDA MambaType = C.PDKV_MAMBA_KDA
)

// String returns the stable lower-case name ("mamba2", "gdn", ...; "unknown" otherwise).
func (t MambaType) String() string { return C.GoString(C.pdkv_mamba_type_name(C.int32_t(t))) }

// ModelDesc is everything pdkv needs to know about a model (pdkv_model_desc_t). It is the
// input of NewModel and the output of Model.Describe.
type ModelDesc struct {
	// Name is the model name, e.g. "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16".
	Name string
	// Source says where the numbers come from.
	Source string
	// NumKVHeads is the total number of KV heads (MLA: 1).
	NumKVHeads uint32
	// HeadSize is the K head dim (MLA: kv_lora_rank + qk_rope_head_dim).
	HeadSize uint32
	// HeadSizeV is the V head dim (MLA: 0).
	HeadSizeV uint32
	// UseMLA marks multi-head latent attention.
	UseMLA bool
	// SlidingWindow is the attention window in tokens; 0 means full attention.
	SlidingWindow uint32
	// MambaType is the kind of Mamba layer (MambaNone for pure attention).
	MambaType MambaType
	// MambaNumHeads is Mamba2 heads or GDN value heads.
	MambaNumHeads uint32
	// MambaHeadDim is the Mamba2 head dim or GDN value head dim.
	MambaHeadDim uint32
	// MambaDState is Mamba1/2 d_state or the GDN key head dim.
	MambaDState uint32
	// MambaNGroups is Mamba2 n_groups or GDN key heads.
	MambaNGroups uint32
	// MambaDInner is d_inner (Mamba1 only).
	MambaDInner uint64
	// MambaConvKernel is d_conv.
	MambaConvKernel uint32
	// MambaChunkSize is the Mamba chunk size; nil: 2048. Optional fields are set with Ptr.
	MambaChunkSize *uint32
	// MambaConvRowsIncludeSpec is true when speculative tokens add conv rows (NemotronH, GDN).
	MambaConvRowsIncludeSpec bool
	// DtypeBytes is the model dtype size, 1..8.
	DtypeBytes uint32
	// DefaultSSMDtypeBytes is the SSM state dtype size an engine's "auto" picks; nil: the conv
	// dtype.
	DefaultSSMDtypeBytes *uint32
	// LayerPattern has one char per layer: '*' attention, 'M' Mamba, 'P' both, 'L' MLA-typed
	// attention in a GQA model, '-' neither.
	LayerPattern string
	// MLAHeadSize is the latent width (elements) of the 'L' layers of a GQA model: one head
	// replicated on every rank, read whole from one prefill rank. 0: no such layers (a pure MLA
	// model uses UseMLA instead).
	MLAHeadSize uint32
}

// Model is an immutable model description owned by the library (pdkv_model_t).
type Model struct {
	h handle[C.pdkv_model_t]
}

// newModel wraps an owned C model and arms its finalizer.
func newModel(p *C.pdkv_model_t) *Model {
	m := &Model{h: handle[C.pdkv_model_t]{ptr: p, free: func(p *C.pdkv_model_t) { C.pdkv_model_free(p) }}}
	runtime.SetFinalizer(m, func(m *Model) { m.h.close() })
	return m
}

// Close frees the model. It is idempotent (closing twice does nothing) and waits for calls in
// flight. Close on a nil *Model does nothing and returns nil, like a second Close.
func (m *Model) Close() error { return closeHandle(m, m.ref()) }

// ref returns the handle of m, or nil for a nil *Model: acquire, acquireArg and closeHandle
// turn that into a nil error (or a no-op) instead of a nil pointer dereference.
func (m *Model) ref() *handle[C.pdkv_model_t] {
	if m == nil {
		return nil
	}
	return &m.h
}

// NewModel creates a model from a description. Errors: ErrInvalidArgument (unknown Mamba type,
// zero heads, bad layer pattern char, a string with a NUL byte, ...).
func NewModel(desc ModelDesc) (*Model, error) {
	var cd C.pdkv_model_desc_t
	cd.struct_size = C.size_t(unsafe.Sizeof(cd))
	type cstr struct {
		arg, val string
		dst      **C.char
	}
	for _, s := range []cstr{
		{"name", desc.Name, &cd.name},
		{"source", desc.Source, &cd.source},
		{"layer_pattern", desc.LayerPattern, &cd.layer_pattern},
	} {
		cs, err := cString(s.arg, s.val)
		if err != nil {
			return nil, err
		}
		defer C.free(unsafe.Pointer(cs))
		*s.dst = cs
	}
	cd.num_kv_heads = C.uint32_t(desc.NumKVHeads)
	cd.head_size = C.uint32_t(desc.HeadSize)
	cd.head_size_v = C.uint32_t(desc.HeadSizeV)
	cd.use_mla = cBool(desc.UseMLA)
	cd.sliding_window = C.uint32_t(desc.SlidingWindow)
	cd.mamba_type = C.int32_t(desc.MambaType)
	cd.mamba_num_heads = C.uint32_t(desc.MambaNumHeads)
	cd.mamba_head_dim = C.uint32_t(desc.MambaHeadDim)
	cd.mamba_d_state = C.uint32_t(desc.MambaDState)
	cd.mamba_n_groups = C.uint32_t(desc.MambaNGroups)
	cd.mamba_d_inner = C.uint64_t(desc.MambaDInner)
	cd.mamba_conv_kernel = C.uint32_t(desc.MambaConvKernel)
	if desc.MambaChunkSize != nil {
		cd.field_mask |= C.PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE
		cd.mamba_chunk_size = C.uint32_t(*desc.MambaChunkSize)
	}
	cd.mamba_conv_rows_include_spec = cBool(desc.MambaConvRowsIncludeSpec)
	cd.mla_head_size = C.uint32_t(desc.MLAHeadSize)
	cd.dtype_bytes = C.uint32_t(desc.DtypeBytes)
	if desc.DefaultSSMDtypeBytes != nil {
		cd.field_mask |= C.PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE
		cd.default_ssm_dtype_bytes = C.uint32_t(*desc.DefaultSSMDtypeBytes)
	}
	var out *C.pdkv_model_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_model_new(&cd, &out, &cerr), cerr); err != nil {
		return nil, err
	}
	return newModel(out), nil
}

// ModelFromPreset creates a model from a built-in preset, by short name or Hugging Face repo
// id, case-insensitive ("nemotron-3-nano-30b"). Errors: ErrNotFound (names the preset).
func ModelFromPreset(name string) (*Model, error) {
	cs, err := cString("preset name", name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cs))
	var out *C.pdkv_model_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_model_from_preset(cs, &out, &cerr), cerr); err != nil {
		return nil, err
	}
	return newModel(out), nil
}

// ModelFromHFConfigFile reads a Hugging Face config.json at path and derives the model. An
// empty name is passed as NULL: the config's "_name_or_path" (else the path) is kept. Errors:
// ErrIO (the path cannot be read, e.g. a directory; names it), ErrParse (malformed JSON),
// ErrNotFound (a required key is missing; names it), ErrInvalidArgument (a key of the wrong
// type or value), ErrUnsupportedMambaType (a hybrid model_type pdkv has no rule for).
func ModelFromHFConfigFile(path, name string) (*Model, error) {
	cp, err := cString("path", path)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cp))
	var cn *C.char
	if name != "" {
		if cn, err = cString("name", name); err != nil {
			return nil, err
		}
		defer C.free(unsafe.Pointer(cn))
	}
	var out *C.pdkv_model_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_model_from_hf_config_file(cp, cn, &out, &cerr), cerr); err != nil {
		return nil, err
	}
	return newModel(out), nil
}

// ModelFromHFConfigJSON derives the model from the text of a Hugging Face config.json. An
// empty name is passed as NULL: the config's "_name_or_path" is kept. Errors: ErrParse
// (malformed JSON or not an object), ErrNotFound (a required key is missing; names it),
// ErrInvalidArgument (a key of the wrong type or value), ErrUnsupportedMambaType (a hybrid
// model_type pdkv has no rule for; a non-hybrid unknown type is read as pure attention).
func ModelFromHFConfigJSON(json []byte, name string) (*Model, error) {
	// The text is copied into C memory (one spare byte so an empty text is not a NULL pointer).
	buf := C.malloc(C.size_t(len(json) + 1))
	defer C.free(buf)
	if len(json) > 0 {
		copy(unsafe.Slice((*byte)(buf), len(json)), json)
	}
	var cn *C.char
	if name != "" {
		var err error
		if cn, err = cString("name", name); err != nil {
			return nil, err
		}
		defer C.free(unsafe.Pointer(cn))
	}
	var out *C.pdkv_model_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_model_from_hf_config_json((*C.char)(buf), C.size_t(len(json)), cn, &out, &cerr)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	return newModel(out), nil
}

// Describe returns the model's description.
func (m *Model) Describe() (ModelDesc, error) {
	p, err := m.ref().acquire()
	if err != nil {
		return ModelDesc{}, err
	}
	defer m.h.release()
	var cd C.pdkv_model_desc_t
	cd.struct_size = C.size_t(unsafe.Sizeof(cd))
	var cerr *C.pdkv_error_t
	st := C.pdkv_model_describe(p, &cd, &cerr)
	runtime.KeepAlive(m)
	if err := check(st, cerr); err != nil {
		return ModelDesc{}, err
	}
	// The strings are owned by the model, which the acquire keeps alive while we copy.
	d := ModelDesc{
		Name:                     C.GoString(cd.name),
		Source:                   C.GoString(cd.source),
		NumKVHeads:               uint32(cd.num_kv_heads),
		HeadSize:                 uint32(cd.head_size),
		HeadSizeV:                uint32(cd.head_size_v),
		UseMLA:                   cd.use_mla != 0,
		SlidingWindow:            uint32(cd.sliding_window),
		MambaType:                MambaType(cd.mamba_type),
		MambaNumHeads:            uint32(cd.mamba_num_heads),
		MambaHeadDim:             uint32(cd.mamba_head_dim),
		MambaDState:              uint32(cd.mamba_d_state),
		MambaNGroups:             uint32(cd.mamba_n_groups),
		MambaDInner:              uint64(cd.mamba_d_inner),
		MambaConvKernel:          uint32(cd.mamba_conv_kernel),
		MambaChunkSize:           optU32(cd.field_mask&C.PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE != 0, cd.mamba_chunk_size),
		MambaConvRowsIncludeSpec: cd.mamba_conv_rows_include_spec != 0,
		DtypeBytes:               uint32(cd.dtype_bytes),
		DefaultSSMDtypeBytes:     optU32(cd.field_mask&C.PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE != 0, cd.default_ssm_dtype_bytes),
		LayerPattern:             C.GoString(cd.layer_pattern),
		MLAHeadSize:              uint32(cd.mla_head_size),
	}
	runtime.KeepAlive(m)
	return d, nil
}

// LayerCounts returns the attention ('*' + 'P') and Mamba ('M' + 'P') layer counts from the
// layer pattern.
func (m *Model) LayerCounts() (attention, mamba uint32, err error) {
	p, err := m.ref().acquire()
	if err != nil {
		return 0, 0, err
	}
	defer m.h.release()
	var a, b C.uint32_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_model_layer_counts(p, &a, &b, &cerr)
	runtime.KeepAlive(m)
	if err := check(st, cerr); err != nil {
		return 0, 0, err
	}
	return uint32(a), uint32(b), nil
}

// Preset is one built-in model preset.
type Preset struct {
	// Name is the short name, e.g. "nemotron-3-nano-30b".
	Name string
	// HFName is the Hugging Face repo id, accepted by ModelFromPreset as an alias.
	HFName string
	// Source says where the preset's numbers come from.
	Source string
}

// PresetCount returns the number of built-in presets.
func PresetCount() int { return int(C.pdkv_preset_count()) }

// PresetAt returns preset index (< PresetCount()). Errors: ErrOutOfBounds (names index and
// count); a negative index is ErrOutOfBounds too.
func PresetAt(index int) (Preset, error) {
	if index < 0 {
		return Preset{}, goErr(StatusOutOfBounds, "preset index %d is negative (count %d)", index, PresetCount())
	}
	var n, hf, src *C.char
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_preset_at(C.size_t(index), &n, &hf, &src, &cerr), cerr); err != nil {
		return Preset{}, err
	}
	return Preset{Name: C.GoString(n), HFName: C.GoString(hf), Source: C.GoString(src)}, nil
}

// Presets returns every built-in preset in order.
func Presets() ([]Preset, error) {
	n := PresetCount()
	out := make([]Preset, 0, n)
	for i := 0; i < n; i++ {
		p, err := PresetAt(i)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// optU32 is a pointer to v when set, else nil (an optional field of an output struct).
func optU32(set bool, v C.uint32_t) *uint32 {
	if !set {
		return nil
	}
	x := uint32(v)
	return &x
}
