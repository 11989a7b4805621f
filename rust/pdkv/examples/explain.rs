//! Explains a P/D deployment of a preset model through the safe Rust API: the geometry of
//! each side, per D rank the P ranks it handshakes with and reads from (attention and Mamba
//! state, byte-exact), then compiles and validates the transfer plan of one request.
//!
//! Usage: `cargo run --example explain -- [preset [p_tp_size d_tp_size [prompt_tokens]]]`
//! (default: nemotron-3-nano-30b, P TP4 -> D TP2, 3000 tokens).
use pdkv::*;

fn fmt(v: &[u32]) -> String {
    format!("{v:?}")
}

fn describe_engine(model: &Model, tp: u32, label: &str) -> Result<(Geometry, EngineConfig)> {
    let cfg = EngineConfig::with_tp(tp);
    let g = Geometry::new(model, &cfg)?;
    let i = g.info()?;
    println!("{label}: TP{tp}");
    println!(
        "    {} KV head(s)/rank, {} B/token attention, block {} tokens (kernel {}, ppl {})",
        i.kv_heads_per_rank,
        i.attn_bytes_per_token,
        i.block_size,
        i.kernel_block_size,
        i.physical_per_logical
    );
    if i.hybrid {
        println!(
            "    Mamba page {} B (conv {} + ssm {}), padded to {} B (+{:.2}%)",
            i.mamba_page_bytes,
            i.conv_bytes,
            i.ssm_bytes,
            i.mamba_page_padded_bytes,
            i.padding_percent
        );
        for p in g.projections()? {
            println!(
                "      conv {:<2} {} ch/rank of {}{}, {} B at +{}",
                p.name,
                p.dim_local,
                p.dim_total,
                if p.replicated { " (replicated)" } else { "" },
                p.bytes,
                p.offset
            );
        }
    }
    for line in g.log_lines()? {
        println!("    vLLM: {line}");
    }
    Ok((g, cfg))
}

fn run(preset: &str, p_tp_size: u32, d_tp_size: u32, tokens: u64) -> Result<()> {
    println!("pdkv {}", version_string());
    let model = Model::from_preset(preset)?;
    let desc = model.describe()?;
    let (n_attn, n_mamba) = model.layer_counts()?;
    println!(
        "model {}: {} KV heads x {}, Mamba {}, {} attention + {} Mamba layers\n",
        desc.name,
        desc.num_kv_heads,
        desc.head_size,
        desc.mamba_type.name(),
        n_attn,
        n_mamba
    );
    let (pg, p_cfg) = describe_engine(&model, p_tp_size, "P (prefill)")?;
    let (dg, d_cfg) = describe_engine(&model, d_tp_size, "D (decode)")?;
    println!("\ntp_ratio on D = {}", tp_ratio(d_tp_size, p_tp_size)?);
    let hybrid = desc.mamba_type != MambaType::None;
    for d_tp_rank in 0..d_tp_size {
        let m = TpMapping::new(&TpMappingParams {
            local_tp_size: d_tp_size,
            local_tp_rank: d_tp_rank,
            remote_tp_size: p_tp_size,
            total_kv_heads: desc.num_kv_heads,
            use_mla: desc.use_mla,
            has_mamba: hybrid,
        })?;
        let mi = m.info()?;
        println!("\nD rank {d_tp_rank}:");
        println!(
            "    handshake with P ranks {}",
            fmt(m.ranks(TpList::HandshakeTargets)?)
        );
        println!(
            "    attention from         {}",
            fmt(m.ranks(TpList::AttentionSources)?)
        );
        println!(
            "    mamba state from       {}",
            fmt(m.ranks(TpList::MambaSources)?)
        );
        println!(
            "    notify                 {}",
            fmt(m.ranks(TpList::NotifyTargets)?)
        );
        println!(
            "    rank offset factor {}, each P rank expects {} notification(s) per request",
            mi.rank_offset_factor, mi.notifications_expected
        );
        if hybrid {
            let reads = MambaReadList::new(&pg, &dg, d_tp_rank, MambaReadsRule::Pdkv)?;
            let items = reads.items()?;
            println!("    Mamba reads per block per layer ({}):", items.len());
            for r in &items {
                println!(
                    "      P{} {:<3}  remote +{:<8} -> local +{:<8} {} B",
                    r.p_tp_rank, r.part, r.remote_offset, r.local_offset, r.length
                );
            }
            let vllm = MambaReadList::new(&pg, &dg, d_tp_rank, MambaReadsRule::Vllm)?;
            if vllm.items()? != items {
                println!("    NOTE: vLLM main reads differently here (see vLLM #55208)");
            }
        }
    }
    compile_plan(&model, &p_cfg, &d_cfg, &pg, &dg, (n_attn, n_mamba), tokens)
}

