package pdkv

/*
#include <pdkv.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// TpMappingParams are the inputs of a TP mapping: one local rank against one remote engine.
type TpMappingParams struct {
	// LocalTpSize is the local (D) TP size.
	LocalTpSize uint32
	// LocalTpRank is the local rank, < LocalTpSize.
	LocalTpRank uint32
	// RemoteTpSize is the remote (P) TP size.
	RemoteTpSize uint32
	// TotalKVHeads is the model's KV heads (MLA: 1).
	TotalKVHeads uint32
	// UseMLA marks multi-head latent attention.
	UseMLA bool
	// HasMamba is true when the model has SSM groups (always TP-sharded).
	HasMamba bool
}

// TpMappingInfo holds the scalars of a TP mapping.
type TpMappingInfo struct {
	// TpRatio is vLLM's tp_ratio (see TpRatio).
	TpRatio int32
	// RankOffsetFactor is the head-slice offset in the remote block, in local block lengths.
	RankOffsetFactor uint32
	// LocalReplicated is true when the local TP exceeds the KV heads.
	LocalReplicated bool
	// RemoteReplicated is true when the remote TP exceeds the KV heads.
	RemoteReplicated bool
	// LocalPhysicalHeads is max(1, K/local_tp_size).
	LocalPhysicalHeads uint32
	// RemotePhysicalHeads is max(1, K/remote_tp_size).
	RemotePhysicalHeads uint32
	// NumAttentionReads is the number of attention source ranks.
	NumAttentionReads uint32
	// NotificationsExpected is the per-request notifications on each remote (P) rank.
	NotificationsExpected uint32
}

// TpList selects one rank list of a TpMapping (pdkv_tp_mapping_list_t).
type TpList int32

// Rank lists of a TP mapping.
const (
	// TpListHandshakeTargets are the remote ranks this rank handshakes with.
	TpListHandshakeTargets TpList = C.PDKV_TP_LIST_HANDSHAKE_TARGETS
	// TpListAttentionSources are the remote ranks attention KV is read from (GQA dedup).
	TpListAttentionSources TpList = C.PDKV_TP_LIST_ATTENTION_SOURCES
	// TpListMambaSources are the remote ranks Mamba state is read from (empty: no Mamba).
	TpListMambaSources TpList = C.PDKV_TP_LIST_MAMBA_SOURCES
	// TpListAllSources is the sorted union of attention and Mamba sources.
	TpListAllSources TpList = C.PDKV_TP_LIST_ALL_SOURCES
	// TpListAttentionSlots is parallel to TpListAllSources: the index into the attention sources.
	TpListAttentionSlots TpList = C.PDKV_TP_LIST_ATTENTION_SLOTS
	// TpListNotifyTargets are the remote ranks notified per request.
	TpListNotifyTargets TpList = C.PDKV_TP_LIST_NOTIFY_TARGETS
)

// TpMapping says which remote ranks one local rank reads from, and where (pdkv_tp_mapping_t).
type TpMapping struct {
	h handle[C.pdkv_tp_mapping_t]
}

// NewTpMapping computes the mapping. Errors: ErrInvalidArgument (zero TP or heads, LocalTpRank >=
// LocalTpSize), ErrTpNotDivisible (names both sizes), ErrHeadsNotDivisible.
func NewTpMapping(params TpMappingParams) (*TpMapping, error) {
	var cp C.pdkv_tp_mapping_params_t
	cp.struct_size = C.size_t(unsafe.Sizeof(cp))
	cp.local_tp_size = C.uint32_t(params.LocalTpSize)
	cp.local_tp_rank = C.uint32_t(params.LocalTpRank)
	cp.remote_tp_size = C.uint32_t(params.RemoteTpSize)
	cp.total_kv_heads = C.uint32_t(params.TotalKVHeads)
	cp.use_mla = cBool(params.UseMLA)
	cp.has_mamba = cBool(params.HasMamba)
	var out *C.pdkv_tp_mapping_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_tp_mapping_new(&cp, &out, &cerr), cerr); err != nil {
		return nil, err
	}
	m := &TpMapping{h: handle[C.pdkv_tp_mapping_t]{ptr: out, free: func(p *C.pdkv_tp_mapping_t) { C.pdkv_tp_mapping_free(p) }}}
	runtime.SetFinalizer(m, func(m *TpMapping) { m.h.close() })
	return m, nil
}

// Close frees the mapping. It is idempotent (closing twice does nothing) and waits for calls in
// flight. Close on a nil *TpMapping does nothing and returns nil, like a second Close.
func (m *TpMapping) Close() error { return closeHandle(m, m.ref()) }

// ref returns the handle of m, or nil for a nil *TpMapping: acquire, acquireArg and closeHandle
// turn that into a nil error (or a no-op) instead of a nil pointer dereference.
func (m *TpMapping) ref() *handle[C.pdkv_tp_mapping_t] {
	if m == nil {
		return nil
	}
	return &m.h
}

// Info returns the mapping's scalars.
func (m *TpMapping) Info() (TpMappingInfo, error) {
	p, err := m.ref().acquire()
	if err != nil {
		return TpMappingInfo{}, err
	}
	defer m.h.release()
	var ci C.pdkv_tp_mapping_info_t
	ci.struct_size = C.size_t(unsafe.Sizeof(ci))
	var cerr *C.pdkv_error_t
	st := C.pdkv_tp_mapping_get_info(p, &ci, &cerr)
	runtime.KeepAlive(m)
	if err := check(st, cerr); err != nil {
		return TpMappingInfo{}, err
	}
	return TpMappingInfo{
		TpRatio:               int32(ci.tp_ratio),
		RankOffsetFactor:      uint32(ci.rank_offset_factor),
		LocalReplicated:       ci.local_replicated != 0,
		RemoteReplicated:      ci.remote_replicated != 0,
		LocalPhysicalHeads:    uint32(ci.local_physical_heads),
		RemotePhysicalHeads:   uint32(ci.remote_physical_heads),
		NumAttentionReads:     uint32(ci.num_attention_reads),
		NotificationsExpected: uint32(ci.notifications_expected),
	}, nil
}

// Ranks returns a copy of one rank list of the mapping. Errors: ErrInvalidArgument (unknown list).
func (m *TpMapping) Ranks(which TpList) ([]uint32, error) {
	p, err := m.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer m.h.release()
	var r *C.uint32_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_tp_mapping_ranks(p, C.int32_t(which), &r, &n, &cerr)
	if err := check(st, cerr); err != nil {
		runtime.KeepAlive(m)
		return nil, err
	}
	out := u32Slice(r, n)
	runtime.KeepAlive(m)
	return out, nil
}

// AttentionSlot returns the attention slot of remoteTpRank (its index in the attention sources,
// or its duplicate-head twin's). Errors: ErrInvalidArgument (not a source rank).
func (m *TpMapping) AttentionSlot(remoteTpRank uint32) (uint32, error) {
	p, err := m.ref().acquire()
	if err != nil {
		return 0, err
	}
	defer m.h.release()
	var out C.uint32_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_tp_mapping_attention_slot(p, C.uint32_t(remoteTpRank), &out, &cerr)
	runtime.KeepAlive(m)
	if err := check(st, cerr); err != nil {
		return 0, err
	}
	return uint32(out), nil
}
