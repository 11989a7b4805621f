//! Pipeline parallelism: vLLM's default layer split, the pairing of D stages with P stages (each
//! (engine, PP rank) a separate peer) and the notifications a P stage waits for.
use crate::error::Result;
use crate::ffi_util::{check, sp, take_list};
use crate::metadata::EngineMetadata;
use pdkv_sys as sys;

/// One overlapping (P stage, D stage) pair and the layers both hold, `[layer_begin,
/// layer_end)` (`layer_end` 0: through the model's last layer). Layout-identical to
/// `pdkv_stage_pair_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StagePair {
    /// P's stage: its TP ranks are the peer D's stage reads these layers from.
    pub p_pp_rank: u32,
    /// D's stage.
    pub d_pp_rank: u32,
    /// First layer both stages hold.
    pub layer_begin: u32,
    /// One past the last (0: through the model's last layer).
    pub layer_end: u32,
}

const _: () =
    assert!(std::mem::size_of::<StagePair>() == std::mem::size_of::<sys::pdkv_stage_pair_t>());

/// Pairs P stages with D stages by their layer windows (`pdkv_pipeline_stage_pairs`):
/// `p_stages` one rank's metadata of EVERY P stage, `d_stages` one rank's metadata of each D
/// stage to pair (any subset). Every overlapping pair, ordered by (D stage, P stage).
pub fn pipeline_stage_pairs(
    p_stages: &[&EngineMetadata],
    d_stages: &[&EngineMetadata],
) -> Result<Vec<StagePair>> {
    let p: Vec<*const sys::pdkv_engine_metadata_t> = p_stages.iter().map(|m| m.as_ptr()).collect();
    let d: Vec<*const sys::pdkv_engine_metadata_t> = d_stages.iter().map(|m| m.as_ptr()).collect();
    take_list(
        // SAFETY: the handles live for the call; valid out pointers.
        |out, e| unsafe {
            sys::pdkv_pipeline_stage_pairs(sp(&p), p.len(), sp(&d), d.len(), out, e)
        },
        sys::pdkv_stage_pair_list_items,
        sys::pdkv_stage_pair_list_free,
        |x| StagePair {
            p_pp_rank: x.p_pp_rank,
            d_pp_rank: x.d_pp_rank,
            layer_begin: x.layer_begin,
            layer_end: x.layer_end,
        },
    )
}

/// Notifications each rank of P stage `p_pp_rank` waits for per request: the pairs naming it
/// (pairs over ALL of D's stages) times the TP rule (`pdkv_pipeline_notifications_expected`).
pub fn pipeline_notifications_expected(
    pairs: &[StagePair],
    p_pp_rank: u32,
    p_tp_size: u32,
    d_tp_size: u32,
) -> Result<u32> {
    let mut out = 0u32;
    // SAFETY: pairs is read during the call only (layout-identical to pdkv_stage_pair_t).
    check(|e| unsafe {
        sys::pdkv_pipeline_notifications_expected(
            sp(pairs),
            pairs.len(),
            p_pp_rank,
            p_tp_size,
            d_tp_size,
            &mut out,
            e,
        )
    })?;
    Ok(out)
}
