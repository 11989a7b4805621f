//! Per-request plan compilation through the Rust binding, on the requests bench/plan_vs_vllm.cpp
//! times through C++ and C (bench/plan_request.hpp; the id generator is mirrored here), with the
//! attention ids given as the block tables hold them (logical ids, `kernel_blocks_per_id` = ppl)
//! and one plan reused request after request (`TransferPlan::compile_into`). Every case is
//! checked to plan what `TransferPlan::compile` plans. bench/plan_vs_vllm.py runs it and puts
//! its medians beside C's; each case prints one JSON line.
//!
//! `cargo bench --offline -p pdkv --bench plan_vs_vllm -- [--tokens 4096,131072] [--hits 0,50]
//!  [--alloc contig,frag] [--geometry flashinfer,flash_attn] [--target-s 0.3]`
use pdkv::*;
use std::time::Instant;

const D_POOL: u64 = 5700;
const P_POOL: u64 = 8200;
const REGIONS: u32 = 6;

/// splitmix64, as bench/plan_request.hpp.
struct SplitMix(u64);
impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// `total` distinct logical ids from [1, pool): one ascending run (contig) or a seeded partial
/// Fisher-Yates sample (frag), exactly as bench/plan_request.hpp draws them.
fn logical_ids(pool: u64, total: u64, frag: bool, seed: u64) -> Vec<u64> {
    if !frag {
        let base = 1 + seed % 97;
        return (0..total).map(|i| base + i).collect();
    }
    let mut all: Vec<u64> = (1..pool).collect();
    let mut g = SplitMix(seed);
    let mut out = Vec::with_capacity(total as usize);
    for i in 0..total as usize {
        let j = i + (g.next() % (all.len() - i) as u64) as usize;
        all.swap(i, j);
        out.push(all[i]);
    }
    out
}

struct Shape {
    tokens: u64,
    hit_pct: u64,
    frag: bool,
    d_block: u64,
    p_block: u64,
    d_ppl: u64,
    p_ppl: u64,
}

/// Four Mamba groups (the last on regions 0-4), then attention with logical ids.
fn groups(s: &Shape, mode: MambaCacheMode) -> Vec<PlanGroup> {
    let n_load = s.tokens - 1;
    let nd_total = n_load.div_ceil(s.d_block);
    let hit = nd_total * s.hit_pct / 100;
    let npf = n_load.div_ceil(s.p_block);
    let seed = s.tokens * 31 + s.hit_pct * 7 + 5;
    let local = logical_ids(D_POOL, 4 + nd_total - hit, s.frag, seed);
    let remote = logical_ids(P_POOL, 4 + npf, s.frag, seed * 7 + 3);
    let mut out = Vec::new();
    for g in 0..4 {
        out.push(PlanGroup {
            trim: GroupTrimInput {
                kind: GroupKind::Mamba,
                cache_mode: mode,
                local_blocks: vec![local[g]],
                remote_blocks: vec![remote[g]],
                remote_computed_tokens: n_load,
                local_hit_tokens: hit * s.d_block,
                ..Default::default()
            },
            regions: if g == 3 { vec![0, 1, 2, 3, 4] } else { vec![] },
            layers: vec![],
        });
    }
    out.push(PlanGroup {
        trim: GroupTrimInput {
            kind: GroupKind::Attention,
            local_blocks: local[4..].to_vec(),
            remote_blocks: remote[4..].to_vec(),
            remote_computed_tokens: n_load,
            local_hit_tokens: hit * s.d_block,
            local_kernel_blocks_per_id: Some(s.d_ppl),
            remote_kernel_blocks_per_id: Some(s.p_ppl),
            ..Default::default()
        },
        regions: vec![],
        layers: vec![],
    });
    out
}

