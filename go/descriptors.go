package pdkv

/*
#include <pdkv.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Region is one registered KV tensor of an engine: NumBlocks kernel blocks of BlockLen bytes
// at Base. A Mamba region holds NumBlocks / ppl logical pages of BlockLen * ppl bytes.
type Region struct {
	// Base is the start address.
	Base uint64
	// BlockLen is the bytes per kernel block.
	BlockLen uint64
	// NumBlocks is the number of kernel blocks.
	NumBlocks uint64
}

// Descriptor is one contiguous transfer unit (addr, len).
type Descriptor struct {
	// Addr is the start address.
	Addr uint64
	// Len is the length in bytes.
	Len uint64
}

// DescriptorList is an immutable list of descriptors owned by the library
// (pdkv_descriptor_list_t).
type DescriptorList struct {
	h handle[C.pdkv_descriptor_list_t]
}

// newDescriptorList wraps an owned C list and arms its finalizer.
func newDescriptorList(p *C.pdkv_descriptor_list_t) *DescriptorList {
	l := &DescriptorList{h: handle[C.pdkv_descriptor_list_t]{ptr: p, free: func(p *C.pdkv_descriptor_list_t) { C.pdkv_descriptor_list_free(p) }}}
	runtime.SetFinalizer(l, func(l *DescriptorList) { l.h.close() })
	return l
}

// Close frees the list. It is idempotent (closing twice does nothing) and waits for calls in
// flight. Close on a nil *DescriptorList does nothing and returns nil, like a second Close.
func (l *DescriptorList) Close() error { return closeHandle(l, l.ref()) }

// ref returns the handle of l, or nil for a nil *DescriptorList: acquire, acquireArg and closeHandle
// turn that into a nil error (or a no-op) instead of a nil pointer dereference.
func (l *DescriptorList) ref() *handle[C.pdkv_descriptor_list_t] {
	if l == nil {
		return nil
	}
	return &l.h
}

// Items returns a copy of the descriptors.
func (l *DescriptorList) Items() ([]Descriptor, error) {
	p, err := l.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer l.h.release()
	var items *C.pdkv_descriptor_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_descriptor_list_items(p, &items, &n, &cerr), cerr); err != nil {
		runtime.KeepAlive(l)
		return nil, err
	}
	out := make([]Descriptor, int(n))
	if n > 0 {
		for i, d := range unsafe.Slice(items, int(n)) {
			out[i] = Descriptor{Addr: uint64(d.addr), Len: uint64(d.len)}
		}
	}
	runtime.KeepAlive(l)
	return out, nil
}

// cRegions copies regions into a slice of C structs (plain integers, so it may be passed to
// C directly). It returns nil for an empty input, which the C API accepts with count 0.
func cRegions(regions []Region) (*C.pdkv_region_t, C.size_t, []C.pdkv_region_t) {
	if len(regions) == 0 {
		return nil, 0, nil
	}
	cs := make([]C.pdkv_region_t, len(regions))
	for i, r := range regions {
		cs[i] = C.pdkv_region_t{base: C.uint64_t(r.Base), block_len: C.uint64_t(r.BlockLen), num_blocks: C.uint64_t(r.NumBlocks)}
	}
	return &cs[0], C.size_t(len(cs)), cs
}

// finishList converts the result of a descriptor builder.
func finishList(st C.pdkv_status_t, out *C.pdkv_descriptor_list_t, cerr *C.pdkv_error_t) (*DescriptorList, error) {
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	return newDescriptorList(out), nil
}

// AttentionLocalDescriptors builds local attention descriptors, region-major: region i, block
// b < NumBlocks*bsr gives (Base + b*BlockLen/bsr, BlockLen/bsr), bsr = BlockSizeRatio (1 when
// equal). Errors: ErrInvalidArgument (bsr 0 or not dividing BlockLen), ErrOverflow.
func AttentionLocalDescriptors(regions []Region, blockSizeRatio uint32) (*DescriptorList, error) {
	rp, rn, keep := cRegions(regions)
	var out *C.pdkv_descriptor_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_attention_local_descriptors(rp, rn, C.uint32_t(blockSizeRatio), &out, &cerr)
	runtime.KeepAlive(keep)
	return finishList(st, out, cerr)
}

// AttentionRemoteDescriptors builds the remote attention descriptors in one P rank's regions
// for the local rank of mapping. Errors: ErrIncompatible (region counts, block lengths that do
// not match the head ratio, head-sharded reads with bsr > 1), ErrOutOfBounds, ErrClosed.
func AttentionRemoteDescriptors(localRegions, remoteRegions []Region, mapping *TpMapping, blockSizeRatio uint32) (*DescriptorList, error) {
	mp, err := mapping.ref().acquireArg("mapping")
	if err != nil {
		return nil, err
	}
	defer mapping.h.release()
	lp, ln, lkeep := cRegions(localRegions)
	rp, rn, rkeep := cRegions(remoteRegions)
	var out *C.pdkv_descriptor_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_attention_remote_descriptors(lp, ln, rp, rn, mp, C.uint32_t(blockSizeRatio), &out, &cerr)
	runtime.KeepAlive(lkeep)
	runtime.KeepAlive(rkeep)
	runtime.KeepAlive(mapping)
	return finishList(st, out, cerr)
}

// AttentionSplitDescriptors builds the local split handle for remote rank pTpRank (D TP < P TP):
// each local attention descriptor (from AttentionLocalDescriptors) cut to that rank's head
// slot. Errors: ErrInvalidArgument (tp_ratio > 0, or pTpRank not a source rank), ErrIncompatible,
// ErrClosed.
func AttentionSplitDescriptors(localAttention *DescriptorList, mapping *TpMapping, blockSizeRatio, pTpRank uint32) (*DescriptorList, error) {
	lp, err := localAttention.ref().acquireArg("local_attention")
	if err != nil {
		return nil, err
	}
	defer localAttention.h.release()
	mp, err := mapping.ref().acquireArg("mapping")
	if err != nil {
		return nil, err
	}
	defer mapping.h.release()
	var out *C.pdkv_descriptor_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_attention_split_descriptors(lp, mp, C.uint32_t(blockSizeRatio), C.uint32_t(pTpRank), &out, &cerr)
	runtime.KeepAlive(localAttention)
	runtime.KeepAlive(mapping)
	return finishList(st, out, cerr)
}

// MambaLocalDescriptors builds the engine's full local Mamba descriptors as registered: per
// region, all logical blocks of each conv projection, then of the ssm state. geometry is this
// engine's; ppl its physical blocks per logical block. Errors: ErrInvalidArgument (ppl 0,
// NumBlocks % ppl != 0), ErrOutOfBounds (state does not fit), ErrUnsupportedMambaType.
func MambaLocalDescriptors(regions []Region, ppl uint64, geometry *Geometry) (*DescriptorList, error) {
	gp, err := geometry.ref().acquireArg("geometry")
	if err != nil {
		return nil, err
	}
	defer geometry.h.release()
	rp, rn, keep := cRegions(regions)
	var out *C.pdkv_descriptor_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_mamba_local_descriptors(rp, rn, C.uint64_t(ppl), gp, &out, &cerr)
	runtime.KeepAlive(keep)
	runtime.KeepAlive(geometry)
	return finishList(st, out, cerr)
}

// mambaSplitArgs acquires a geometry (the parameter named geometryArg) and a read list for the
// two per-P-rank builders.
func mambaSplitArgs(geometry *Geometry, geometryArg string, reads *MambaReadList) (*C.pdkv_geometry_t, *C.pdkv_mamba_read_list_t, func(), error) {
	gp, err := geometry.ref().acquireArg(geometryArg)
	if err != nil {
		return nil, nil, nil, err
	}
	rp, err := reads.ref().acquireArg("reads")
	if err != nil {
		geometry.h.release()
		return nil, nil, nil, err
	}
	return gp, rp, func() { reads.h.release(); geometry.h.release() }, nil
}

// MambaRemoteDescriptors builds the descriptors in P rank pTpRank's Mamba regions for the reads
// whose PTpRank matches (empty when it supplies nothing). pGeometry is the P engine's.
// Errors: as MambaLocalDescriptors, plus ErrOutOfBounds for a read leaving the P page.
func MambaRemoteDescriptors(pRegions []Region, pPpl uint64, pGeometry *Geometry, reads *MambaReadList, pTpRank uint32) (*DescriptorList, error) {
	gp, lp, release, err := mambaSplitArgs(pGeometry, "p_geometry", reads)
	if err != nil {
		return nil, err
	}
	defer release()
	rp, rn, keep := cRegions(pRegions)
	var out *C.pdkv_descriptor_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_mamba_remote_descriptors(rp, rn, C.uint64_t(pPpl), gp, lp, C.uint32_t(pTpRank), &out, &cerr)
	runtime.KeepAlive(keep)
	runtime.KeepAlive(pGeometry)
	runtime.KeepAlive(reads)
	return finishList(st, out, cerr)
}

// MambaLocalSplitDescriptors builds the D rank's local destinations matching
// MambaRemoteDescriptors(..., pTpRank) one to one. dGeometry is the D engine's.
// Errors: as MambaLocalDescriptors.
func MambaLocalSplitDescriptors(dRegions []Region, dPpl uint64, dGeometry *Geometry, reads *MambaReadList, pTpRank uint32) (*DescriptorList, error) {
	gp, lp, release, err := mambaSplitArgs(dGeometry, "d_geometry", reads)
	if err != nil {
		return nil, err
	}
	defer release()
	rp, rn, keep := cRegions(dRegions)
	var out *C.pdkv_descriptor_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_mamba_local_split_descriptors(rp, rn, C.uint64_t(dPpl), gp, lp, C.uint32_t(pTpRank), &out, &cerr)
	runtime.KeepAlive(keep)
	runtime.KeepAlive(dGeometry)
	runtime.KeepAlive(reads)
	return finishList(st, out, cerr)
}
