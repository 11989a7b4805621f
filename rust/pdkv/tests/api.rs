//! Unit tests of the safe API, per area, with the worked numbers of the reference
//! (Nemotron-3-Nano-30B: Mamba2, 2 KV heads, head 128, BF16, fp32 SSM state).
use pdkv::*;

fn nano() -> Model {
    Model::from_preset("nemotron-3-nano-30b").expect("preset")
}

// ---- errors and versions ------------------------------------------------------------------

#[test]
fn version_matches_header_major() {
    let (major, minor, _) = version();
    assert_eq!(major, HEADER_VERSION.0);
    assert!(minor >= HEADER_VERSION.1 || major > HEADER_VERSION.0);
    assert_eq!(
        version_string(),
        format!("{}.{}.{}", version().0, version().1, version().2)
    );
}

#[test]
fn load_library_reports_the_soname_file_it_loaded() {
    let path = load_library().expect("libpdkv loads in the test environment");
    assert_eq!(
        path.file_name().and_then(|n| n.to_str()),
        Some(format!("libpdkv.so.{}", HEADER_VERSION.0).as_str())
    );
    // The tests run with PDKV_LIB_DIR set (scripts/test-all.sh): the variable's directory wins.
    if let Some(dir) = std::env::var_os("PDKV_LIB_DIR").filter(|d| !d.is_empty()) {
        assert_eq!(path.parent(), Some(std::path::Path::new(&dir)));
    }
}

#[test]
fn bad_tp_sizes_name_both_values() {
    let err = tp_ratio(6, 4).unwrap_err();
    assert_eq!(err.status(), Status::TpNotDivisible);
    assert_eq!(err.status().name(), "PDKV_ERR_TP_NOT_DIVISIBLE");
    assert!(
        err.message().contains('6') && err.message().contains('4'),
        "{err}"
    );
    // Display carries status name and message; it is a std::error::Error.
    let shown = err.to_string();
    assert!(shown.starts_with("PDKV_ERR_TP_NOT_DIVISIBLE: "), "{shown}");
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(err);
    assert!(!boxed.to_string().is_empty());
}

#[test]
fn status_codes_round_trip() {
    for code in 1..=17u32 {
        let s = Status::from_raw(code);
        assert_ne!(s, Status::Other(code), "code {code} is known");
        assert_eq!(s.code(), code);
        assert!(s.name().starts_with("PDKV_ERR_"), "{}", s.name());
    }
    assert_eq!(Status::from_raw(999), Status::Other(999));
}

#[test]
fn interior_nul_is_an_error_not_a_panic() {
    let err = Model::from_preset("nemotron\0nano").unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("NUL"), "{err}");
    assert_eq!(
        Backend::from_name("flash\0attn").unwrap_err().status(),
        Status::InvalidArgument
    );
    assert_eq!(
        Model::from_hf_config_json("{}", Some("a\0b"))
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
    let desc = ModelDesc {
        layer_pattern: "M\0*".into(),
        ..nano().describe().unwrap()
    };
    assert_eq!(
        Model::new(&desc).unwrap_err().status(),
        Status::InvalidArgument
    );
}

