//! Marshalling round trips of the idiomatic enums against every value the header defines
//! (`common/header_enums.rs`, generated from it by scripts/gen_bindings.py): each C value maps
//! to a named variant (not the `Other` fallback) and back to itself, and each enum has exactly
//! the header's values. A member added to a C enum without its Rust variant fails here.
use pdkv::{
    Backend, ConvLayout, ElementFormat, GroupKind, KvLayout, MambaCacheMode, MambaReadsRule,
    MambaType, MemoryType, NotificationKind, ProgressMode, RegionKind, Status, TpList, TransferOp,
    TransferState, Transport,
};

#[path = "common/header_enums.rs"]
mod header_enums;
use header_enums::HEADER_ENUMS;

fn values(c_name: &str) -> Vec<(&'static str, i64)> {
    HEADER_ENUMS
        .iter()
        .find(|(n, _)| *n == c_name)
        .unwrap_or_else(|| panic!("{c_name} is not an enum of pdkv.h"))
        .1
        .to_vec()
}

fn is_named<T: std::fmt::Debug>(v: &T) -> bool {
    !format!("{v:?}").starts_with("Other")
}

/// Enums with both `from_raw` and `raw`: every header value goes there and back.
macro_rules! there_and_back {
    ($ty:ident, $c:literal) => {{
        for (name, v) in values($c) {
            let e = $ty::from_raw(v as i32);
            assert!(
                is_named(&e),
                "{name} = {v}: {} has no variant for it",
                stringify!($ty)
            );
            assert_eq!(i64::from(e.raw()), v, "{name}");
        }
    }};
}

/// Enums the library only hands out (`from_raw`): every header value has a named variant.
macro_rules! named_from_raw {
    ($ty:ident, $c:literal) => {{
        for (name, v) in values($c) {
            let e = $ty::from_raw(v as i32);
            assert!(
                is_named(&e),
                "{name} = {v}: {} has no variant for it",
                stringify!($ty)
            );
        }
    }};
}

/// Enums the caller only passes in (`raw`): the variants' values are exactly the header's.
macro_rules! same_values {
    ($c:literal, [$($v:expr),+ $(,)?]) => {{
        let mut ours: Vec<i64> = vec![$(i64::from($v.raw())),+];
        let mut header: Vec<i64> = values($c).into_iter().map(|(_, v)| v).collect();
        ours.sort_unstable();
        header.sort_unstable();
        assert_eq!(ours, header, "{}", $c);
    }};
}

#[test]
fn every_header_enum_value_round_trips() {
    there_and_back!(Backend, "pdkv_attention_backend_t");
    there_and_back!(MambaCacheMode, "pdkv_mamba_cache_mode_t");
    there_and_back!(ConvLayout, "pdkv_conv_layout_t");
    there_and_back!(ElementFormat, "pdkv_element_format_t");
    there_and_back!(MambaType, "pdkv_mamba_type_t");
    there_and_back!(GroupKind, "pdkv_group_kind_t");
    there_and_back!(KvLayout, "pdkv_kv_layout_t");
    there_and_back!(RegionKind, "pdkv_region_kind_t");
    there_and_back!(Transport, "pdkv_transport_t");
    there_and_back!(ProgressMode, "pdkv_progress_mode_t");
    named_from_raw!(NotificationKind, "pdkv_notification_kind_t");
    named_from_raw!(TransferState, "pdkv_transfer_state_t");
    same_values!(
        "pdkv_mamba_reads_rule_t",
        [MambaReadsRule::Pdkv, MambaReadsRule::Vllm]
    );
    same_values!("pdkv_memory_type_t", [MemoryType::Host, MemoryType::Cuda]);
    same_values!("pdkv_transfer_op_t", [TransferOp::Read, TransferOp::Write]);
    same_values!(
        "pdkv_tp_mapping_list_t",
        [
            TpList::HandshakeTargets,
            TpList::AttentionSources,
            TpList::MambaSources,
            TpList::AllSources,
            TpList::AttentionSlots,
            TpList::NotifyTargets,
        ]
    );
}

#[test]
fn every_header_status_round_trips() {
    for (name, v) in values("pdkv_status_t") {
        if v == 0 {
            continue; // PDKV_OK is not a failure status
        }
        let s = Status::from_raw(v as u32);
        assert!(is_named(&s), "{name} = {v}: Status has no variant for it");
        assert_eq!(i64::from(s.code()), v, "{name}");
        assert_eq!(s.name(), name, "the library's name of {v}");
    }
}

#[test]
fn every_enum_of_the_header_is_checked_here() {
    // The 16 enums and the status above, plus pdkv_cause_domain_t (mapped inside Error::from_raw).
    let checked = 18;
    assert_eq!(
        HEADER_ENUMS.len(),
        checked,
        "a new C enum needs its round trip here"
    );
}
