//! The setup every transfer example and test shares, in every language (Rust, Go, Python, C),
//! so that a P rank driven from one language and a D rank from another agree on every byte:
//!
//! * model "xfer-tiny": 2 KV heads of 16 (K and V), 2-byte dtype, 2 attention layers; TP 1;
//! * each rank: 2 regions of 8 blocks, in page-aligned host memory whose addresses are the
//!   metadata's region bases; engine ids "xfer-prefill" and "xfer-decode";
//! * P fills region r, byte o with `pattern(r, o)`, D fills its regions with 0xFF (never a
//!   pattern value);
//! * the request: one attention group, D blocks [1, 4, 6] receive P blocks [2, 3, 7], P computed
//!   3 full blocks of tokens;
//! * D verifies byte by byte: every byte a plan read names holds P's pattern at the read's
//!   remote offset, every other byte is still 0xFF.
#![allow(dead_code)]

use pdkv::*;
use std::time::Duration;

/// Engine id of the P (prefill) rank.
pub const P_ENGINE: &str = "xfer-prefill";
/// Engine id of the D (decode) rank.
pub const D_ENGINE: &str = "xfer-decode";
/// Regions per rank.
pub const NUM_REGIONS: u32 = 2;
/// Logical blocks per region.
pub const NUM_BLOCKS: u64 = 8;
/// D's initial byte: `pattern` never produces it (values are < 251).
pub const D_FILL: u8 = 0xFF;
/// The request's P blocks.
pub const P_BLOCKS: [u64; 3] = [2, 3, 7];
/// The D blocks that receive them.
pub const D_BLOCKS: [u64; 3] = [1, 4, 6];

/// P's byte at `offset` of region `region`: distinct for every 256-byte chunk of a region
/// (up to 64 KiB), so a misplaced page or chunk is caught.
pub fn pattern(region: u32, offset: u64) -> u8 {
    (((offset >> 8) * 131 + (offset & 255) * 7 + u64::from(region) * 29 + 1) % 251) as u8
}

/// The tiny pure-attention model.
pub fn model() -> Result<Model> {
    Model::new(&ModelDesc {
        name: "xfer-tiny".into(),
        num_kv_heads: 2,
        head_size: 16,
        head_size_v: 16,
        dtype_bytes: 2,
        layer_pattern: "**".into(),
        ..Default::default()
    })
}

/// One rank's memory (filled) and the metadata advertising it.
pub struct Rank {
    /// The metadata at the buffers' addresses.
    pub metadata: EngineMetadata,
    /// One buffer per region.
    pub buffers: Vec<HostBuffer>,
}

fn layout(engine_id: &str, bases: Vec<u64>) -> EngineLayout {
    EngineLayout {
        engine_id: engine_id.into(),
        num_regions: NUM_REGIONS,
        num_logical_blocks: NUM_BLOCKS,
        region_bases: bases,
        ..Default::default()
    }
}

/// Allocates a rank's regions (P: the pattern, D: 0xFF) and builds its metadata at their
/// addresses. The region sizes come from a first metadata at the default base.
pub fn rank(model: &Model, prefill: bool) -> Result<Rank> {
    rank_in(model, prefill, false)
}

/// [`rank`] with each region in [`HostBuffer::new_shared`] memory (`shared`), which same-host
/// peers map.
pub fn rank_in(model: &Model, prefill: bool, shared: bool) -> Result<Rank> {
    let id = if prefill { P_ENGINE } else { D_ENGINE };
    let cfg = EngineConfig::with_tp(1);
    let probe = EngineMetadata::from_model(model, &cfg, &layout(id, Vec::new()))?;
    let mut buffers = Vec::new();
    for (r, region) in probe.regions()?.iter().enumerate() {
        let len = (region.block_len * region.num_blocks) as usize;
        let mut b = if shared {
            HostBuffer::new_shared(len)?
        } else {
            HostBuffer::new(len)?
        };
        for (o, x) in b.as_mut_slice().iter_mut().enumerate() {
            *x = if prefill {
                pattern(r as u32, o as u64)
            } else {
                D_FILL
            };
        }
        buffers.push(b);
    }
    let bases = buffers.iter().map(HostBuffer::addr).collect();
    let metadata = EngineMetadata::from_model(model, &cfg, &layout(id, bases))?;
    Ok(Rank { metadata, buffers })
}

