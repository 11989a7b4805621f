//! What a decode engine does with pdkv for one request, from the model's config.json to the
//! transfer plan, in Rust, through the engine-level API (the same deployment and request as
//! `examples/engine/c/engine_plan.c`).
//!
//! Deployment: the model of CONFIG_JSON (Nemotron-3-Nano-30B), prefill (P) TP4 -> decode (D) TP2,
//! this is D rank 0, Mamba cache mode "align" (prefix caching) on both, 16 logical blocks per
//! region. Each engine rank is described once ([`Engine`]); pdkv derives its KV-cache groups (four
//! Mamba groups, then the attention group), regions and metadata. Request: a 5001-token prompt of
//! which D's prefix cache holds the first 2096 tokens; the program passes, per group, D's block
//! table and the ids P exported; pdkv applies the N-1 rule, expands kernel ids and picks the Mamba
//! slots.
//!
//! Prints the plan as JSON; with EXPECTED_JSON (`tests/vectors/engine.json`, case
//! `engine_plan/example_nano_config_json_p4_d2_align_prefix_hit`), exits 1 unless the plan is
//! exactly that text.
//!
//! Usage: `cargo run --release -- CONFIG_JSON [EXPECTED_JSON]`
use pdkv::*;

const P_TP: u32 = 4;
const D_TP: u32 = 2;
const D_RANK: u32 = 0;

/// The request as the schedulers hold it, one (D's block table, P's exported ids) pair per group
/// in the engine's order: four Mamba groups (align mode: the hit position's cached state, a null
/// placeholder, the running state), then the attention group (three 2096-token blocks, the first
/// one D's prefix hit; P's five 1056-token blocks).
const GROUPS: [(&[u64], &[u64]); 5] = [
    (&[10, 0, 6], &[6]),
    (&[11, 0, 7], &[7]),
    (&[12, 0, 13], &[8]),
    (&[14, 0, 15], &[9]),
    (&[9, 4, 5], &[1, 2, 3, 4, 5]),
];

/// The engine's configuration: what its vLLM flags say (TP size, --mamba-cache-mode align).
fn engine_config(tp: u32) -> EngineConfig {
    EngineConfig {
        tp_size: tp,
        mamba_cache_mode: MambaCacheMode::Align,
        ..Default::default()
    }
}

fn plan_json(config_json: &str) -> Result<String> {
    let model = Model::from_hf_config_file(config_json, None)?;
    let (p_config, d_config) = (engine_config(P_TP), engine_config(D_TP));

    // Once per engine rank: its description.
    let d = Engine::new(&model, &d_config, &EngineOptions::new("decode", D_RANK, 16))?;
    let info = d.info()?;
    eprintln!(
        "D rank {D_RANK}: {} KV-cache groups over {} regions, blocks of {} tokens",
        info.num_groups, info.num_regions, info.logical_block_size
    );

    // Once per P engine: each rank's metadata (an engine decodes it from the handshake) and the
    // plan context.
    let p_md = (0..P_TP)
        .map(|r| Engine::new(&model, &p_config, &EngineOptions::new("prefill", r, 16))?.metadata())
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&EngineMetadata> = p_md.iter().collect();
    let ctx = d.plan_context(&refs, &p_config, false)?;

    // Once per thread: the plan each request is planned into (its buffers reused).
    let mut plan = TransferPlan::new_empty()?;

    // Per request: what the schedulers hold; pdkv does the rest.
    let groups: Vec<RequestGroup<'_>> = GROUPS
        .iter()
        .map(|&(local, remote)| RequestGroup {
            local_block_ids: local,
            remote_block_ids: remote,
        })
        .collect();
    d.plan_request_into(&ctx, &groups, 5001, 2096, &mut plan)?;
    plan.to_json_string()
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
