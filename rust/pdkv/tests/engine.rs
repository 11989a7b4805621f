//! The engine-level API ([`Engine`]): groups, metadata, descriptors, a request's plan equal to
//! the low-level plan built by hand, and refusals that say what to pass instead.
use pdkv::*;

/// The request of the engine examples (examples/engine/*, engine.json): Nemotron-3-Nano, P TP4
/// -> D TP2 rank 0, align mode, a 5001-token prompt of which D holds the first 2096 tokens.
const EXAMPLE: [(&[u64], &[u64]); 5] = [
    (&[10, 0, 6], &[6]),
    (&[11, 0, 7], &[7]),
    (&[12, 0, 13], &[8]),
    (&[14, 0, 15], &[9]),
    (&[9, 4, 5], &[1, 2, 3, 4, 5]),
];

fn align(tp: u32) -> EngineConfig {
    EngineConfig::with_tp(tp).mamba_cache_mode(MambaCacheMode::Align)
}

fn request(groups: &[(&'static [u64], &'static [u64])]) -> Vec<RequestGroup<'static>> {
    groups
        .iter()
        .map(|&(l, r)| RequestGroup {
            local_block_ids: l,
            remote_block_ids: r,
        })
        .collect()
}

struct Pair {
    model: Model,
    d: Engine,
    remote: Vec<EngineMetadata>,
}

fn pair() -> Pair {
    let model = Model::from_preset("nemotron-3-nano-30b").unwrap();
    let d = Engine::new(&model, &align(2), &EngineOptions::new("decode", 0, 16)).unwrap();
    let remote = (0..4)
        .map(|r| {
            Engine::new(&model, &align(4), &EngineOptions::new("prefill", r, 16))
                .unwrap()
                .metadata()
                .unwrap()
        })
        .collect();
    Pair { model, d, remote }
}

impl Pair {
    fn ctx(&self) -> PlanContext {
        let refs: Vec<&EngineMetadata> = self.remote.iter().collect();
        self.d.plan_context(&refs, &align(4), false).unwrap()
    }
}

#[test]
fn groups_metadata_and_descriptors() {
    let p = pair();
    let info = p.d.info().unwrap();
    assert_eq!(
        (info.num_groups, info.num_regions, info.logical_block_size),
        (5, 6, 2096)
    );
    assert!(info.prefix_caching);
    assert_eq!(info.cache_mode, MambaCacheMode::Align);
    let pattern = p.model.describe().unwrap().layer_pattern;
    let mamba: Vec<u32> = (0u32..)
        .zip(pattern.chars())
        .filter(|&(_, c)| c == 'M')
        .map(|(i, _)| i)
        .collect();
    let attention: Vec<u32> = (0u32..)
        .zip(pattern.chars())
        .filter(|&(_, c)| c == '*')
        .map(|(i, _)| i)
        .collect();
    let groups = p.d.groups().unwrap();
    for (g, group) in groups.iter().take(4).enumerate() {
        assert_eq!(group.kind, GroupKind::Mamba);
        let want: Vec<u32> = mamba.iter().skip(g).step_by(4).copied().collect();
        assert_eq!(group.layers, &want[..]);
    }
    assert_eq!(groups[4].kind, GroupKind::Attention);
    assert_eq!(groups[4].layers, &attention[..]);
    assert_eq!(groups[4].regions, &[0, 1, 2, 3, 4, 5]);
    let err = p.d.group(5).unwrap_err();
    assert_eq!(err.status(), Status::OutOfBounds);
    assert!(err.message().contains("count 5"), "{}", err.message());

    let layout = EngineLayout {
        engine_id: "decode".into(),
        num_logical_blocks: 16,
        num_regions: 6,
        ..EngineLayout::default()
    };
    let hand = EngineMetadata::from_model(&p.model, &align(2), &layout).unwrap();
    assert!(p.d.metadata().unwrap() == hand);
    let descs = p.d.registration_descriptors().unwrap();
    let items = descs.items().unwrap();
    assert!(items.len() > 6 * 16);
    assert_eq!(items[0].addr, 1 << 40);
}

