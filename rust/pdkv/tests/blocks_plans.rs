//! Unit tests of the block-id, clipping, zeroing, trimming, scheduler, offload, metadata,
//! handshake and transfer-plan wrappers (worked numbers of the C API tests).
use pdkv::*;

#[test]
fn block_ids() {
    assert_eq!(
        logical_to_kernel_block_ids(&[0, 1, 2], GroupKind::Attention, 2).unwrap(),
        [0, 1, 2, 3, 4, 5]
    );
    assert_eq!(
        logical_to_kernel_block_ids(&[2], GroupKind::Mamba, 34).unwrap(),
        [2]
    );
    assert!(logical_to_kernel_block_ids(&[], GroupKind::Attention, 4)
        .unwrap()
        .is_empty());
    let e = logical_to_kernel_block_ids(&[1], GroupKind::Other(9), 2).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("kind = 9"), "{e}");
    assert_eq!(
        logical_to_kernel_block_ids(&[u64::MAX], GroupKind::Attention, 2)
            .unwrap_err()
            .status(),
        Status::Overflow
    );
    assert_eq!(GroupKind::SlidingWindow.name(), "sliding_window");
    assert_eq!(GroupKind::Other(7).name(), "unknown");
    assert_eq!(
        map_block_ids_for_block_size_ratio(&[2, 5], GroupKind::Attention, 4, 6).unwrap(),
        [8, 9, 10, 11, 20, 21]
    );
    let groups = [
        GroupBlockIds {
            kind: GroupKind::Attention,
            ids: vec![3, 5],
        },
        GroupBlockIds {
            kind: GroupKind::Mamba,
            ids: vec![1, 2],
        },
    ];
    let layout = DescriptorLayout {
        num_blocks: 100,
        block_size_ratio: 1,
        blocks_per_logical: 1,
        num_attention_regions: 2,
        num_mamba_regions: 4,
    };
    assert_eq!(
        descriptor_ids(&groups, &layout).unwrap(),
        [3, 5, 103, 105, 201, 202, 301, 302, 401, 402, 501, 502]
    );
    let oob = [GroupBlockIds {
        kind: GroupKind::Attention,
        ids: vec![400],
    }];
    assert_eq!(
        descriptor_ids(&oob, &layout).unwrap_err().status(),
        Status::OutOfBounds
    );
    let m = mamba_descriptor_ids(&[3], 10, 2, 4, 1000).unwrap();
    assert_eq!((m.len(), m[0], *m.last().unwrap()), (8, 1003, 1073));
    assert_eq!(
        mamba_descriptor_ids(&[10], 10, 2, 4, 0)
            .unwrap_err()
            .status(),
        Status::OutOfBounds
    );
}

#[test]
fn clipping_and_zeroing() {
    assert_eq!(sliding_window_blocks_to_keep(2048, 16).unwrap(), 129);
    assert_eq!(
        sliding_window_blocks_to_keep(2048, 0).unwrap_err().status(),
        Status::InvalidArgument
    );
    let ids = [1, 2, 3, 4, 5, 6];
    let mut p = ExchangeClipParams {
        kind: GroupKind::SlidingWindow,
        hma_enabled: true,
        sliding_window: 32,
        block_size: 16,
        ..Default::default()
    };
    assert_eq!(clip_exchange_blocks(&ids, &p).unwrap(), [4, 5, 6]);
    p.hma_enabled = false;
    assert_eq!(clip_exchange_blocks(&ids, &p).unwrap(), ids);
    p = ExchangeClipParams {
        kind: GroupKind::Mamba,
        hma_enabled: true,
        cache_mode: MambaCacheMode::Align,
        num_speculative_blocks: 2,
        ..Default::default()
    };
    assert_eq!(clip_exchange_blocks(&ids, &p).unwrap(), [4]);
    p.cache_mode = MambaCacheMode::All;
    assert_eq!(clip_exchange_blocks(&ids, &p).unwrap(), [1, 2, 3, 4]);
    p.cache_mode = MambaCacheMode::Other(3);
    assert!(clip_exchange_blocks(&ids, &p)
        .unwrap_err()
        .message()
        .contains("cache_mode = 3"));

    let z = receive_zero_ranges(&[11, 12, 13], 64, 4, 6).unwrap();
    assert_eq!(
        z,
        [
            ZeroRange {
                block: 12,
                token_begin: 32,
                token_end: 64
            },
            ZeroRange {
                block: 13,
                token_begin: 0,
                token_end: 64
            }
        ]
    );
    assert!(receive_zero_ranges(&[11, 12], 64, 4, 8).unwrap().is_empty());
    assert!(receive_zero_ranges(&[11], 30, 4, 1)
        .unwrap_err()
        .message()
        .contains("30"));
    let u = uncovered_token_ranges(
        &[5, 6, 7],
        2,
        16,
        32,
        &[TokenInterval { begin: 32, end: 70 }],
    )
    .unwrap();
    assert_eq!(
        u,
        [ZeroRange {
            block: 7,
            token_begin: 6,
            token_end: 16
        }]
    );
    let u = uncovered_token_ranges(&[5, 6], 2, 16, 40, &[]).unwrap();
    assert_eq!(
        u,
        [
            ZeroRange {
                block: 5,
                token_begin: 8,
                token_end: 16
            },
            ZeroRange {
                block: 6,
                token_begin: 0,
                token_end: 16
            }
        ]
    );
}

