package pdkv

/*
#include <pdkv.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// ByteRange is a byte range inside one logical Mamba page of one layer.
type ByteRange struct {
	// Offset is the first byte.
	Offset uint64
	// Size is the length in bytes.
	Size uint64
}

// rangesCall runs a pdkv function that returns an owned pdkv_byte_range_list_t, copies its
// ranges into Go memory and frees the list.
func rangesCall(call func(out **C.pdkv_byte_range_list_t, cerr **C.pdkv_error_t) C.pdkv_status_t) ([]ByteRange, error) {
	var list *C.pdkv_byte_range_list_t
	var cerr *C.pdkv_error_t
	if err := check(call(&list, &cerr), cerr); err != nil {
		return nil, err
	}
	defer C.pdkv_byte_range_list_free(list)
	var items *C.pdkv_byte_range_t
	var n C.size_t
	if err := check(C.pdkv_byte_range_list_items(list, &items, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := make([]ByteRange, int(n))
	if n > 0 {
		for i, r := range unsafe.Slice(items, int(n)) {
			out[i] = ByteRange{Offset: uint64(r.offset), Size: uint64(r.size)}
		}
	}
	return out, nil
}

// LocalConvOffsets returns the cumulative (offset, size) of each conv projection in this
// engine's local page ([x|B|C], [Q|K|V] or [x]). Errors: ErrUnsupportedMambaType (not hybrid).
func (g *Geometry) LocalConvOffsets() ([]ByteRange, error) {
	p, err := g.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer g.h.release()
	out, err := rangesCall(func(l **C.pdkv_byte_range_list_t, e **C.pdkv_error_t) C.pdkv_status_t {
		return C.pdkv_mamba_local_conv_offsets(p, l, e)
	})
	runtime.KeepAlive(g)
	return out, err
}

// RemoteConvOffsets returns vLLM main's remote conv slices for localTpRank (this geometry is the
// LOCAL engine's): tpRatio >= 1 reads (base + lo*size, size) with lo = localTpRank % tpRatio;
// tpRatio < 0 reads each whole remote projection. Wrong for Mamba2 with n_groups < TP (vLLM
// #55208): plan with NewMambaReads. Errors: ErrInvalidArgument (tpRatio 0, indivisible sizes).
func (g *Geometry) RemoteConvOffsets(localTpRank uint32, tpRatio int32) ([]ByteRange, error) {
	p, err := g.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer g.h.release()
	out, err := rangesCall(func(l **C.pdkv_byte_range_list_t, e **C.pdkv_error_t) C.pdkv_status_t {
		return C.pdkv_mamba_remote_conv_offsets(p, C.uint32_t(localTpRank), C.int32_t(tpRatio), l, e)
	})
	runtime.KeepAlive(g)
	return out, err
}

// SSMReadRange returns vLLM's SSM temporal-state read in the remote page: tpRatio >= 1 reads
// the local ssm bytes at remoteConvBytes + lo*local_ssm_bytes; tpRatio < 0 the whole remote
// state. Errors: ErrInvalidArgument, ErrOverflow.
func (g *Geometry) SSMReadRange(remoteConvBytes, remoteSSMBytes uint64, localTpRank uint32, tpRatio int32) (ByteRange, error) {
	p, err := g.ref().acquire()
	if err != nil {
		return ByteRange{}, err
	}
	defer g.h.release()
	var r C.pdkv_byte_range_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_mamba_ssm_read_range(p, C.uint64_t(remoteConvBytes), C.uint64_t(remoteSSMBytes), C.uint32_t(localTpRank), C.int32_t(tpRatio), &r, &cerr)
	runtime.KeepAlive(g)
	if err := check(st, cerr); err != nil {
		return ByteRange{}, err
	}
	return ByteRange{Offset: uint64(r.offset), Size: uint64(r.size)}, nil
}

// MambaRead is one contiguous copy from a P rank's Mamba page into the D rank's page.
type MambaRead struct {
	// PTpRank is the remote (P) rank.
	PTpRank uint32
	// Part is "x", "B", "C", "Q", "K", "V" or "ssm".
	Part string
	// RemoteOffset is the offset in the P rank's page.
	RemoteOffset uint64
	// LocalOffset is the offset in the D rank's page.
	LocalOffset uint64
	// Length is the number of bytes.
	Length uint64
}

// MambaReadsRule selects how Mamba reads are computed.
type MambaReadsRule int32

// Mamba read rules.
const (
	// MambaReadsPdkv writes every D byte exactly once, replicated groups right.
	MambaReadsPdkv MambaReadsRule = C.PDKV_MAMBA_READS_PDKV
	// MambaReadsVLLM is what vLLM main reads (reproduces #55208), to diagnose a peer.
	MambaReadsVLLM MambaReadsRule = C.PDKV_MAMBA_READS_VLLM
)

// MambaReadList is a byte-exact list of Mamba reads of one D rank (pdkv_mamba_read_list_t).
type MambaReadList struct {
	h handle[C.pdkv_mamba_read_list_t]
}

// acquire2 acquires two geometries (possibly the same one) (released by the returned function).
func acquire2(a, b *Geometry, an, bn string) (*C.pdkv_geometry_t, *C.pdkv_geometry_t, func(), error) {
	pa, err := a.ref().acquireArg(an)
	if err != nil {
		return nil, nil, nil, err
	}
	pb, err := b.ref().acquireArg(bn)
	if err != nil {
		a.h.release()
		return nil, nil, nil, err
	}
	return pa, pb, func() { b.h.release(); a.h.release() }, nil
}

// NewMambaReads computes the reads of D rank dTpRank given the P and D geometries of the same
// model. Errors: ErrInvalidArgument (unknown rule, dTpRank >= D TP), ErrIncompatible (different
// models), ErrTpNotDivisible, ErrUnsupportedMambaType, ErrClosed.
func NewMambaReads(pGeometry, dGeometry *Geometry, dTpRank uint32, rule MambaReadsRule) (*MambaReadList, error) {
	pp, dp, release, err := acquire2(pGeometry, dGeometry, "p_geometry", "d_geometry")
	if err != nil {
		return nil, err
	}
	defer release()
	var out *C.pdkv_mamba_read_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_mamba_reads_new(pp, dp, C.uint32_t(dTpRank), C.int32_t(rule), &out, &cerr)
	runtime.KeepAlive(pGeometry)
	runtime.KeepAlive(dGeometry)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	l := &MambaReadList{h: handle[C.pdkv_mamba_read_list_t]{ptr: out, free: func(p *C.pdkv_mamba_read_list_t) { C.pdkv_mamba_read_list_free(p) }}}
	runtime.SetFinalizer(l, func(l *MambaReadList) { l.h.close() })
	return l, nil
}

// Close frees the list. It is idempotent (closing twice does nothing) and waits for calls in
// flight. Close on a nil *MambaReadList does nothing and returns nil, like a second Close.
func (l *MambaReadList) Close() error { return closeHandle(l, l.ref()) }

// ref returns the handle of l, or nil for a nil *MambaReadList: acquire, acquireArg and closeHandle
// turn that into a nil error (or a no-op) instead of a nil pointer dereference.
func (l *MambaReadList) ref() *handle[C.pdkv_mamba_read_list_t] {
	if l == nil {
		return nil
	}
	return &l.h
}

// Items returns a copy of the reads, in page order (ssm last).
func (l *MambaReadList) Items() ([]MambaRead, error) {
	p, err := l.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer l.h.release()
	var items *C.pdkv_mamba_read_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_mamba_read_list_items(p, &items, &n, &cerr), cerr); err != nil {
		runtime.KeepAlive(l)
		return nil, err
	}
	out := make([]MambaRead, int(n))
	if n > 0 {
		for i, r := range unsafe.Slice(items, int(n)) {
			out[i] = MambaRead{
				PTpRank:      uint32(r.p_tp_rank),
				Part:         C.GoString(r.part),
				RemoteOffset: uint64(r.remote_offset),
				LocalOffset:  uint64(r.local_offset),
				Length:       uint64(r.length),
			}
		}
	}
	runtime.KeepAlive(l)
	return out, nil
}

// SourceRanks returns the distinct P ranks the reads touch, ascending.
func (l *MambaReadList) SourceRanks() ([]uint32, error) {
	p, err := l.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer l.h.release()
	var r *C.uint32_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_mamba_read_list_source_ranks(p, &r, &n, &cerr), cerr); err != nil {
		runtime.KeepAlive(l)
		return nil, err
	}
	out := u32Slice(r, n)
	runtime.KeepAlive(l)
	return out, nil
}