#[test]
fn invalid_inputs_are_errors() {
    assert_eq!(
        Model::from_preset("no-such-model").unwrap_err().status(),
        Status::NotFound
    );
    assert!(Model::from_preset("no-such-model")
        .unwrap_err()
        .message()
        .contains("no-such-model"));
    assert_eq!(
        Model::from_preset("").unwrap_err().status(),
        Status::NotFound
    );
    assert_eq!(
        Model::from_hf_config_json("", None).unwrap_err().status(),
        Status::Parse
    );
    assert_eq!(
        Model::from_hf_config_json("{not json", None)
            .unwrap_err()
            .status(),
        Status::Parse
    );
    let io = Model::from_hf_config_file("/nonexistent/config.json", None).unwrap_err();
    assert_eq!(io.status(), Status::Io);
    assert!(io.message().contains("/nonexistent/config.json"), "{io}");
    assert_eq!(
        tp_ratio(0, 2).unwrap_err().status(),
        Status::InvalidArgument
    );
    assert_eq!(
        preset_at(usize::MAX).unwrap_err().status(),
        Status::OutOfBounds
    );
    let m = nano();
    let bad_backend = EngineConfig::with_tp(2).backend(Backend::Other(77));
    assert_eq!(
        Geometry::new(&m, &bad_backend).unwrap_err().status(),
        Status::InvalidArgument
    );
    let zero_tp = EngineConfig::with_tp(0);
    assert_eq!(
        Geometry::new(&m, &zero_tp).unwrap_err().status(),
        Status::InvalidArgument
    );
    let sd = EngineConfig::with_tp(2).conv_layout(ConvLayout::Sd);
    assert_eq!(
        Geometry::new(&m, &sd).unwrap_err().status(),
        Status::UnsupportedLayout
    );
}

// ---- models and presets --------------------------------------------------------------------

#[test]
fn presets_list_and_load() {
    let all = presets().unwrap();
    assert_eq!(all.len(), preset_count());
    assert!(all.iter().any(|p| p.name == "nemotron-3-nano-30b"));
    for p in &all {
        let m = Model::from_preset(p.name).unwrap();
        let by_hf = Model::from_preset(p.hf_name).unwrap();
        assert_eq!(
            m.describe().unwrap(),
            by_hf.describe().unwrap(),
            "{}",
            p.name
        );
    }
}

#[test]
fn nano_description_and_round_trip() {
    let m = nano();
    let d = m.describe().unwrap();
    assert_eq!(d.num_kv_heads, 2);
    assert_eq!(d.head_size, 128);
    assert_eq!(d.mamba_type, MambaType::Mamba2);
    assert_eq!(d.mamba_type.name(), "mamba2");
    assert_eq!(d.dtype_bytes, 2);
    let (attn, mamba) = m.layer_counts().unwrap();
    assert!(attn > 0 && mamba > attn, "{attn} {mamba}");
    let again = Model::new(&d).unwrap();
    assert_eq!(again.describe().unwrap(), d);
}

#[test]
fn hf_config_file_matches_preset() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/hf_configs/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"
    );
    let m = Model::from_hf_config_file(path, Some("nano")).unwrap();
    let d = m.describe().unwrap();
    assert_eq!(d.name, "nano");
    let p = nano().describe().unwrap();
    assert_eq!(
        (
            d.num_kv_heads,
            d.head_size,
            d.mamba_num_heads,
            d.mamba_n_groups
        ),
        (
            p.num_kv_heads,
            p.head_size,
            p.mamba_num_heads,
            p.mamba_n_groups
        )
    );
    let text = std::fs::read_to_string(path).unwrap();
    let j = Model::from_hf_config_json(&text, None).unwrap();
    assert_eq!(j.describe().unwrap().mamba_d_state, d.mamba_d_state);
}

// ---- topology --------------------------------------------------------------------------------

#[test]
fn topology_free_functions() {
    assert_eq!(tp_ratio(2, 4).unwrap(), -2);
    assert_eq!(tp_ratio(4, 2).unwrap(), 2);
    assert_eq!(handshake_target_ranks(2, 1, 4).unwrap(), vec![2, 3]);
    assert_eq!(handshake_target_ranks(4, 3, 2).unwrap(), vec![1]);
    assert_eq!(
        handshake_target_ranks(2, 2, 4).unwrap_err().status(),
        Status::InvalidArgument
    );
    assert_eq!(physical_head_range(4, 3, 8).unwrap(), 6..8);
    assert_eq!(physical_head_range(8, 5, 2).unwrap(), 1..2);
    assert_eq!(
        physical_head_range(3, 0, 8).unwrap_err().status(),
        Status::HeadsNotDivisible
    );
    assert_eq!(notifications_expected_per_request(2, 4).unwrap(), 2);
    assert_eq!(notifications_expected_per_request(4, 2).unwrap(), 1);
}