#[test]
fn trimming() {
    let input = GroupTrimInput {
        kind: GroupKind::Attention,
        local_blocks: vec![6, 7, 8, 9],
        remote_blocks: (0..10).collect(),
        local_tokens_per_block: Some(16),
        remote_tokens_per_block: Some(16),
        remote_computed_tokens: 160,
        local_hit_tokens: 96,
        ..Default::default()
    };
    let t = GroupTrim::new(&input).unwrap();
    let runs = t.runs().unwrap();
    assert_eq!(runs.len(), 4);
    for (i, r) in runs.iter().enumerate() {
        let b = 6 + i as u64;
        assert_eq!(
            *r,
            TokenRun {
                local_block: b,
                local_token_begin: 0,
                remote_block: b,
                remote_token_begin: 0,
                num_tokens: 16
            }
        );
    }
    assert_eq!(t.summary().unwrap(), (GroupKind::Attention, 64));
    assert!(t.states().unwrap().is_empty());
    assert!(t.zero_ranges().unwrap().is_empty());
    assert!(t.unfilled_states().unwrap().is_empty());
    // D needs more tokens than P computed and sent: a coverage error, not a panic.
    let short = GroupTrimInput {
        remote_blocks: vec![0, 1],
        ..input.clone()
    };
    assert_eq!(
        GroupTrim::new(&short).unwrap_err().status(),
        Status::Coverage
    );
    let bad = GroupTrimInput {
        kind: GroupKind::Other(5),
        ..input
    };
    assert_eq!(
        GroupTrim::new(&bad).unwrap_err().status(),
        Status::InvalidArgument
    );
}