/// A running rank: its agent, its registered memory and the metadata it advertises.
pub struct Node {
    /// The agent.
    pub agent: Agent,
    /// One registration (owning its buffer) per region.
    pub memory: Vec<Memory>,
    /// The rank's metadata.
    pub metadata: EngineMetadata,
}

/// Creates a rank (see [`rank`]) and its agent on 127.0.0.1 (free port) with short heartbeats,
/// and registers every region's buffer.
pub fn node(
    model: &Model,
    prefill: bool,
    transport: Transport,
    mode: ProgressMode,
) -> Result<Node> {
    node_in(model, prefill, transport, mode, false)
}

/// [`node`] with its regions in shared memory (`shared`, see [`rank_in`]).
pub fn node_in(
    model: &Model,
    prefill: bool,
    transport: Transport,
    mode: ProgressMode,
    shared: bool,
) -> Result<Node> {
    let Rank { metadata, buffers } = rank_in(model, prefill, shared)?;
    let opts = AgentOptions::new(&metadata)
        .listen_address("127.0.0.1:0")
        .transport(transport)
        .progress_mode(mode)
        .heartbeat(Duration::from_millis(100), Duration::from_millis(1500))
        .default_timeout(Duration::from_secs(10));
    let agent = Agent::new(&opts)?;
    let mut memory = Vec::new();
    for (r, b) in buffers.into_iter().enumerate() {
        memory.push(agent.register_buffer(r as u32, b)?);
    }
    Ok(Node {
        agent,
        memory,
        metadata,
    })
}

/// The request's groups.
pub fn groups(block_tokens: u64) -> Vec<PlanGroup> {
    vec![PlanGroup {
        trim: GroupTrimInput {
            kind: GroupKind::Attention,
            local_blocks: D_BLOCKS.to_vec(),
            remote_blocks: P_BLOCKS.to_vec(),
            remote_computed_tokens: 3 * block_tokens,
            ..Default::default()
        },
        regions: Vec::new(),
        layers: Vec::new(),
    }]
}

/// The request's plan for D (`d`) reading from P (`p`); a P rank writing uses the same plan.
pub fn plan(d: &EngineMetadata, p: &EngineMetadata) -> Result<TransferPlan> {
    let ctx = PlanContext::new(&PlanContextParams::new(d, &[p]))?;
    let block_tokens = u64::from(d.info()?.logical_block_size);
    TransferPlan::compile(&ctx, &groups(block_tokens))
}

/// Checks D's memory byte by byte against the plan; returns the bytes the plan moved, or the
/// first mismatch.
pub fn verify(plan: &TransferPlan, d: &[Memory]) -> std::result::Result<u64, String> {
    let got: Vec<Vec<u8>> = d
        .iter()
        .map(|m| m.buffer().expect("registered buffer").to_vec())
        .collect();
    let mut want: Vec<Vec<u8>> = got.iter().map(|g| vec![D_FILL; g.len()]).collect();
    let (reads, bytes) = plan.rank_reads(0).map_err(|e| e.to_string())?;
    if reads.is_empty() {
        return Err("the plan has no reads".into());
    }
    for r in reads {
        for i in 0..r.length {
            want[r.local_region as usize][(r.local_offset + i) as usize] =
                pattern(r.remote_region, r.remote_offset + i);
        }
    }
    for (region, (g, w)) in got.iter().zip(&want).enumerate() {
        if let Some(o) = g.iter().zip(w).position(|(a, b)| a != b) {
            return Err(format!(
                "D region {region} byte {o}: got {:#04x}, want {:#04x}",
                g[o], w[o]
            ));
        }
    }
    Ok(bytes)
}
