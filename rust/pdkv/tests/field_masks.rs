//! pdkv.h's growth rule through the Rust API: a `None` optional field is unset (its C
//! field_mask bit clear, the library's default applies), `Some` sets it; no mask is visible.
use pdkv::*;

#[test]
fn optional_engine_config_fields() {
    let m = Model::from_preset("nemotron-3-nano-30b").unwrap();
    let derived = Geometry::new(&m, &EngineConfig::with_tp(2))
        .unwrap()
        .info()
        .unwrap();
    assert_ne!(derived.block_size, 4096);
    let set = Geometry::new(&m, &EngineConfig::with_tp(2).user_block_size(4096))
        .unwrap()
        .info()
        .unwrap();
    assert_eq!(set.block_size, 4096);
    let err = Geometry::new(&m, &EngineConfig::with_tp(2).kv_cache_dtype_bytes(0)).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err
        .message()
        .contains("kv_cache_dtype_bytes = 0 with PDKV_CONFIG_FIELD_KV_CACHE_DTYPE"));
}

#[test]
fn optional_engine_layout_fields() {
    let m = Model::from_preset("nemotron-3-nano-30b").unwrap();
    let c = EngineConfig::with_tp(1);
    let info = |l: &EngineLayout| {
        EngineMetadata::from_model(&m, &c, l)
            .unwrap()
            .info()
            .unwrap()
    };
    let unset = info(&EngineLayout::default());
    assert!(!unset.prefix_caching);
    assert_eq!((unset.pp_size, unset.layer_end), (1, 0));
    let set = info(&EngineLayout {
        prefix_caching: Some(true),
        pp_size: 2,
        layer_end: Some(26),
        ..EngineLayout::default()
    });
    assert!(set.prefix_caching);
    assert_eq!((set.pp_size, set.layer_end), (2, 26));
}

#[test]
fn optional_trim_fields() {
    let mut input = GroupTrimInput {
        kind: GroupKind::Attention,
        local_blocks: vec![3, 4],
        remote_blocks: vec![8, 9],
        local_tokens_per_block: Some(16),
        remote_tokens_per_block: Some(16),
        remote_computed_tokens: 32,
        ..Default::default()
    };
    assert_eq!(GroupTrim::new(&input).unwrap().summary().unwrap().1, 32);
    input.local_first_block = Some(2); // tokens 0..31 then have no slot
    assert_eq!(
        GroupTrim::new(&input).unwrap_err().status(),
        Status::Coverage
    );
    input.local_first_block = None;
    input.local_tokens_per_block = None;
    input.remote_tokens_per_block = None;
    let err = GroupTrim::new(&input).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("PDKV_TRIM_FIELD_TOKENS_PER_BLOCK"));
}