#[test]
fn tp_mapping_d2_from_p4() {
    let m = TpMapping::new(&TpMappingParams {
        local_tp_size: 2,
        local_tp_rank: 1,
        remote_tp_size: 4,
        total_kv_heads: 2,
        use_mla: false,
        has_mamba: true,
    })
    .unwrap();
    let info = m.info().unwrap();
    assert_eq!(info.tp_ratio, -2);
    assert_eq!(m.ranks(TpList::HandshakeTargets).unwrap(), &[2, 3]);
    assert_eq!(m.ranks(TpList::MambaSources).unwrap(), &[2, 3]);
    assert_eq!(m.ranks(TpList::AllSources).unwrap(), &[2, 3]);
    // 2 KV heads over P TP4: ranks 2 and 3 hold the same head, read once.
    assert_eq!(
        m.ranks(TpList::AttentionSources).unwrap().len(),
        info.num_attention_reads as usize
    );
    assert_eq!(m.attention_slot(2).unwrap(), 0);
    assert_eq!(
        m.attention_slot(0).unwrap_err().status(),
        Status::InvalidArgument
    );
    assert_eq!(
        m.ranks(TpList::Other(42)).unwrap_err().status(),
        Status::InvalidArgument
    );
    let bad = TpMapping::new(&TpMappingParams {
        local_tp_size: 2,
        local_tp_rank: 0,
        remote_tp_size: 3,
        total_kv_heads: 2,
        ..Default::default()
    });
    assert_eq!(bad.unwrap_err().status(), Status::TpNotDivisible);
}

// ---- engine and geometry ----------------------------------------------------------------------

#[test]
fn engine_defaults_and_backends() {
    let c = EngineConfig::default();
    assert_eq!(c.tp_size, 1);
    assert_eq!(c.backend, Backend::FlashAttn);
    assert_eq!(c.mamba_cache_mode, MambaCacheMode::None);
    assert_eq!(c.conv_layout, ConvLayout::Ds);
    assert_eq!(
        Backend::from_name("FLASHINFER").unwrap(),
        Backend::FlashInfer
    );
    assert_eq!(Backend::FlashInfer.name(), "flashinfer");
    let nf = Backend::from_name("warp_drive").unwrap_err();
    assert_eq!(nf.status(), Status::NotFound);
    assert!(nf.message().contains("warp_drive"));
}

#[test]
fn nano_geometry_tp2() {
    let g = Geometry::new(&nano(), &EngineConfig::with_tp(2)).unwrap();
    let i = g.info().unwrap();
    assert_eq!(i.kv_heads_per_rank, 1);
    assert_eq!(i.attn_bytes_per_token, 512);
    assert!(i.hybrid);
    assert_eq!(i.conv_bytes, 18432);
    assert_eq!(i.ssm_bytes, 1048576);
    assert_eq!(i.mamba_page_bytes, 1067008);
    assert_eq!(i.block_size, 2096);
    assert!(i.block_size_raised);
    assert_eq!(i.padding_ppm, 5758);
    assert_eq!(g.temporal_shape().unwrap(), &[32, 64, 128]);
    let p = g.projections().unwrap();
    let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["x", "B", "C"]);
    assert_eq!(
        p.iter().map(|p| p.offset).collect::<Vec<_>>(),
        [0, 12288, 15360]
    );
    assert_eq!(g.projection(3).unwrap_err().status(), Status::OutOfBounds);
    let lines = g.log_lines().unwrap();
    assert_eq!(lines[0], "Setting attention block size to 2096 tokens to ensure that attention page size is >= mamba page size.");
    assert!(lines[1].starts_with("Padding mamba page size by 0.58%"));
    let offs = g.mamba_local_conv_offsets().unwrap();
    assert_eq!(
        offs,
        [
            ByteRange {
                offset: 0,
                size: 12288
            },
            ByteRange {
                offset: 12288,
                size: 3072
            },
            ByteRange {
                offset: 15360,
                size: 3072
            }
        ]
    );

    let fi = Geometry::new(
        &nano(),
        &EngineConfig::with_tp(2).backend(Backend::FlashInfer),
    )
    .unwrap()
    .info()
    .unwrap();
    assert_eq!(
        (
            fi.kernel_block_size,
            fi.physical_per_logical,
            fi.kernel_page_bytes
        ),
        (16, 131, 8192)
    );
    let custom = EngineConfig::with_tp(2)
        .backend(Backend::Custom)
        .preferred_block_size(16)
        .kernel_block_sizes(vec![16, 32, 64]);
    let ci = Geometry::new(&nano(), &custom).unwrap().info().unwrap();
    assert_eq!((ci.kernel_block_size, ci.physical_per_logical), (16, 131));
    let all = Geometry::new(
        &nano(),
        &EngineConfig::with_tp(2).mamba_cache_mode(MambaCacheMode::All),
    )
    .unwrap()
    .info()
    .unwrap();
    assert_eq!((all.block_size, all.mamba_block_size), (2176, 2176));
}