/// Median ns per call over samples of repeated calls for about `target_s` seconds.
fn time_calls(mut f: impl FnMut(), target_s: f64) -> f64 {
    f();
    let t0 = Instant::now();
    f();
    let one = t0.elapsed().as_secs_f64().max(1e-9);
    let reps = ((20e-6 / one) as usize).max(1);
    let mut samples = Vec::new();
    let start = Instant::now();
    while samples.len() < 15
        || (start.elapsed().as_secs_f64() < target_s && samples.len() < 100_000)
    {
        let a = Instant::now();
        for _ in 0..reps {
            f();
        }
        samples.push(a.elapsed().as_nanos() as f64 / reps as f64);
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    samples[samples.len() / 2]
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn main() -> Result<()> {
    let mut tokens = "4096,32768,131072,1048576".to_owned();
    let (mut hits, mut allocs, mut geos) = (
        "0,50".to_owned(),
        "contig,frag".to_owned(),
        "flashinfer,flash_attn".to_owned(),
    );
    let mut target_s = 0.3;
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    for pair in args.chunks(2) {
        let v = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--tokens" => tokens = v,
            "--hits" => hits = v,
            "--alloc" => allocs = v,
            "--geometry" => geos = v,
            "--target-s" => target_s = v.parse().unwrap_or(0.3),
            other => {
                eprintln!("unknown option {other}");
                std::process::exit(1);
            }
        }
    }
    let model = Model::from_preset("nemotron-3-nano-30b")?;
    for geo in list(&geos) {
        let backend = if geo == "flashinfer" {
            Backend::FlashInfer
        } else {
            Backend::FlashAttn
        };
        for hit_s in list(&hits) {
            let hit_pct: u64 = hit_s.parse().expect("--hits");
            let mode = if hit_pct > 0 {
                MambaCacheMode::Align
            } else {
                MambaCacheMode::None
            };
            let cfg = |tp| EngineConfig {
                user_block_size: Some(2096),
                backend,
                mamba_cache_mode: mode,
                ..EngineConfig::with_tp(tp)
            };
            let (dc, pc) = (cfg(2), cfg(4));
            let (dg, pg) = (Geometry::new(&model, &dc)?, Geometry::new(&model, &pc)?);
            let layout = |id: &str, rank, pool, base| EngineLayout {
                engine_id: id.to_owned(),
                tp_rank: rank,
                num_logical_blocks: pool,
                num_regions: REGIONS,
                base,
                ..Default::default()
            };
            let d = EngineMetadata::from_model(&model, &dc, &layout("decode", 0, D_POOL, 1 << 40))?;
            let ps = (0..4u32)
                .map(|r| {
                    EngineMetadata::from_model(
                        &model,
                        &pc,
                        &layout("prefill", r, P_POOL, (2 + u64::from(r)) << 44),
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            let remote: Vec<&EngineMetadata> = ps.iter().collect();
            let mut params = PlanContextParams::new(&d, &remote);
            params.local_geometry = Some(&dg);
            params.remote_geometry = Some(&pg);
            let ctx = PlanContext::new(&params)?;
            let (di, pi) = (dg.info()?, pg.info()?);
            for tok_s in list(&tokens) {
                for alloc in list(&allocs) {
                    let shape = Shape {
                        tokens: tok_s.parse().expect("--tokens"),
                        hit_pct,
                        frag: alloc == "frag",
                        d_block: di.block_size,
                        p_block: pi.block_size,
                        d_ppl: di.physical_per_logical,
                        p_ppl: pi.physical_per_logical,
                    };
                    let gs = groups(&shape, mode);
                    let want = TransferPlan::compile(&ctx, &gs)?;
                    let mut plan = TransferPlan::new_empty()?;
                    plan.compile_into(&ctx, &gs)?;
                    assert_eq!(
                        plan.to_json()?,
                        want.to_json()?,
                        "compile_into plans as compile"
                    );
                    let ns = time_calls(
                        || plan.compile_into(&ctx, &gs).expect("compile_into"),
                        target_s,
                    );
                    println!(
                        "{{\"case\": \"{geo}/{}/hit{hit_pct}/{alloc}\", \"rust_median_ns\": {ns:.0}, \"reads\": {}}}",
                        shape.tokens,
                        plan.info()?.pieces_after_coalescing
                    );
                }
            }
        }
    }
    Ok(())
}