#[test]
fn plan_equals_the_low_level_plan() {
    let p = pair();
    let ctx = p.ctx();
    let plan =
        p.d.plan_request(&ctx, &request(&EXAMPLE), 5001, 2096)
            .unwrap();
    // By hand: P computed 5000 tokens (N-1), D's attention blocks after its one-block hit (ppl 1
    // with FlashAttention), each Mamba group's running state.
    let groups = p.d.groups().unwrap();
    let hand: Vec<PlanGroup> = groups
        .iter()
        .zip(EXAMPLE)
        .map(|(g, (l, r))| {
            let mut t = GroupTrimInput {
                kind: g.kind,
                remote_blocks: r.to_vec(),
                remote_computed_tokens: 5000,
                local_hit_tokens: 2096,
                ..GroupTrimInput::default()
            };
            if g.kind == GroupKind::Attention {
                t.local_blocks = l[1..].to_vec();
                t.local_first_block = Some(1);
            } else {
                t.cache_mode = MambaCacheMode::Align;
                t.local_blocks = vec![l[l.len() - 1]];
            }
            PlanGroup {
                trim: t,
                regions: g.regions.to_vec(),
                ..PlanGroup::default()
            }
        })
        .collect();
    let md = p.d.metadata().unwrap();
    let (dg, pg) = (
        Geometry::new(&p.model, &align(2)).unwrap(),
        Geometry::new(&p.model, &align(4)).unwrap(),
    );
    let refs: Vec<&EngineMetadata> = p.remote.iter().collect();
    let low = PlanContext::new(&PlanContextParams::new(&md, &refs).geometries(&dg, &pg)).unwrap();
    let want = TransferPlan::compile(&low, &hand).unwrap();
    assert_eq!(
        plan.to_json_string().unwrap(),
        want.to_json_string().unwrap()
    );
    // plan_request_into plans the same into a plan that held another request's plan.
    let mut into = TransferPlan::compile(&low, &hand[..0]).unwrap();
    p.d.plan_request_into(&ctx, &request(&EXAMPLE), 5001, 2096, &mut into)
        .unwrap();
    assert_eq!(
        into.to_json_string().unwrap(),
        want.to_json_string().unwrap()
    );
}

#[test]
fn refusals_say_what_to_pass() {
    let p = pair();
    let ctx = p.ctx();
    // Every refusal also through plan_request_into, into a plan holding a request's plan: the
    // same error, and the plan left empty.
    let mut reused = TransferPlan::new_empty().unwrap();
    let mut fails = |groups: &[RequestGroup<'_>], n: u64, hit: u64, words: &[&str]| {
        let err = p.d.plan_request(&ctx, groups, n, hit).unwrap_err();
        p.d.plan_request_into(&ctx, &request(&EXAMPLE), 5001, 2096, &mut reused)
            .unwrap();
        let into =
            p.d.plan_request_into(&ctx, groups, n, hit, &mut reused)
                .unwrap_err();
        assert_eq!(
            (into.status(), into.message()),
            (err.status(), err.message())
        );
        let info = reused.info().unwrap();
        assert_eq!((info.bytes, info.num_groups), (0, 0));
        assert_eq!(err.status(), Status::InvalidArgument, "{}", err.message());
        for w in words {
            assert!(err.message().contains(w), "{:?} lacks {w:?}", err.message());
        }
    };
    fails(
        &request(&EXAMPLE[..4]),
        5001,
        2096,
        &["4 groups", "5 KV-cache groups"],
    );
    fails(
        &request(&EXAMPLE),
        5001,
        100,
        &["num_local_computed_tokens = 100", "whole blocks"],
    );
    let mut bad = request(&EXAMPLE);
    bad[4].local_block_ids = &[9, 4, 500];
    fails(
        &bad,
        5001,
        2096,
        &[
            "local_block_ids[2] (attention group) = 500",
            "16 logical blocks",
        ],
    );
    fails(&request(&EXAMPLE), 0, 0, &["num_prompt_tokens is 0"]);
    let refs: Vec<&EngineMetadata> = p.remote.iter().collect();
    let err = p.d.plan_context(&refs, &align(2), false).unwrap_err();
    assert!(err.message().contains("tp_size 4"), "{}", err.message());
    let opts = EngineOptions {
        region_bases: vec![1 << 40, 2 << 40],
        ..EngineOptions::default()
    };
    let err = Engine::new(&p.model, &align(2), &opts).unwrap_err();
    assert!(
        err.message().contains("num_region_bases = 2"),
        "{}",
        err.message()
    );
    let off = EngineOptions {
        prefix_caching: Some(false),
        ..EngineOptions::default()
    };
    assert!(
        !Engine::new(&p.model, &align(2), &off)
            .unwrap()
            .info()
            .unwrap()
            .prefix_caching
    );
}

#[test]
fn engines_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Engine>();
    let p = pair();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| assert_eq!(p.d.info().unwrap().num_groups, 5));
        }
    });
}