#[test]
fn block_ratio_and_ppl() {
    assert_eq!(block_size_ratio(64, 16).unwrap(), 4);
    let e = block_size_ratio(16, 64).unwrap_err();
    assert_eq!(e.status(), Status::Incompatible);
    assert!(
        e.message().contains("16") && e.message().contains("64"),
        "{e}"
    );
    assert_eq!(
        physical_blocks_per_logical(18432, 1048576, 8192).unwrap(),
        131
    );
    assert_eq!(
        physical_blocks_per_logical(1, 1, 0).unwrap_err().status(),
        Status::InvalidArgument
    );
}

// ---- Mamba reads and descriptors ----------------------------------------------------------------

#[test]
fn mamba_reads_p4_to_d2_tile_the_d_page() {
    let m = nano();
    let p = Geometry::new(&m, &EngineConfig::with_tp(4)).unwrap();
    let d = Geometry::new(&m, &EngineConfig::with_tp(2)).unwrap();
    let di = d.info().unwrap();
    for d_tp_rank in 0..2 {
        let list = MambaReadList::new(&p, &d, d_tp_rank, MambaReadsRule::Pdkv).unwrap();
        assert_eq!(
            list.source_ranks().unwrap(),
            &[2 * d_tp_rank, 2 * d_tp_rank + 1]
        );
        let mut reads = list.items().unwrap();
        assert_eq!(reads.last().unwrap().part, "ssm");
        reads.sort_by_key(|r| r.local_offset);
        let mut next = 0;
        for r in &reads {
            assert_eq!(r.local_offset, next, "{r:?}");
            next += r.length;
        }
        assert_eq!(next, di.mamba_page_bytes);
    }
    assert_eq!(
        MambaReadList::new(&p, &d, 2, MambaReadsRule::Pdkv)
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
    assert_eq!(
        MambaReadList::new(&p, &d, 0, MambaReadsRule::Other(9))
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
    let ssm = d.mamba_ssm_read_range(9216, 524288, 0, -2).unwrap();
    assert_eq!(
        ssm,
        ByteRange {
            offset: 9216,
            size: 524288
        }
    );
    assert!(!d.mamba_remote_conv_offsets(0, -2).unwrap().is_empty());
}

#[test]
fn descriptors_attention_and_mamba() {
    let regions = [
        Region {
            base: 0x1000,
            block_len: 1024,
            num_blocks: 4,
        },
        Region {
            base: 0x10000,
            block_len: 1024,
            num_blocks: 4,
        },
    ];
    let local = attention_local_descriptors(&regions, 2).unwrap();
    let items = local.items().unwrap();
    assert_eq!(items.len(), 16);
    assert_eq!(
        items[0],
        Descriptor {
            addr: 0x1000,
            len: 512
        }
    );
    assert_eq!(
        items[1],
        Descriptor {
            addr: 0x1200,
            len: 512
        }
    );
    assert_eq!(items[8].addr, 0x10000);
    assert_eq!(
        attention_local_descriptors(&regions, 0)
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
    assert!(attention_local_descriptors(&[], 1)
        .unwrap()
        .items()
        .unwrap()
        .is_empty());

    // D TP2 rank 0 reading from P TP4 (2 KV heads): head slices of the local blocks.
    let map = TpMapping::new(&TpMappingParams {
        local_tp_size: 2,
        local_tp_rank: 0,
        remote_tp_size: 4,
        total_kv_heads: 4,
        ..Default::default()
    })
    .unwrap();
    let d_regions = [Region {
        base: 0,
        block_len: 2048,
        num_blocks: 2,
    }];
    let p_regions = [Region {
        base: 0x100000,
        block_len: 1024,
        num_blocks: 2,
    }];
    let d_local = attention_local_descriptors(&d_regions, 1).unwrap();
    let remote = attention_remote_descriptors(&d_regions, &p_regions, &map, 1).unwrap();
    assert_eq!(remote.items().unwrap()[0].addr, 0x100000);
    let srcs = map.ranks(TpList::AttentionSources).unwrap();
    let split = attention_split_descriptors(&d_local, &map, 1, srcs[1]).unwrap();
    assert_eq!(
        split.items().unwrap()[0],
        Descriptor {
            addr: 1024,
            len: 1024
        }
    );

    let m = nano();
    let p = Geometry::new(&m, &EngineConfig::with_tp(4)).unwrap();
    let d = Geometry::new(&m, &EngineConfig::with_tp(2)).unwrap();
    let (pi, di) = (p.info().unwrap(), d.info().unwrap());
    let p_mamba = [Region {
        base: 1 << 32,
        block_len: pi.kernel_page_bytes,
        num_blocks: 2 * pi.physical_per_logical,
    }];
    let d_mamba = [Region {
        base: 1 << 40,
        block_len: di.kernel_page_bytes,
        num_blocks: 2 * di.physical_per_logical,
    }];
    let all_local = mamba_local_descriptors(&d_mamba, di.physical_per_logical, &d).unwrap();
    assert_eq!(all_local.items().unwrap().len(), 2 * 4); // x, B, C, ssm per logical block
    let reads = MambaReadList::new(&p, &d, 0, MambaReadsRule::Pdkv).unwrap();
    for p_tp_rank in 0..4 {
        let r = mamba_remote_descriptors(&p_mamba, pi.physical_per_logical, &p, &reads, p_tp_rank)
            .unwrap();
        let l =
            mamba_local_split_descriptors(&d_mamba, di.physical_per_logical, &d, &reads, p_tp_rank)
                .unwrap();
        let (r, l) = (r.items().unwrap(), l.items().unwrap());
        assert_eq!(r.len(), l.len());
        assert!(r.iter().zip(l).all(|(a, b)| a.len == b.len));
        assert_eq!(r.is_empty(), p_tp_rank >= 2, "p_tp_rank {p_tp_rank}");
    }
    assert_eq!(
        mamba_local_descriptors(&d_mamba, 0, &d)
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
}

// ---- thread safety --------------------------------------------------------------------------------

#[test]
fn handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Model>();
    assert_send_sync::<Geometry>();
    assert_send_sync::<TpMapping>();
    assert_send_sync::<MambaReadList>();
    assert_send_sync::<DescriptorList>();
    assert_send_sync::<Error>();
    let g = Geometry::new(&nano(), &EngineConfig::with_tp(2)).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| g.info().unwrap().block_size))
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap(), 2096);
        }
    });
}

