package pdkv

/*
#include <pdkv.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// StagePair is one overlapping (P stage, D stage) pair: D's ranks of stage DPpRank handshake
// P's ranks of stage PPpRank (each (engine, PP rank) a separate peer) and read the layers
// [LayerBegin, LayerEnd) from them (LayerEnd 0: through the model's last layer).
type StagePair struct {
	PPpRank    uint32
	DPpRank    uint32
	LayerBegin uint32
	LayerEnd   uint32
}

// PipelineStagePairs pairs P stages with D stages by their layer windows: pStages holds one
// rank's metadata of EVERY P stage, dStages one rank's metadata of each D stage to pair (any
// subset). It returns every overlapping pair, ordered by (D stage, P stage). Errors:
// ErrInvalidArgument (an empty side, mixed engines or pp sizes, a stage twice, a P stage
// missing), ErrIncompatible (P's stages not consecutive from layer 0, a D stage past P's last
// layer), ErrClosed.
func PipelineStagePairs(pStages, dStages []*EngineMetadata) ([]StagePair, error) {
	var a cArena
	defer a.free()
	p, releaseP, err := acquireAll(&a, pStages, "p_stages")
	if err != nil {
		return nil, err
	}
	defer releaseP()
	d, releaseD, err := acquireAll(&a, dStages, "d_stages")
	if err != nil {
		return nil, err
	}
	defer releaseD()
	var list *C.pdkv_stage_pair_list_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_pipeline_stage_pairs(p, C.size_t(len(pStages)), d, C.size_t(len(dStages)), &list, &cerr)
	runtime.KeepAlive(pStages)
	runtime.KeepAlive(dStages)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	defer C.pdkv_stage_pair_list_free(list)
	var items *C.pdkv_stage_pair_t
	var n C.size_t
	if err := check(C.pdkv_stage_pair_list_items(list, &items, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := make([]StagePair, int(n))
	if n > 0 {
		for i, x := range unsafe.Slice(items, int(n)) {
			out[i] = StagePair{uint32(x.p_pp_rank), uint32(x.d_pp_rank), uint32(x.layer_begin), uint32(x.layer_end)}
		}
	}
	return out, nil
}

// PipelineNotificationsExpected returns the READ notifications each rank of P stage pPpRank
// waits for per request: the pairs naming it (pairs over ALL of D's stages) times the TP rule
// for (pTpSize, dTpSize); 0 when no D stage reads it. Errors: ErrTpNotDivisible.
func PipelineNotificationsExpected(pairs []StagePair, pPpRank, pTpSize, dTpSize uint32) (uint32, error) {
	var a cArena
	defer a.free()
	var cp *C.pdkv_stage_pair_t
	if len(pairs) > 0 {
		cp = (*C.pdkv_stage_pair_t)(a.alloc(uintptr(len(pairs)) * unsafe.Sizeof(C.pdkv_stage_pair_t{})))
		for i, x := range pairs {
			unsafe.Slice(cp, len(pairs))[i] = C.pdkv_stage_pair_t{C.uint32_t(x.PPpRank), C.uint32_t(x.DPpRank), C.uint32_t(x.LayerBegin), C.uint32_t(x.LayerEnd)}
		}
	}
	var out C.uint32_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_pipeline_notifications_expected(cp, C.size_t(len(pairs)), C.uint32_t(pPpRank), C.uint32_t(pTpSize), C.uint32_t(dTpSize), &out, &cerr), cerr); err != nil {
		return 0, err
	}
	return uint32(out), nil
}