#[test]
fn scheduler_and_offload() {
    assert_eq!(d_num_new_matched_tokens(100, 0, true).unwrap(), 99);
    assert_eq!(d_num_new_matched_tokens(100, 0, false).unwrap(), 100);
    let p = plan_remote_decode_prefill(33, 32, 16, true).unwrap();
    assert_eq!(
        p,
        RemoteDecodePrefillPlan {
            num_prompt_tokens: 32,
            computed_tokens: 16,
            new_tokens: 16
        }
    );
    assert_eq!(
        plan_remote_decode_prefill(33, 32, 0, true)
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
    let t = truncate_for_remote_decode(
        &RemoteDecodePrefill {
            num_prompt_tokens: 100,
            max_tokens: 50,
            truncated: false,
        },
        true,
    )
    .unwrap();
    assert_eq!(
        t,
        RemoteDecodePrefill {
            num_prompt_tokens: 99,
            max_tokens: 1,
            truncated: true
        }
    );
    assert_eq!(
        truncate_for_remote_decode(&t, true).unwrap(),
        t,
        "idempotent"
    );
    let a = truncate_for_remote_decode(
        &RemoteDecodePrefill {
            num_prompt_tokens: 100,
            max_tokens: 50,
            truncated: false,
        },
        false,
    )
    .unwrap();
    assert_eq!((a.num_prompt_tokens, a.max_tokens), (100, 1));
    let v = mamba_aligned_split_v0604(&AlignedSplitV0604Input {
        num_new_tokens: 1000,
        num_prompt_tokens: 5000,
        num_tokens: 5000,
        block_size: 512,
        ..Default::default()
    })
    .unwrap();
    assert!(v <= 1000 && v % 512 == 0, "{v}");
    assert_eq!(
        mamba_aligned_split_v0604(&AlignedSplitV0604Input::default())
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
    let m = mamba_aligned_split(&AlignedSplitInput {
        num_new_tokens: 1000,
        num_prompt_tokens: 5000,
        num_tokens: 5000,
        block_size: 512,
        ..Default::default()
    })
    .unwrap();
    assert!(m <= 1000, "{m}");
    assert_eq!(
        mamba_aligned_split(&AlignedSplitInput::default())
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
    let layers = [
        OffloadLayer {
            tensor_bytes: 4096000,
            page_bytes: 4096,
        },
        OffloadLayer {
            tensor_bytes: 8192000,
            page_bytes: 8192,
        },
    ];
    assert_eq!(
        derive_offload_geometry(1000, 2096, 16, &layers).unwrap(),
        OffloadGeometry {
            num_blocks: 1000,
            hash_blocks_per_block: 131
        }
    );
    let e = derive_offload_geometry(1000, 2096, 64, &layers).unwrap_err();
    assert!(
        e.message().contains("2096") && e.message().contains("64"),
        "{e}"
    );
    assert_eq!(
        derive_offload_geometry(1001, 2096, 16, &layers)
            .unwrap_err()
            .status(),
        Status::OutOfBounds
    );
}

fn nano() -> Model {
    Model::from_preset("nemotron-3-nano-30b").unwrap()
}

fn meta(model: &Model, tp: u32, rank: u32, id: &str) -> EngineMetadata {
    let layout = EngineLayout {
        engine_id: id.into(),
        tp_rank: rank,
        num_regions: 6,
        ..Default::default()
    };
    EngineMetadata::from_model(model, &EngineConfig::with_tp(tp), &layout).unwrap()
}

#[test]
fn metadata_wire_format() {
    assert_eq!(crc32c(b"123456789").unwrap(), 0xE306_9283);
    assert_eq!(crc32c(b"").unwrap(), 0);
    assert_eq!(metadata_wire_version().0, 1);
    let m = nano();
    let d = meta(&m, 2, 1, "decode");
    let i = d.info().unwrap();
    assert_eq!(
        (i.engine_id.as_str(), i.tp_size, i.tp_rank),
        ("decode", 2, 1)
    );
    assert_eq!(i.logical_block_size, 2096);
    assert_eq!(i.model_fingerprint, m.fingerprint().unwrap());
    assert_eq!(i.mamba_type, MambaType::Mamba2);
    assert_eq!(d.regions().unwrap().len(), i.num_regions);
    assert_eq!(d.conv_projection_bytes().unwrap(), &[12288, 3072, 3072]);
    let bytes = d.encode().unwrap();
    assert_eq!(bytes, d.encode_bytes().unwrap());
    let back = EngineMetadata::decode(&bytes).unwrap();
    assert!(back == d);
    assert!(meta(&m, 2, 0, "decode") != d);
    // Untrusted input never crashes: empty, truncated, corrupted.
    assert_eq!(
        EngineMetadata::decode(&[]).unwrap_err().status(),
        Status::Parse
    );
    assert_eq!(
        EngineMetadata::decode(&bytes[..bytes.len() / 2])
            .unwrap_err()
            .status(),
        Status::Parse
    );
    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x40;
    let e = EngineMetadata::decode(&flipped).unwrap_err();
    assert!(
        matches!(e.status(), Status::Checksum | Status::Parse),
        "{e}"
    );
    let bad = EngineLayout {
        engine_id: String::new(),
        ..Default::default()
    };
    assert_eq!(
        EngineMetadata::from_model(&m, &EngineConfig::with_tp(2), &bad)
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
    let nul = EngineLayout {
        engine_id: "a\0b".into(),
        ..Default::default()
    };
    assert_eq!(
        EngineMetadata::from_model(&m, &EngineConfig::with_tp(2), &nul)
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
}

#[test]
fn handshake_reports() {
    let m = nano();
    let d = meta(&m, 2, 0, "decode");
    let p: Vec<EngineMetadata> = (0..4).map(|r| meta(&m, 4, r, "prefill")).collect();
    assert!(handshake_validate(&d, &p[0]).unwrap().is_empty());
    handshake_require_compatible(&d, &p[0]).unwrap();
    let refs: Vec<&EngineMetadata> = p.iter().collect();
    assert!(handshake_validate_engine_ranks(&refs).unwrap().is_empty());
    // Two ranks claiming the same tp_rank.
    let dup = [&p[0], &p[0]];
    assert!(!handshake_validate_engine_ranks(&dup).unwrap().is_empty());
    // A different layout at one KV head per rank on both sides is served (D permutes received
    // blocks); NHD on both sides with heads split by TP cannot serve head-sliced reads.
    let nhd = EngineLayout {
        engine_id: "prefill".into(),
        num_regions: 6,
        kv_layout: KvLayout::Nhd,
        ..Default::default()
    };
    let p_nhd = EngineMetadata::from_model(&m, &EngineConfig::with_tp(4), &nhd).unwrap();
    assert!(handshake_validate(&d, &p_nhd).unwrap().is_empty());
    let d_nhd = EngineMetadata::from_model(
        &m,
        &EngineConfig::with_tp(1),
        &EngineLayout {
            engine_id: "decode".into(),
            ..nhd.clone()
        },
    )
    .unwrap();
    let items = handshake_validate(&d_nhd, &p_nhd).unwrap();
    assert!(items.iter().any(|i| i.field == "kv_layout"), "{items:?}");
    assert!(items
        .iter()
        .all(|i| !i.text.is_empty() && !i.fix.is_empty()));
    let e = handshake_require_compatible(&d_nhd, &p_nhd).unwrap_err();
    assert_eq!(e.status(), Status::Incompatible);
    assert!(e.message().contains("kv_layout"), "{e}");
}

#[test]
fn transfer_plan_nano_p4_to_d2() {
    let m = nano();
    let p_cfg = EngineConfig::with_tp(4);
    let d_cfg = EngineConfig::with_tp(2);
    let pg = Geometry::new(&m, &p_cfg).unwrap();
    let dg = Geometry::new(&m, &d_cfg).unwrap();
    let p: Vec<EngineMetadata> = (0..4).map(|r| meta(&m, 4, r, "prefill")).collect();
    let refs: Vec<&EngineMetadata> = p.iter().collect();
    let d = meta(&m, 2, 1, "decode");
    let groups = vec![
        PlanGroup {
            trim: GroupTrimInput {
                kind: GroupKind::Attention,
                local_blocks: vec![10, 11],
                remote_blocks: vec![20, 21, 22],
                remote_computed_tokens: 3000,
                ..Default::default()
            },
            regions: Vec::new(),
            layers: Vec::new(),
        },
        PlanGroup {
            trim: GroupTrimInput {
                kind: GroupKind::Mamba,
                local_blocks: vec![40],
                remote_blocks: vec![50],
                remote_computed_tokens: 3000,
                ..Default::default()
            },
            regions: Vec::new(),
            layers: Vec::new(),
        },
    ];
    let ctx = PlanContext::new(&PlanContextParams::new(&d, &refs).geometries(&dg, &pg)).unwrap();
    assert_eq!(
        ctx.mapping()
            .unwrap()
            .ranks(TpList::HandshakeTargets)
            .unwrap(),
        &[2, 3]
    );
    let plan = TransferPlan::compile(&ctx, &groups).unwrap();
    plan.validate(&ctx, &groups).unwrap();
    // Borrowed groups: the caller's slices are read in place; same plan, same errors.
    let borrowed: Vec<PlanGroupRef<'_>> = groups.iter().map(PlanGroupRef::from).collect();
    let again = TransferPlan::compile_borrowed(&ctx, &borrowed).unwrap();
    assert_eq!(again.to_json().unwrap(), plan.to_json().unwrap());
    let ids: [u64; 0] = [];
    let mut short = borrowed.clone();
    short[0].local_blocks = &ids;
    assert_eq!(
        TransferPlan::compile_borrowed(&ctx, &short)
            .unwrap_err()
            .status(),
        TransferPlan::compile(&ctx, &{
            let mut g = groups.clone();
            g[0].trim.local_blocks.clear();
            g
        })
        .unwrap_err()
        .status()
    );
    // One reused plan: compile_into gives what compile gives, an empty plan after a failure,
    // and compiles again afterwards.
    let mut reused = TransferPlan::new_empty().unwrap();
    assert!(reused.info().unwrap().empty);
    reused.compile_into(&ctx, &groups).unwrap();
    assert_eq!(reused.to_json().unwrap(), plan.to_json().unwrap());
    let mut no_ids = groups.clone();
    no_ids[0].trim.local_blocks.clear();
    assert_eq!(
        reused.compile_into(&ctx, &no_ids).unwrap_err().status(),
        TransferPlan::compile(&ctx, &no_ids).unwrap_err().status()
    );
    assert!(reused.info().unwrap().empty);
    reused.compile_into(&ctx, &groups).unwrap();
    assert_eq!(reused.to_json().unwrap(), plan.to_json().unwrap());
    // The same through the entry that takes the arguments in one struct.
    let mut by_args = TransferPlan::new_empty().unwrap();
    by_args.compile_into_args(&ctx, &groups).unwrap();
    assert_eq!(by_args.to_json().unwrap(), plan.to_json().unwrap());
    let refused = by_args.compile_into_args(&ctx, &no_ids).unwrap_err();
    let want = TransferPlan::compile(&ctx, &no_ids).unwrap_err();
    assert_eq!(
        (refused.status(), refused.message()),
        (want.status(), want.message())
    );
    assert!(by_args.info().unwrap().empty);
    let i = plan.info().unwrap();
    assert_eq!(
        (i.d_tp_rank, i.d_tp_size, i.p_tp_size, i.num_groups),
        (1, 2, 4, 2)
    );
    assert_eq!(plan.read_ranks().unwrap(), &[2, 3]);
    assert_eq!(plan.notify_ranks().unwrap(), &[2, 3]);
    assert_eq!(i.bytes, i.attention_bytes + i.mamba_bytes);
    let mut total = 0;
    for &r in plan.read_ranks().unwrap() {
        let (reads, bytes) = plan.rank_reads(r).unwrap();
        assert_eq!(reads.iter().map(|x| x.length).sum::<u64>(), bytes);
        total += bytes;
    }
    assert_eq!(total, i.bytes);
    assert!(plan.rank_reads(0).unwrap().0.is_empty());
    assert_eq!(
        plan.rank_reads(4).unwrap_err().status(),
        Status::InvalidArgument
    );
    // 3000 tokens in the second 2096-token D block: the rest is zeroed.
    let z = plan.group_zero(0).unwrap();
    assert_eq!(z.kind, GroupKind::Attention);
    assert_eq!(
        z.zero,
        &[ZeroRange {
            block: 11,
            token_begin: 904,
            token_end: 2096
        }]
    );
    assert_eq!(
        plan.group_zero(2).unwrap_err().status(),
        Status::OutOfBounds
    );
    let json = plan.to_json().unwrap();
    assert_eq!(json, plan.to_json_string().unwrap());
    assert!(json.starts_with('{') && json.ends_with('}'), "{json}");
    // Validating against other groups fails; compiling Mamba without geometries fails.
    let fewer = vec![groups[0].clone()];
    assert!(plan.validate(&ctx, &fewer).is_err());
    let no_geo = PlanContext::new(&PlanContextParams::new(&d, &refs)).unwrap();
    assert_eq!(
        TransferPlan::compile(&no_geo, &groups)
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
    let one_geo = PlanContextParams {
        local_geometry: Some(&dg),
        ..PlanContextParams::new(&d, &refs)
    };
    assert_eq!(
        PlanContext::new(&one_geo).unwrap_err().status(),
        Status::InvalidArgument
    );
    assert_eq!(
        PlanContext::new(&PlanContextParams::new(&d, &[]))
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<TransferPlan>();
    assert_send_sync::<PlanContext>();
    assert_send_sync::<EngineMetadata>();
    assert_send_sync::<GroupTrim>();
}