/// A GQA model with MLA-typed layers: the latent width round-trips, the geometry reports the
/// latent's bytes per token, regions follow the layer pattern or the layout's kinds.
#[test]
fn mixed_mla_model_geometry_and_region_kinds() {
    let desc = ModelDesc {
        name: "mixed".into(),
        num_kv_heads: 4,
        head_size: 8,
        head_size_v: 8,
        dtype_bytes: 2,
        layer_pattern: "*L".into(),
        mla_head_size: 24,
        ..ModelDesc::default()
    };
    let m = Model::new(&desc).unwrap();
    assert_eq!(m.describe().unwrap().mla_head_size, 24);
    let cfg = EngineConfig {
        tp_size: 2,
        user_block_size: Some(16),
        ..EngineConfig::default()
    };
    let info = Geometry::new(&m, &cfg).unwrap().info().unwrap();
    assert_eq!(
        (
            info.attn_bytes_per_token,
            info.mla_bytes_per_token,
            info.mla_kernel_page_bytes
        ),
        (64, 48, 768)
    );
    let layout = EngineLayout {
        num_regions: 2,
        ..EngineLayout::default()
    };
    let md = EngineMetadata::from_model(&m, &cfg, &layout).unwrap();
    let kinds: Vec<_> = md
        .regions()
        .unwrap()
        .iter()
        .map(|r| (r.kind, r.block_len))
        .collect();
    assert_eq!(
        kinds,
        vec![(RegionKind::Attention, 1024), (RegionKind::Mla, 768)]
    );
    let explicit = EngineLayout {
        region_kinds: vec![RegionKind::Mla, RegionKind::Attention],
        ..layout.clone()
    };
    let md = EngineMetadata::from_model(&m, &cfg, &explicit).unwrap();
    assert_eq!(md.regions().unwrap()[0].kind, RegionKind::Mla);
    let short = EngineLayout {
        region_kinds: vec![RegionKind::Mla],
        ..layout
    };
    let err = EngineMetadata::from_model(&m, &cfg, &short).unwrap_err();
    assert!(
        err.message().contains("region_kinds has 1 entries"),
        "{err}"
    );
}

