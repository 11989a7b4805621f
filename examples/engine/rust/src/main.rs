//! What a decode engine does with pdkv for one request, from the model's config.json to the
//! transfer plan, in Rust (the same deployment and request as `examples/engine/c/engine_plan.c`).
//!
//! Deployment: the model of CONFIG_JSON (Nemotron-3-Nano-30B), prefill (P) TP4 -> decode (D) TP2,
//! this is D rank 0, Mamba cache mode "align" (prefix caching) on both, one KV region of 16
//! logical blocks per rank. Request: P computed all 5000 prompt tokens (blocks 1..5, Mamba state
//! in block 8); D's prefix cache holds the first 2096 tokens, so D reads tokens 2096..4999 into
//! blocks 4 and 5 and P's running Mamba state into slot 7.
//!
//! Prints the plan as JSON; with EXPECTED_JSON, exits 1 unless the plan is exactly that text.
//!
//! Usage: `cargo run --release -- CONFIG_JSON [EXPECTED_JSON]`
use pdkv::*;

const P_TP: u32 = 4;
const D_TP: u32 = 2;
const D_RANK: u32 = 0;

/// The engine's configuration: what its vLLM flags say (TP size, --mamba-cache-mode align).
fn engine_config(tp: u32) -> EngineConfig {
    EngineConfig {
        tp_size: tp,
        mamba_cache_mode: MambaCacheMode::Align,
        ..Default::default()
    }
}

/// What one rank advertises in the handshake: its id, rank and where its KV region lives.
fn rank_metadata(
    model: &Model,
    config: &EngineConfig,
    id: &str,
    rank: u32,
    base: u64,
) -> Result<EngineMetadata> {
    let layout = EngineLayout {
        engine_id: id.into(),
        tp_rank: rank,
        num_logical_blocks: 16,
        num_regions: 1,
        base,
        ..Default::default()
    };
    EngineMetadata::from_model(model, config, &layout)
}

fn plan_json(config_json: &str) -> Result<String> {
    // Once per engine: the model, both sides' configurations and geometries.
    let model = Model::from_hf_config_file(config_json, None)?;
    let (p_config, d_config) = (engine_config(P_TP), engine_config(D_TP));
    let p_geo = Geometry::new(&model, &p_config)?;
    let d_geo = Geometry::new(&model, &d_config)?;

    // Once per P engine: the handshake (D would decode each P rank's metadata from the wire).
    let d_md = rank_metadata(&model, &d_config, "decode", D_RANK, 1 << 40)?;
    let p_md = (0..P_TP)
        .map(|r| rank_metadata(&model, &p_config, "prefill", r, (2 + u64::from(r)) << 40))
        .collect::<Result<Vec<_>>>()?;
    for p in &p_md {
        handshake_require_compatible(&d_md, p)?;
    }
    let p_refs: Vec<&EngineMetadata> = p_md.iter().collect();
    let ctx = PlanContext::new(&PlanContextParams::new(&d_md, &p_refs).geometries(&d_geo, &p_geo))?;

    // Per request: the block ids D's scheduler holds after its prefix hit of 2096 tokens.
    let group = |kind, cache_mode, local: &[u64], remote: &[u64]| PlanGroup {
        trim: GroupTrimInput {
            kind,
            cache_mode,
            local_blocks: local.to_vec(),
            remote_blocks: remote.to_vec(),
            remote_computed_tokens: 5000,
            local_hit_tokens: 2096,
            ..Default::default()
        },
        ..Default::default()
    };
    let groups = [
        group(
            GroupKind::Attention,
            MambaCacheMode::None,
            &[4, 5],
            &[1, 2, 3, 4, 5],
        ),
        group(
            GroupKind::Mamba,
            MambaCacheMode::Align,
            &[0, 6, 7],
            &[0, 0, 0, 0, 8],
        ),
    ];
    TransferPlan::compile(&ctx, &groups)?.to_json_string()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args.len() > 2 {
        eprintln!("usage: engine_plan CONFIG_JSON [EXPECTED_JSON]");
        std::process::exit(2);
    }
    match load_library() {
        Ok(path) => eprintln!("libpdkv: {}", path.display()),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
    let json = plan_json(&args[0]).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1);
    });
    println!("{json}");
    if let Some(path) = args.get(1) {
        let expected = std::fs::read_to_string(path).unwrap_or_else(|e| {
            eprintln!("cannot read {path}: {e}");
            std::process::exit(1);
        });
        if expected.trim_end_matches('\n') != json {
            eprintln!("the plan differs from {path}");
            std::process::exit(1);
        }
        eprintln!("plan matches {path}");
    }
}