/// Builds handshake metadata for every rank, validates the pair and compiles the plan of one
/// request (no prefix hit on D) for every D rank.
fn compile_plan(
    model: &Model,
    p_cfg: &EngineConfig,
    d_cfg: &EngineConfig,
    pg: &Geometry,
    dg: &Geometry,
    (n_attn, n_mamba): (u32, u32),
    tokens: u64,
) -> Result<()> {
    // HMA: one region per layer of a group; the group size is the attention layer count.
    let regions = n_attn.max(1);
    let p_meta: Vec<EngineMetadata> = (0..p_cfg.tp_size)
        .map(|r| {
            let layout = EngineLayout {
                engine_id: "prefill".into(),
                tp_rank: r,
                num_regions: regions,
                ..Default::default()
            };
            EngineMetadata::from_model(model, p_cfg, &layout)
        })
        .collect::<Result<_>>()?;
    let p_refs: Vec<&EngineMetadata> = p_meta.iter().collect();
    let report = handshake_validate_engine_ranks(&p_refs)?;
    if let Some(first) = report.first() {
        return Err(Error::new(first.status, first.text.clone()));
    }
    let p_block = p_meta[0].info()?.kernel_block_size as u64;
    let d_block = dg.info()?.kernel_block_size;
    let remote_blocks: Vec<u64> = (20..20 + tokens.div_ceil(p_block)).collect();
    let local_blocks: Vec<u64> = (10..10 + tokens.div_ceil(d_block)).collect();
    println!("\nTransfer plan for one {tokens}-token prompt (P blocks {remote_blocks:?}, D blocks {local_blocks:?}):");
    for d_tp_rank in 0..d_cfg.tp_size {
        let layout = EngineLayout {
            engine_id: "decode".into(),
            tp_rank: d_tp_rank,
            num_regions: regions,
            ..Default::default()
        };
        let d_meta = EngineMetadata::from_model(model, d_cfg, &layout)?;
        for item in handshake_validate(&d_meta, &p_meta[0])? {
            println!("    handshake: {}", item.text);
        }
        let mut groups = vec![PlanGroup {
            trim: GroupTrimInput {
                kind: GroupKind::Attention,
                local_blocks: local_blocks.clone(),
                remote_blocks: remote_blocks.clone(),
                remote_computed_tokens: tokens,
                ..Default::default()
            },
            regions: Vec::new(),
            layers: Vec::new(),
        }];
        // Mamba layers form ceil(n_mamba / regions) groups; the last may use fewer regions.
        for g in 0..n_mamba.div_ceil(regions) {
            let used = regions.min(n_mamba - g * regions);
            groups.push(PlanGroup {
                trim: GroupTrimInput {
                    kind: GroupKind::Mamba,
                    local_blocks: vec![40 + g as u64],
                    remote_blocks: vec![50 + g as u64],
                    remote_computed_tokens: tokens,
                    ..Default::default()
                },
                regions: if used < regions {
                    (0..used).collect()
                } else {
                    Vec::new()
                },
                layers: Vec::new(),
            });
        }
        let ctx = PlanContext::new(&PlanContextParams::new(&d_meta, &p_refs).geometries(dg, pg))?;
        let plan = TransferPlan::compile(&ctx, &groups)?;
        plan.validate(&ctx, &groups)?;
        let i = plan.info()?;
        println!(
            "  D rank {d_tp_rank}: reads from P {}, notifies {}; {} B ({} attention + {} Mamba), {} pieces -> {} reads",
            fmt(plan.read_ranks()?),
            fmt(plan.notify_ranks()?),
            i.bytes,
            i.attention_bytes,
            i.mamba_bytes,
            i.pieces_before_coalescing,
            i.pieces_after_coalescing
        );
        for &p_tp_rank in plan.read_ranks()? {
            let (reads, bytes) = plan.rank_reads(p_tp_rank)?;
            let f = reads[0];
            println!(
                "    P{p_tp_rank}: {} reads, {bytes} B; first: region {} +{} -> region {} +{}, {} B",
                reads.len(),
                f.remote_region,
                f.remote_offset,
                f.local_region,
                f.local_offset,
                f.length
            );
        }
        for gi in 0..i.num_groups {
            let z = plan.group_zero(gi)?;
            if let Some(first) = z.zero.first() {
                println!(
                    "    group {gi} ({}): zero {} range(s), first {first:?}",
                    z.kind.name(),
                    z.zero.len()
                );
            }
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let preset = args.first().map_or("nemotron-3-nano-30b", String::as_str);
    let num = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (p_tp_size, d_tp_size, tokens) = (num(1, 4) as u32, num(2, 2) as u32, num(3, 3000));
    if let Err(e) = run(preset, p_tp_size, d_tp_size, tokens) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