// ---- pipeline parallelism -------------------------------------------------------------------

/// P PP2 TP4 -> D PP1 TP2 on Nemotron-3-Nano (52 layers, split 26/26): the stages pair by their
/// windows, stage metadata round-trips through format 1.2, and a plan against P stage 1 whose
/// groups name their layers moves only layers 26..52 (D regions 3..5 of the attention group).
#[test]
fn pipeline_stages_pair_and_plan_by_layer() {
    let m = nano();
    assert_eq!(pipeline_layer_window(52, 2, 1).unwrap(), (26, 52));
    assert_eq!(
        pipeline_layer_window(2, 3, 0).unwrap_err().status(),
        Status::InvalidArgument
    );
    let (p_cfg, d_cfg) = (EngineConfig::with_tp(4), EngineConfig::with_tp(2));
    let stage = |s: u32, r: u32| EngineLayout {
        engine_id: "p".into(),
        tp_rank: r,
        num_logical_blocks: 8,
        num_regions: 6,
        pp_size: 2,
        pp_rank: s,
        layer_begin: 26 * s,
        layer_end: Some(26 * s + 26),
        ..Default::default()
    };
    let p: Vec<EngineMetadata> = (0..4)
        .map(|r| EngineMetadata::from_model(&m, &p_cfg, &stage(1, r)).unwrap())
        .collect();
    let info = p[0].info().unwrap();
    assert_eq!(
        (info.pp_size, info.pp_rank, info.layer_begin, info.layer_end),
        (2, 1, 26, 52)
    );
    assert_eq!(p[0].encode().unwrap()[6], 2);
    let p0 = EngineMetadata::from_model(&m, &p_cfg, &stage(0, 0)).unwrap();
    let d_layout = EngineLayout {
        engine_id: "d".into(),
        tp_rank: 1,
        num_logical_blocks: 8,
        num_regions: 6,
        ..Default::default()
    };
    let d = EngineMetadata::from_model(&m, &d_cfg, &d_layout).unwrap();
    let pairs = pipeline_stage_pairs(&[&p[0], &p0], &[&d]).unwrap();
    assert_eq!(
        pairs,
        vec![
            StagePair {
                p_pp_rank: 0,
                d_pp_rank: 0,
                layer_begin: 0,
                layer_end: 26
            },
            StagePair {
                p_pp_rank: 1,
                d_pp_rank: 0,
                layer_begin: 26,
                layer_end: 52
            },
        ]
    );
    assert_eq!(pipeline_notifications_expected(&pairs, 1, 4, 2).unwrap(), 1);

    let refs: Vec<&EngineMetadata> = p.iter().collect();
    let ctx = PlanContext::new(&PlanContextParams::new(&d, &refs)).unwrap();
    // The attention group's layers (vLLM's hybrid KV cache manager: the 6 attention layers).
    let attention = PlanGroup {
        trim: GroupTrimInput {
            kind: GroupKind::Attention,
            local_blocks: vec![6],
            remote_blocks: vec![7],
            remote_computed_tokens: 1000,
            ..Default::default()
        },
        regions: Vec::new(),
        layers: vec![5, 12, 19, 26, 33, 42],
    };
    let plan = TransferPlan::compile(&ctx, std::slice::from_ref(&attention)).unwrap();
    let i = plan.info().unwrap();
    assert_eq!(
        (i.p_pp_size, i.p_pp_rank, i.layer_begin, i.layer_end),
        (2, 1, 26, 52)
    );
    assert_eq!(plan.group_zero(0).unwrap().regions, &[3, 4, 5]);
    let (reads, _) = plan.rank_reads(plan.read_ranks().unwrap()[0]).unwrap();
    let pairs: Vec<(u32, u32)> = reads
        .iter()
        .map(|r| (r.local_region, r.remote_region))
        .collect();
    assert_eq!(pairs, vec![(3, 0), (4, 1), (5, 2)]);
    // Without the layers, regions cannot be paired between different windows.
    let no_layers = PlanGroup {
        layers: Vec::new(),
        ..attention
    };
    assert_eq!(
        TransferPlan::compile(&ctx, &[no_layers])
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
}

// ---- different KV layouts -------------------------------------------------------------------

/// D NHD TP1 (2 KV heads) <- P HND TP2 (one head each) on Nemotron-3-Nano: refused without
/// `permute_on_receive` (naming it); with it, D's received blocks are listed with the HND -> NHD
/// permutation of 2 heads x 2096 tokens x 512 bytes, and `BlockPermute::apply` transposes one.
#[test]
fn different_kv_layouts_permute_on_receive() {
    let m = nano();
    let d_layout = EngineLayout {
        engine_id: "d".into(),
        num_logical_blocks: 8,
        kv_layout: KvLayout::Nhd,
        ..Default::default()
    };
    let d = EngineMetadata::from_model(&m, &EngineConfig::with_tp(1), &d_layout).unwrap();
    let p: Vec<EngineMetadata> = (0..2)
        .map(|r| {
            let l = EngineLayout {
                engine_id: "p".into(),
                tp_rank: r,
                num_logical_blocks: 8,
                base: (2 + u64::from(r)) << 40,
                ..Default::default()
            };
            EngineMetadata::from_model(&m, &EngineConfig::with_tp(2), &l).unwrap()
        })
        .collect();
    let refs: Vec<&EngineMetadata> = p.iter().collect();
    let group = PlanGroup {
        trim: GroupTrimInput {
            kind: GroupKind::Attention,
            local_blocks: vec![3, 4],
            remote_blocks: vec![6, 7],
            remote_computed_tokens: 3000,
            ..Default::default()
        },
        ..Default::default()
    };
    let plain = PlanContext::new(&PlanContextParams::new(&d, &refs)).unwrap();
    let e = TransferPlan::compile(&plain, std::slice::from_ref(&group)).unwrap_err();
    assert_eq!(e.status(), Status::UnsupportedLayout);
    assert!(e.message().contains("permute_on_receive"), "{e}");
    let ctx =
        PlanContext::new(&PlanContextParams::new(&d, &refs).permute_on_receive(true)).unwrap();
    let plan = TransferPlan::compile(&ctx, std::slice::from_ref(&group)).unwrap();
    let i = plan.info().unwrap();
    assert_eq!(
        i.permute,
        BlockPermute {
            from: KvLayout::Hnd,
            to: KvLayout::Nhd,
            heads: 2,
            tokens: 2096,
            head_bytes: 512
        }
    );
    let z = plan.group_zero(0).unwrap();
    assert_eq!(z.permute_blocks, &[3, 4]);
    assert_eq!(z.permute_regions, &[0]);
    // 2 heads x 3 tokens x 2 bytes: byte j of head h, token t = 100h + 10t + j.
    let mut b: Vec<u8> = (0..2u8)
        .flat_map(|h| (0..3u8).flat_map(move |t| (0..2u8).map(move |j| 100 * h + 10 * t + j)))
        .collect();
    let small = BlockPermute {
        heads: 2,
        tokens: 3,
        head_bytes: 2,
        ..i.permute
    };
    small.apply(&mut b).unwrap();
    assert_eq!(b, vec![0, 1, 100, 101, 10, 11, 110, 111, 20, 21, 120, 121]);
    assert_eq!(
        small.apply(&mut b[..10]).unwrap_err().status(),
        Status::InvalidArgument
    );
}

// ---- element formats ----------------------------------------------------------------------

#[test]
fn a_pair_differing_only_in_the_kv_format_is_incompatible_naming_both() {
    let m = nano();
    let build = |tp: u32, id: &str, f: ElementFormat| {
        let c = EngineConfig::with_tp(tp)
            .kv_cache_dtype_bytes(1)
            .kv_cache_format(f);
        let l = EngineLayout {
            engine_id: id.into(),
            num_regions: 6,
            ..EngineLayout::default()
        };
        EngineMetadata::from_model(&m, &c, &l).expect("metadata")
    };
    let e4m3 = ElementFormat::from_name("fp8").expect("fp8");
    assert_eq!(e4m3, ElementFormat::Fp8E4m3);
    assert_eq!(e4m3.name(), "fp8_e4m3");
    let p = build(4, "p", e4m3);
    let d = build(2, "d", ElementFormat::Fp8E5m2);
    let info = p.info().expect("info");
    assert_eq!(info.kv_cache_format, ElementFormat::Fp8E4m3);
    assert_eq!(info.model_format, ElementFormat::Unknown);
    let wire = EngineMetadata::decode(&p.encode().expect("encode")).expect("decode");
    assert_eq!(
        wire.info().expect("info").kv_cache_format,
        ElementFormat::Fp8E4m3
    );
    let items = handshake_validate(&d, &wire).expect("validate");
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].field, "kv_cache_format");
    assert_eq!(
        (
            items[0].local_value.as_str(),
            items[0].remote_value.as_str()
        ),
        ("fp8_e5m2", "fp8_e4m3")
    );
    let err = handshake_require_compatible(&d, &wire).unwrap_err();
    assert_eq!(err.status(), Status::Incompatible);
    assert!(
        err.message()
            .contains("kv_cache_format: fp8_e5m2 vs fp8_e4m3"),
        "{}",
        err.message()
    );
    // Only sizes (no format named) on one side: compatible.
    let plain = build(2, "d", ElementFormat::Unknown);
    handshake_require_compatible(&plain, &p).expect("unknown is compatible");
    // A format that disagrees with the sizes it labels, and an unknown name.
    let bad = EngineConfig::with_tp(2).kv_cache_format(ElementFormat::Fp8E5m2);
    let err = Geometry::new(&m, &bad).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(
        err.message().contains("kv_cache_format = fp8_e5m2"),
        "{}",
        err.message()
    );
    assert_eq!(
        ElementFormat::from_name("nvfp4").unwrap_err().status(),
        Status::NotFound
    );
    assert_eq!(ElementFormat::Other(99).name(), "unknown");
}
