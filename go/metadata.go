package pdkv

/*
#include <stdlib.h>
#include <pdkv.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// KVLayout is the attention KV layout of a kernel block (pdkv_kv_layout_t).
type KVLayout int32

// KV layouts.
const (
	// KVLayoutHND puts heads first: what head-sliced (heterogeneous TP) reads need.
	KVLayoutHND KVLayout = C.PDKV_KV_LAYOUT_HND
	// KVLayoutNHD puts tokens first.
	KVLayoutNHD KVLayout = C.PDKV_KV_LAYOUT_NHD
)

// RegionKind is the kind of the first layer using a registered region (pdkv_region_kind_t).
type RegionKind int32

// Region kinds.
const (
	// RegionAttention is an attention KV region.
	RegionAttention RegionKind = C.PDKV_REGION_ATTENTION
	// RegionMamba is a Mamba state region.
	RegionMamba RegionKind = C.PDKV_REGION_MAMBA
	// RegionMLA is an MLA-typed attention region of a GQA model: one latent replicated on every
	// rank, read whole from one prefill rank (metadata format 1.1).
	RegionMLA RegionKind = C.PDKV_REGION_MLA
)

// EngineLayout says where an engine's regions live and what it advertises beyond its geometry.
// Start from DefaultEngineLayout and override.
type EngineLayout struct {
	// EngineID is a non-empty UTF-8 id of at most 256 bytes.
	EngineID string
	// TpRank is this rank, < the config's TpSize.
	TpRank uint32
	// NumLogicalBlocks is per region; kernel blocks = this * ppl.
	NumLogicalBlocks uint64
	// NumRegions is the registered KV tensors (HMA: layers per group).
	NumRegions uint32
	// Base is the address of region 0; regions follow back to back.
	Base uint64
	// RegionBases, if non-empty, gives NumRegions explicit region addresses.
	RegionBases []uint64
	// KVLayout is the attention KV layout.
	KVLayout KVLayout
	// PrefixCaching is nil to derive it (on iff the Mamba cache mode is not none), else on/off.
	PrefixCaching *bool
	// RegionKinds, if non-empty, gives the kind of each of the NumRegions regions. Empty:
	// RegionMamba for hybrids, else RegionAttention, and for a model with MLA-typed layers the
	// kinds of its attention layers in LayerPattern order, repeated over the regions.
	RegionKinds []RegionKind
	// PpSize, PpRank, LayerBegin and LayerEnd describe a pipeline stage (metadata format 1.2):
	// stage PpRank of PpSize holding the model layers [LayerBegin, LayerEnd); region i's layer
	// is LayerBegin + i. PpSize 1 (the default) is one stage holding every layer; LayerEnd nil
	// means through the model's last layer.
	PpSize     uint32
	PpRank     uint32
	LayerBegin uint32
	LayerEnd   *uint32
}

// DefaultEngineLayout returns pdkv_engine_layout_init's defaults: engine id "engine", rank 0,
// 64 logical blocks, 1 region at 2^40, HND, derived prefix caching, one pipeline stage.
func DefaultEngineLayout() EngineLayout {
	var c C.pdkv_engine_layout_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_engine_layout_init(&c, &cerr), cerr); err != nil {
		panic(err) // only a NULL layout fails
	}
	return EngineLayout{
		EngineID:         C.GoString(c.engine_id),
		TpRank:           uint32(c.tp_rank),
		NumLogicalBlocks: uint64(c.num_logical_blocks),
		NumRegions:       uint32(c.num_regions),
		Base:             uint64(c.base),
		KVLayout:         KVLayout(c.kv_layout),
		PpSize:           uint32(c.pp_size),
		PpRank:           uint32(c.pp_rank),
		LayerBegin:       uint32(c.layer_begin),
	}
}

// EngineMetadataInfo holds the scalars of an engine metadata.
type EngineMetadataInfo struct {
	// EngineID is the engine's id.
	EngineID string
	// TpSize is the engine's TP size.
	TpSize uint32
	// TpRank is the advertising rank.
	TpRank uint32
	// KVLayout is the attention KV layout.
	KVLayout KVLayout
	// ConvLayout is the Mamba conv layout.
	ConvLayout ConvLayout
	// LogicalBlockSize is the tokens per logical (HMA) block.
	LogicalBlockSize uint32
	// KernelBlockSize is the tokens per kernel block.
	KernelBlockSize uint32
	// PhysicalBlocksPerLogical is ppl.
	PhysicalBlocksPerLogical uint32
	// NumKernelBlocks is the kernel blocks per region.
	NumKernelBlocks uint64
	// NumRegions is the number of regions.
	NumRegions int
	// MambaType is the Mamba kind (MambaNone: pure attention).
	MambaType MambaType
	// ConvBytes is per rank per logical block.
	ConvBytes uint64
	// SSMBytes is per rank per logical block.
	SSMBytes uint64
	// NumConvProjections is the number of conv projections.
	NumConvProjections int
	// AttentionBytesPerToken is per rank.
	AttentionBytesPerToken uint64
	// UseMLA marks multi-head latent attention.
	UseMLA bool
	// TotalKVHeads is the model's KV heads.
	TotalKVHeads uint32
	// PrefixCaching says prefix caching is on.
	PrefixCaching bool
	// CacheMode is the Mamba cache mode.
	CacheMode MambaCacheMode
	// ModelFingerprint is the model's transfer-geometry fingerprint.
	ModelFingerprint uint64
	// PpSize is the engine's pipeline stages (1 without PP) and PpRank this rank's stage, which
	// holds the model layers [LayerBegin, LayerEnd) (LayerEnd 0: through the last layer).
	PpSize     uint32
	PpRank     uint32
	LayerBegin uint32
	LayerEnd   uint32
	// ModelFormat, KVCacheFormat, ConvStateFormat and SSMStateFormat are the engine's element
	// formats (metadata format 1.3); FormatUnknown: not named, or metadata from an older pdkv
	// (compatible with any format in the handshake).
	ModelFormat     ElementFormat
	KVCacheFormat   ElementFormat
	ConvStateFormat ElementFormat
	SSMStateFormat  ElementFormat
}

// MetadataRegion is one advertised region.
type MetadataRegion struct {
	// Base is the region address.
	Base uint64
	// BlockLen is the kernel page bytes.
	BlockLen uint64
	// NumBlocks is the kernel blocks.
	NumBlocks uint64
	// Kind is the kind of the first layer using the region.
	Kind RegionKind
	// Layer is the model layer index of the first user.
	Layer uint32
}

// EngineMetadata is what one engine rank advertises in the handshake (wire format 1.x).
// Immutable.
type EngineMetadata struct {
	h handle[C.pdkv_engine_metadata_t]
}

// newEngineMetadata wraps an owned C metadata and arms its finalizer.
func newEngineMetadata(p *C.pdkv_engine_metadata_t) *EngineMetadata {
	m := &EngineMetadata{h: handle[C.pdkv_engine_metadata_t]{ptr: p, free: func(p *C.pdkv_engine_metadata_t) { C.pdkv_engine_metadata_free(p) }}}
	runtime.SetFinalizer(m, func(m *EngineMetadata) { m.h.close() })
	return m
}

// Close frees the metadata. It is idempotent (closing twice does nothing) and waits for calls in
// flight. Close on a nil *EngineMetadata does nothing and returns nil, like a second Close.
func (m *EngineMetadata) Close() error { return closeHandle(m, m.ref()) }

// ref returns the handle of m, or nil for a nil *EngineMetadata: acquire, acquireArg and closeHandle
// turn that into a nil error (or a no-op) instead of a nil pointer dereference.
func (m *EngineMetadata) ref() *handle[C.pdkv_engine_metadata_t] {
	if m == nil {
		return nil
	}
	return &m.h
}

// EngineMetadataFromModel builds the metadata of rank layout.TpRank of an engine running model
// with config. Errors: those of NewGeometry, ErrInvalidArgument (empty engine id, rank >= TP,
// unknown KV layout, PpSize 0, LayerEnd not above LayerBegin, overlapping regions, RegionBases or RegionKinds
// of the wrong length, a region kind the model lacks...), ErrOverflow, ErrClosed.
func EngineMetadataFromModel(model *Model, config EngineConfig, layout EngineLayout) (*EngineMetadata, error) {
	mp, err := model.ref().acquireArg("model")
	if err != nil {
		return nil, err
	}
	defer model.h.release()
	if len(layout.RegionBases) > 0 && len(layout.RegionBases) != int(layout.NumRegions) {
		return nil, goErr(StatusInvalidArgument, "layout.RegionBases has %d entries for num_regions %d", len(layout.RegionBases), layout.NumRegions)
	}
	if len(layout.RegionKinds) > 0 && len(layout.RegionKinds) != int(layout.NumRegions) {
		return nil, goErr(StatusInvalidArgument, "layout.RegionKinds has %d entries for num_regions %d", len(layout.RegionKinds), layout.NumRegions)
	}
	var a cArena
	defer a.free()
	var cl C.pdkv_engine_layout_t
	cl.struct_size = C.size_t(unsafe.Sizeof(cl))
	id, err := a.str("layout.EngineID", layout.EngineID)
	if err != nil {
		return nil, err
	}
	cl.engine_id = id
	cl.tp_rank = C.uint32_t(layout.TpRank)
	cl.num_logical_blocks = C.uint64_t(layout.NumLogicalBlocks)
	cl.num_regions = C.uint32_t(layout.NumRegions)
	cl.base = C.uint64_t(layout.Base)
	cl.region_bases = a.u64s(layout.RegionBases)
	cl.kv_layout = C.int32_t(layout.KVLayout)
	if layout.PrefixCaching != nil {
		cl.field_mask |= C.PDKV_LAYOUT_FIELD_PREFIX_CACHING
		cl.prefix_caching = cBool(*layout.PrefixCaching)
	}
	cl.field_mask |= C.PDKV_LAYOUT_FIELD_PIPELINE
	cl.pp_size = C.uint32_t(layout.PpSize)
	cl.pp_rank = C.uint32_t(layout.PpRank)
	cl.layer_begin = C.uint32_t(layout.LayerBegin)
	if layout.LayerEnd != nil {
		cl.field_mask |= C.PDKV_LAYOUT_FIELD_LAYER_END
		cl.layer_end = C.uint32_t(*layout.LayerEnd)
	}
	if len(layout.RegionKinds) > 0 {
		p := a.alloc(uintptr(len(layout.RegionKinds)) * 4)
		kinds := unsafe.Slice((*int32)(p), len(layout.RegionKinds))
		for i, k := range layout.RegionKinds {
			kinds[i] = int32(k)
		}
		cl.region_kinds = (*C.int32_t)(p)
	}
	var cc C.pdkv_engine_config_t
	free := config.toC(&cc)
	defer free()
	var out *C.pdkv_engine_metadata_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_engine_metadata_from_model(mp, &cc, &cl, &out, &cerr)
	runtime.KeepAlive(model)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	return newEngineMetadata(out), nil
}

// DecodeEngineMetadata decodes untrusted bytes from a peer. Errors: ErrParse (truncated, wrong
// magic, unknown major version, bad fields; names the field), ErrChecksum, ErrOutOfBounds.
func DecodeEngineMetadata(data []byte) (*EngineMetadata, error) {
	var p *C.uint8_t
	if len(data) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&data[0]))
	}
	var out *C.pdkv_engine_metadata_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_engine_metadata_decode(p, C.size_t(len(data)), &out, &cerr)
	runtime.KeepAlive(data)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	return newEngineMetadata(out), nil
}

// Info returns the metadata's scalars.
func (m *EngineMetadata) Info() (EngineMetadataInfo, error) {
	p, err := m.ref().acquire()
	if err != nil {
		return EngineMetadataInfo{}, err
	}
	defer m.h.release()
	var ci C.pdkv_engine_metadata_info_t
	ci.struct_size = C.size_t(unsafe.Sizeof(ci))
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_engine_metadata_get_info(p, &ci, &cerr), cerr); err != nil {
		return EngineMetadataInfo{}, err
	}
	info := EngineMetadataInfo{
		EngineID:                 C.GoString(ci.engine_id),
		TpSize:                   uint32(ci.tp_size),
		TpRank:                   uint32(ci.tp_rank),
		KVLayout:                 KVLayout(ci.kv_layout),
		ConvLayout:               ConvLayout(ci.conv_layout),
		LogicalBlockSize:         uint32(ci.logical_block_size),
		KernelBlockSize:          uint32(ci.kernel_block_size),
		PhysicalBlocksPerLogical: uint32(ci.physical_blocks_per_logical),
		NumKernelBlocks:          uint64(ci.num_kernel_blocks),
		NumRegions:               int(ci.num_regions),
		MambaType:                MambaType(ci.mamba_type),
		ConvBytes:                uint64(ci.conv_bytes),
		SSMBytes:                 uint64(ci.ssm_bytes),
		NumConvProjections:       int(ci.num_conv_projections),
		AttentionBytesPerToken:   uint64(ci.attention_bytes_per_token),
		UseMLA:                   ci.use_mla != 0,
		TotalKVHeads:             uint32(ci.total_kv_heads),
		PrefixCaching:            ci.prefix_caching != 0,
		CacheMode:                MambaCacheMode(ci.cache_mode),
		ModelFingerprint:         uint64(ci.model_fingerprint),
		PpSize:                   uint32(ci.pp_size),
		PpRank:                   uint32(ci.pp_rank),
		LayerBegin:               uint32(ci.layer_begin),
		LayerEnd:                 uint32(ci.layer_end),
		ModelFormat:              ElementFormat(ci.model_format),
		KVCacheFormat:            ElementFormat(ci.kv_cache_format),
		ConvStateFormat:          ElementFormat(ci.conv_state_format),
		SSMStateFormat:           ElementFormat(ci.ssm_state_format),
	}
	runtime.KeepAlive(m)
	return info, nil
}

// Regions returns a copy of the advertised regions.
func (m *EngineMetadata) Regions() ([]MetadataRegion, error) {
	p, err := m.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer m.h.release()
	var r *C.pdkv_metadata_region_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_engine_metadata_regions(p, &r, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := make([]MetadataRegion, int(n))
	if n > 0 {
		for i, x := range unsafe.Slice(r, int(n)) {
			out[i] = MetadataRegion{uint64(x.base), uint64(x.block_len), uint64(x.num_blocks), RegionKind(x.kind), uint32(x.layer)}
		}
	}
	runtime.KeepAlive(m)
	return out, nil
}

// ConvProjectionBytes returns the conv projection bytes in DS page order (empty for pure
// attention).
func (m *EngineMetadata) ConvProjectionBytes() ([]uint64, error) {
	p, err := m.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer m.h.release()
	var r *C.uint64_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_engine_metadata_conv_projection_bytes(p, &r, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := u64Slice(r, n)
	runtime.KeepAlive(m)
	return out, nil
}

// Encode returns the metadata's deterministic wire encoding (an owned library buffer, copied).
func (m *EngineMetadata) Encode() ([]byte, error) {
	p, err := m.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer m.h.release()
	var b *C.pdkv_bytes_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_engine_metadata_encode_bytes(p, &b, &cerr), cerr); err != nil {
		return nil, err
	}
	defer C.pdkv_bytes_free(b)
	var data *C.uint8_t
	var n C.size_t
	cerr = nil
	if err := check(C.pdkv_bytes_data(b, &data, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := C.GoBytes(unsafe.Pointer(data), C.int(n))
	runtime.KeepAlive(m)
	return out, nil
}

// AppendEncoded appends the wire encoding to dst, encoding straight into Go memory (the
// caller-buffer form of the C API). It returns the extended slice.
func (m *EngineMetadata) AppendEncoded(dst []byte) ([]byte, error) {
	p, err := m.ref().acquire()
	if err != nil {
		return dst, err
	}
	defer m.h.release()
	out, err := appendViaCallerBuffer(dst, 0, func(buf unsafe.Pointer, capacity C.size_t, n *C.size_t, cerr **C.pdkv_error_t) C.pdkv_status_t {
		return C.pdkv_engine_metadata_encode(p, (*C.uint8_t)(buf), capacity, n, cerr)
	})
	runtime.KeepAlive(m)
	return out, err
}

// Equal reports whether both metadata are field-for-field equal.
func (m *EngineMetadata) Equal(other *EngineMetadata) (bool, error) {
	a, err := m.ref().acquire()
	if err != nil {
		return false, err
	}
	defer m.h.release()
	b, err := other.ref().acquireArg("other")
	if err != nil {
		return false, err
	}
	defer other.h.release()
	var out C.uint8_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_engine_metadata_equal(a, b, &out, &cerr)
	runtime.KeepAlive(m)
	runtime.KeepAlive(other)
	if err := check(st, cerr); err != nil {
		return false, err
	}
	return out != 0, nil
}

// MetadataWireVersion returns the wire format version this library writes.
func MetadataWireVersion() (major, minor uint16) {
	var a, b C.uint16_t
	C.pdkv_metadata_wire_version(&a, &b)
	return uint16(a), uint16(b)
}

// CRC32C returns the CRC-32C (Castagnoli) of data, as the metadata header uses.
func CRC32C(data []byte) (uint32, error) {
	var p *C.uint8_t
	if len(data) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&data[0]))
	}
	var out C.uint32_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_crc32c(p, C.size_t(len(data)), &out, &cerr)
	runtime.KeepAlive(data)
	if err := check(st, cerr); err != nil {
		return 0, err
	}
	return uint32(out), nil
}

// Fingerprint returns the stable 64-bit fingerprint of the parts of the model that change
// transfer geometry (name and source excluded).
func (m *Model) Fingerprint() (uint64, error) {
	p, err := m.ref().acquire()
	if err != nil {
		return 0, err
	}
	defer m.h.release()
	var out C.uint64_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_model_fingerprint(p, &out, &cerr)
	runtime.KeepAlive(m)
	if err := check(st, cerr); err != nil {
		return 0, err
	}
	return uint64(out), nil
}

// Incompatibility is one problem found by a handshake validation.
type Incompatibility struct {
	// Status is INCOMPATIBLE, TP_NOT_DIVISIBLE, ...
	Status Status
	// Field is the metadata field, e.g. "kv_layout", "regions[3].num_blocks".
	Field string
	// LocalValue is the local side's value.
	LocalValue string
	// RemoteValue is the remote side's value.
	RemoteValue string
	// Message says what is wrong, naming the values.
	Message string
	// Fix says what the operator can change.
	Fix string
	// Text is "<STATUS> <field>: <message> (local: v, remote: v). Fix: <fix>".
	Text string
}

// takeReport copies every item of an owned handshake report and frees it.
func takeReport(st C.pdkv_status_t, r *C.pdkv_handshake_report_t, cerr *C.pdkv_error_t) ([]Incompatibility, error) {
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	defer C.pdkv_handshake_report_free(r)
	var n C.size_t
	cerr = nil
	if err := check(C.pdkv_handshake_report_count(r, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := make([]Incompatibility, 0, int(n))
	for i := C.size_t(0); i < n; i++ {
		var it C.pdkv_incompatibility_t
		it.struct_size = C.size_t(unsafe.Sizeof(it))
		cerr = nil
		if err := check(C.pdkv_handshake_report_item(r, i, &it, &cerr), cerr); err != nil {
			return nil, err
		}
		out = append(out, Incompatibility{
			Status: Status(it.status), Field: C.GoString(it.field), LocalValue: C.GoString(it.local_value),
			RemoteValue: C.GoString(it.remote_value), Message: C.GoString(it.message), Fix: C.GoString(it.fix),
			Text: C.GoString(it.text),
		})
	}
	return out, nil
}

// HandshakeValidate validates a (local, remote) pair ("local" runs the check: D when pulling).
// An incompatible pair is not an error: every item is listed (empty: the pair can be served).
func HandshakeValidate(local, remote *EngineMetadata) ([]Incompatibility, error) {
	a, err := local.ref().acquireArg("local")
	if err != nil {
		return nil, err
	}
	defer local.h.release()
	b, err := remote.ref().acquireArg("remote")
	if err != nil {
		return nil, err
	}
	defer remote.h.release()
	var r *C.pdkv_handshake_report_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_handshake_validate(a, b, &r, &cerr)
	out, err := takeReport(st, r, cerr)
	runtime.KeepAlive(local)
	runtime.KeepAlive(remote)
	return out, err
}

// HandshakeRequireCompatible returns nil when the pair can be served, else an ErrIncompatible
// error whose message joins every item's text.
func HandshakeRequireCompatible(local, remote *EngineMetadata) error {
	a, err := local.ref().acquireArg("local")
	if err != nil {
		return err
	}
	defer local.h.release()
	b, err := remote.ref().acquireArg("remote")
	if err != nil {
		return err
	}
	defer remote.h.release()
	var cerr *C.pdkv_error_t
	st := C.pdkv_handshake_require_compatible(a, b, &cerr)
	runtime.KeepAlive(local)
	runtime.KeepAlive(remote)
	return check(st, cerr)
}

// acquireAll acquires every metadata (the same one may repeat) and writes their C pointers into
// an array allocated in C memory (it is referenced from C structs, so it must not be Go memory).
// release releases them.
func acquireAll(a *cArena, ms []*EngineMetadata, arg string) (**C.pdkv_engine_metadata_t, func(), error) {
	var locked []*EngineMetadata
	release := func() {
		for _, m := range locked {
			m.h.release()
		}
	}
	if len(ms) == 0 {
		return nil, release, nil
	}
	arr := (**C.pdkv_engine_metadata_t)(a.alloc(uintptr(len(ms)) * unsafe.Sizeof((*C.pdkv_engine_metadata_t)(nil))))
	s := unsafe.Slice(arr, len(ms))
	for i, m := range ms {
		p, err := m.ref().acquireArg(fmt.Sprintf("%s[%d]", arg, i))
		if err != nil {
			release()
			return nil, nil, err
		}
		locked = append(locked, m)
		s[i] = p
	}
	return arr, release, nil
}

// HandshakeValidateEngineRanks checks that the ranks of ONE remote engine agree (engine id, TP
// size, block counts, region count, geometry, distinct ranks); items compare ranks[0] with the
// offending rank.
func HandshakeValidateEngineRanks(ranks []*EngineMetadata) ([]Incompatibility, error) {
	var a cArena
	defer a.free()
	arr, release, err := acquireAll(&a, ranks, "ranks")
	if err != nil {
		return nil, err
	}
	defer release()
	var r *C.pdkv_handshake_report_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_handshake_validate_engine_ranks(arr, C.size_t(len(ranks)), &r, &cerr)
	out, err := takeReport(st, r, cerr)
	runtime.KeepAlive(ranks)
	return out, err
}
