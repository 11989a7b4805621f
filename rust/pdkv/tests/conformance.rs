//! Conformance runner: executes EVERY case of EVERY `tests/vectors/*.json` file (format 1,
//! `docs/conformance.md`) through the safe API. An unknown op, a malformed case or a mismatch
//! fails the run; nothing is skipped.
use pdkv::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

// ---- a small test-only JSON parser for the subset of docs/conformance.md -------------------

/// A JSON value of the conformance subset (no floats, no nulls).
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Obj(BTreeMap<String, Json>),
    Arr(Vec<Json>),
    Str(String),
    Int(i64),
    Bool(bool),
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn parse(text: &'a str) -> Result<Json, String> {
        let mut p = Parser { s: text.as_bytes(), i: 0 };
        let v = p.value()?;
        p.ws();
        if p.i != p.s.len() {
            return Err(p.err("trailing characters"));
        }
        Ok(v)
    }

    fn err(&self, what: &str) -> String {
        format!("JSON error at byte {}: {what}", self.i)
    }

    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", c as char)))
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => self.string().map(Json::Str),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(c) if c == b'-' || c.is_ascii_digit() => self.integer(),
            Some(c) => Err(self.err(&format!("unexpected '{}' (outside the conformance subset)", c as char))),
            None => Err(self.err("unexpected end")),
        }
    }

    fn literal(&mut self, word: &str, v: Json) -> Result<Json, String> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("bad literal"))
        }
    }

    fn integer(&mut self) -> Result<Json, String> {
        let start = self.i;
        if self.s[self.i] == b'-' {
            self.i += 1;
        }
        let digits = self.i;
        while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
            self.i += 1;
        }
        if self.i == digits {
            return Err(self.err("sign without digits"));
        }
        if matches!(self.s.get(self.i), Some(b'.' | b'e' | b'E')) {
            return Err(self.err("floats are outside the conformance subset"));
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap();
        text.parse::<i64>().map(Json::Int).map_err(|e| self.err(&format!("integer {text}: {e}")))
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            match self.s.get(self.i) {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    return String::from_utf8(out).map_err(|_| self.err("invalid UTF-8"));
                }
                Some(b'\\') => {
                    match self.s.get(self.i + 1) {
                        Some(b'"') => out.push(b'"'),
                        Some(b'\\') => out.push(b'\\'),
                        _ => return Err(self.err("escape outside the conformance subset")),
                    }
                    self.i += 2;
                }
                Some(&c) => {
                    out.push(c);
                    self.i += 1;
                }
            }
        }
    }

    fn array(&mut self) -> Result<Json, String> {
        self.expect(b'[')?;
        let mut v = Vec::new();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(Json::Arr(v));
        }
        loop {
            v.push(self.value()?);
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Json::Arr(v));
                }
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    fn object(&mut self) -> Result<Json, String> {
        self.expect(b'{')?;
        let mut m = BTreeMap::new();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(Json::Obj(m));
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a key"));
            }
            let k = self.string()?;
            self.expect(b':')?;
            let v = self.value()?;
            if m.insert(k.clone(), v).is_some() {
                return Err(self.err(&format!("duplicate key {k}")));
            }
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Json::Obj(m));
                }
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }
}

// ---- typed access to case inputs -------------------------------------------------------------

type CaseResult<T> = Result<T, String>;

/// What executing an op produced: its full output object, or the library's error.
enum Outcome {
    Output(Json),
    Failed(Error),
}

fn obj(v: &Json) -> CaseResult<&BTreeMap<String, Json>> {
    match v {
        Json::Obj(m) => Ok(m),
        other => Err(format!("expected an object, got {other:?}")),
    }
}

fn field<'j>(m: &'j BTreeMap<String, Json>, k: &str) -> CaseResult<&'j Json> {
    m.get(k).ok_or_else(|| format!("missing key {k:?}"))
}

fn int(m: &BTreeMap<String, Json>, k: &str) -> CaseResult<i64> {
    match field(m, k)? {
        Json::Int(i) => Ok(*i),
        other => Err(format!("{k}: expected an integer, got {other:?}")),
    }
}

fn int_or(m: &BTreeMap<String, Json>, k: &str, default: i64) -> CaseResult<i64> {
    if m.contains_key(k) {
        int(m, k)
    } else {
        Ok(default)
    }
}

fn u32_of(m: &BTreeMap<String, Json>, k: &str) -> CaseResult<u32> {
    let v = int(m, k)?;
    u32::try_from(v).map_err(|_| format!("{k}: {v} does not fit u32"))
}

fn u32_or(m: &BTreeMap<String, Json>, k: &str, default: u32) -> CaseResult<u32> {
    let v = int_or(m, k, default as i64)?;
    u32::try_from(v).map_err(|_| format!("{k}: {v} does not fit u32"))
}

fn u64_of(m: &BTreeMap<String, Json>, k: &str) -> CaseResult<u64> {
    let v = int(m, k)?;
    u64::try_from(v).map_err(|_| format!("{k}: {v} does not fit u64"))
}

fn bool_of(m: &BTreeMap<String, Json>, k: &str) -> CaseResult<bool> {
    match field(m, k)? {
        Json::Bool(b) => Ok(*b),
        other => Err(format!("{k}: expected a boolean, got {other:?}")),
    }
}

fn str_of<'j>(m: &'j BTreeMap<String, Json>, k: &str) -> CaseResult<&'j str> {
    match field(m, k)? {
        Json::Str(s) => Ok(s),
        other => Err(format!("{k}: expected a string, got {other:?}")),
    }
}

fn str_or<'j>(m: &'j BTreeMap<String, Json>, k: &str, default: &'j str) -> CaseResult<&'j str> {
    if m.contains_key(k) {
        str_of(m, k)
    } else {
        Ok(default)
    }
}

fn u64_or(m: &BTreeMap<String, Json>, k: &str, default: u64) -> CaseResult<u64> {
    if m.contains_key(k) {
        u64_of(m, k)
    } else {
        Ok(default)
    }
}

fn u64s(v: &Json) -> CaseResult<Vec<u64>> {
    match v {
        Json::Arr(a) => a
            .iter()
            .map(|x| match x {
                Json::Int(i) => u64::try_from(*i).map_err(|_| format!("{i} does not fit u64")),
                other => Err(format!("expected an integer, got {other:?}")),
            })
            .collect(),
        other => Err(format!("expected an array of integers, got {other:?}")),
    }
}

fn u64_arr(v: &[u64]) -> Json {
    Json::Arr(v.iter().map(|&x| u(x)).collect())
}

fn kind_of(m: &BTreeMap<String, Json>, k: &str) -> CaseResult<GroupKind> {
    match str_of(m, k)? {
        "attention" => Ok(GroupKind::Attention),
        "sliding_window" => Ok(GroupKind::SlidingWindow),
        "mamba" => Ok(GroupKind::Mamba),
        other => Err(format!("{k}: unknown group kind {other:?}")),
    }
}

fn cache_mode_of(name: &str) -> CaseResult<MambaCacheMode> {
    match name {
        "none" => Ok(MambaCacheMode::None),
        "align" => Ok(MambaCacheMode::Align),
        "all" => Ok(MambaCacheMode::All),
        other => Err(format!("unknown mamba cache mode {other:?}")),
    }
}

/// Fails when `m` has a key outside `allowed` (a typo must not silently run on a default).
fn check_keys(what: &str, m: &BTreeMap<String, Json>, allowed: &[&str]) -> CaseResult<()> {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!("{what}: key {k:?} is not defined by the op")),
        None => Ok(()),
    }
}

/// Input keys each op defines (required and optional), per docs/conformance.md.
fn input_keys(op: &str) -> Option<&'static [&'static str]> {
    Some(match op {
        "tp_ratio" => &["local_tp", "remote_tp"],
        "handshake_target_ranks" => &["local_tp", "local_rank", "remote_tp"],
        "physical_head_range" => &["tp", "total_kv_heads", "rank"],
        "notifications_expected" => &["p_tp", "d_tp"],
        "tp_mapping" => &["local_tp", "local_rank", "remote_tp", "total_kv_heads", "use_mla", "has_mamba"],
        "physical_blocks_per_logical" => &["conv_bytes", "ssm_bytes", "block_len"],
        "block_size_ratio" => &["local_kernel_block_size", "remote_kernel_block_size"],
        "geometry" => &["model", "engine"],
        "mamba_reads" => &["model", "prefill", "decode", "decode_rank", "rule"],
        "clip_exchange_blocks" => {
            &["ids", "kind", "hma_enabled", "sliding_window", "block_size", "cache_mode", "num_speculative_blocks"]
        }
        "sliding_window_blocks_to_keep" => &["window", "block_size"],
        "descriptor_ids" => &[
            "groups",
            "num_blocks",
            "block_size_ratio",
            "blocks_per_logical",
            "num_attention_regions",
            "num_mamba_regions",
        ],
        "logical_to_kernel_block_ids" => &["ids", "kind", "blocks_per_logical"],
        "map_block_ids_for_block_size_ratio" => &["ids", "kind", "block_size_ratio", "remote_len"],
        "d_num_new_matched_tokens" => &["num_prompt_tokens", "num_computed_tokens", "has_mamba"],
        "plan_remote_decode_prefill" => &["num_prompt_tokens", "local_hit_tokens", "block_size", "has_mamba"],
        "derive_offload_geometry" => &["config_num_blocks", "gpu_block_size", "hash_block_size", "layers"],
        _ => return None,
    })
}

fn u(v: u64) -> Json {
    Json::Int(i64::try_from(v).expect("value fits i64"))
}

fn ranks(v: &[u32]) -> Json {
    Json::Arr(v.iter().map(|&r| Json::Int(r as i64)).collect())
}

fn out(pairs: Vec<(&str, Json)>) -> Outcome {
    Outcome::Output(Json::Obj(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

/// `engine` input shape → EngineConfig (a bad enum name is a library error).
fn engine(v: &Json) -> CaseResult<Result<EngineConfig, Error>> {
    let m = obj(v)?;
    let known = [
        "tp_size",
        "kv_cache_dtype_bytes",
        "conv_state_dtype_bytes",
        "ssm_state_dtype_bytes",
        "num_speculative_tokens",
        "user_block_size",
        "user_mamba_block_size",
        "backend",
        "mamba_cache_mode",
        "conv_layout",
    ];
    if let Some(k) = m.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("engine: unknown key {k:?}"));
    }
    let mode = cache_mode_of(str_or(m, "mamba_cache_mode", "none")?)?;
    let layout = match str_or(m, "conv_layout", "DS")? {
        "DS" => ConvLayout::Ds,
        "SD" => ConvLayout::Sd,
        other => return Err(format!("engine: unknown conv_layout {other:?}")),
    };
    let backend = match Backend::from_name(str_or(m, "backend", "flash_attn")?) {
        Ok(b) => b,
        Err(e) => return Ok(Err(e)),
    };
    Ok(Ok(EngineConfig::with_tp(u32_of(m, "tp_size")?)
        .kv_cache_dtype_bytes(u32_or(m, "kv_cache_dtype_bytes", 0)?)
        .conv_state_dtype_bytes(u32_or(m, "conv_state_dtype_bytes", 0)?)
        .ssm_state_dtype_bytes(u32_or(m, "ssm_state_dtype_bytes", 0)?)
        .num_speculative_tokens(u32_or(m, "num_speculative_tokens", 0)?)
        .user_block_size(u32_or(m, "user_block_size", 0)?)
        .user_mamba_block_size(u32_or(m, "user_mamba_block_size", 0)?)
        .backend(backend)
        .mamba_cache_mode(mode)
        .conv_layout(layout)))
}

/// Turns a library Result into an Outcome, building the output from the value.
macro_rules! lib {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(err) => return Ok(Outcome::Failed(err)),
        }
    };
}

fn geometry_output(g: &Geometry) -> Result<Json, Error> {
    let i = g.info()?;
    let projections = g
        .projections()?
        .into_iter()
        .map(|p| {
            Json::Obj(BTreeMap::from([
                ("name".to_owned(), Json::Str(p.name)),
                ("dim_local".to_owned(), u(p.dim_local)),
                ("bytes".to_owned(), u(p.bytes)),
                ("offset".to_owned(), u(p.offset)),
                ("replicated".to_owned(), Json::Bool(p.replicated)),
            ]))
        })
        .collect();
    let log_lines = g.log_lines()?.into_iter().map(|l| Json::Str(l.to_owned())).collect();
    let pairs: Vec<(&str, Json)> = vec![
        ("kv_heads_per_rank", Json::Int(i.kv_heads_per_rank as i64)),
        ("attn_bytes_per_token", u(i.attn_bytes_per_token)),
        ("conv_bytes", u(i.conv_bytes)),
        ("ssm_bytes", u(i.ssm_bytes)),
        ("mamba_page_bytes", u(i.mamba_page_bytes)),
        ("block_size", u(i.block_size)),
        ("mamba_block_size", u(i.mamba_block_size)),
        ("attn_page_bytes", u(i.attn_page_bytes)),
        ("padding_ppm", u(i.padding_ppm)),
        ("kernel_block_size", u(i.kernel_block_size)),
        ("physical_per_logical", u(i.physical_per_logical)),
        ("kernel_page_bytes", u(i.kernel_page_bytes)),
        ("projections", Json::Arr(projections)),
        ("log_lines", Json::Arr(log_lines)),
    ];
    Ok(Json::Obj(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

/// Executes one op. `Err` is a malformed case or an unknown op (a runner failure).
fn execute(op: &str, input: &BTreeMap<String, Json>) -> CaseResult<Outcome> {
    let allowed = input_keys(op).ok_or_else(|| format!("unknown op {op:?}: this runner cannot execute it"))?;
    check_keys("input", input, allowed)?;
    Ok(match op {
        "tp_ratio" => {
            let r = lib!(tp_ratio(u32_of(input, "local_tp")?, u32_of(input, "remote_tp")?));
            out(vec![("tp_ratio", Json::Int(r as i64))])
        }
        "handshake_target_ranks" => {
            let r = lib!(handshake_target_ranks(
                u32_of(input, "local_tp")?,
                u32_of(input, "local_rank")?,
                u32_of(input, "remote_tp")?
            ));
            out(vec![("ranks", ranks(&r))])
        }
        "physical_head_range" => {
            let r = lib!(physical_head_range(
                u32_of(input, "tp")?,
                u32_of(input, "total_kv_heads")?,
                u32_of(input, "rank")?
            ));
            out(vec![("begin", Json::Int(r.start as i64)), ("end", Json::Int(r.end as i64))])
        }
        "notifications_expected" => {
            let n = lib!(notifications_expected_per_request(u32_of(input, "p_tp")?, u32_of(input, "d_tp")?));
            out(vec![("count", Json::Int(n as i64))])
        }
        "tp_mapping" => {
            let m = lib!(TpMapping::new(&TpMappingParams {
                local_tp: u32_of(input, "local_tp")?,
                local_rank: u32_of(input, "local_rank")?,
                remote_tp: u32_of(input, "remote_tp")?,
                total_kv_heads: u32_of(input, "total_kv_heads")?,
                use_mla: bool_of(input, "use_mla")?,
                has_mamba: bool_of(input, "has_mamba")?,
            }));
            let i = lib!(m.info());
            out(vec![
                ("tp_ratio", Json::Int(i.tp_ratio as i64)),
                ("handshake_targets", ranks(lib!(m.ranks(TpList::HandshakeTargets)))),
                ("attention_source_ranks", ranks(lib!(m.ranks(TpList::AttentionSources)))),
                ("mamba_source_ranks", ranks(lib!(m.ranks(TpList::MambaSources)))),
                ("all_source_ranks", ranks(lib!(m.ranks(TpList::AllSources)))),
                ("attention_slots", ranks(lib!(m.ranks(TpList::AttentionSlots)))),
                ("notify_ranks", ranks(lib!(m.ranks(TpList::NotifyTargets)))),
                ("rank_offset_factor", Json::Int(i.rank_offset_factor as i64)),
                ("local_replicated", Json::Bool(i.local_replicated)),
                ("remote_replicated", Json::Bool(i.remote_replicated)),
                ("local_physical_heads", Json::Int(i.local_physical_heads as i64)),
                ("remote_physical_heads", Json::Int(i.remote_physical_heads as i64)),
            ])
        }
        "physical_blocks_per_logical" => {
            let p = lib!(physical_blocks_per_logical(
                u64_of(input, "conv_bytes")?,
                u64_of(input, "ssm_bytes")?,
                u64_of(input, "block_len")?
            ));
            out(vec![("ppl", u(p))])
        }
        "block_size_ratio" => {
            let r = lib!(block_size_ratio(
                u64_of(input, "local_kernel_block_size")?,
                u64_of(input, "remote_kernel_block_size")?
            ));
            out(vec![("ratio", u(r))])
        }
        "geometry" => {
            let model = lib!(Model::from_preset(str_of(input, "model")?));
            let cfg = lib!(engine(field(input, "engine")?)?);
            let g = lib!(Geometry::new(&model, &cfg));
            Outcome::Output(lib!(geometry_output(&g)))
        }
        "mamba_reads" => {
            let model = lib!(Model::from_preset(str_of(input, "model")?));
            let p_cfg = lib!(engine(field(input, "prefill")?)?);
            let d_cfg = lib!(engine(field(input, "decode")?)?);
            let rule = match str_of(input, "rule")? {
                "pdkv" => MambaReadsRule::Pdkv,
                "vllm" => MambaReadsRule::Vllm,
                other => return Err(format!("unknown rule {other:?}")),
            };
            let p = lib!(Geometry::new(&model, &p_cfg));
            let d = lib!(Geometry::new(&model, &d_cfg));
            let list = lib!(MambaReadList::new(&p, &d, u32_of(input, "decode_rank")?, rule));
            let reads = lib!(list.items())
                .into_iter()
                .map(|r| {
                    Json::Obj(BTreeMap::from([
                        ("p_rank".to_owned(), Json::Int(r.p_rank as i64)),
                        ("part".to_owned(), Json::Str(r.part.to_owned())),
                        ("remote_offset".to_owned(), u(r.remote_offset)),
                        ("local_offset".to_owned(), u(r.local_offset)),
                        ("length".to_owned(), u(r.length)),
                    ]))
                })
                .collect();
            out(vec![("reads", Json::Arr(reads)), ("source_ranks", ranks(lib!(list.source_ranks())))])
        }
        "clip_exchange_blocks" => {
            let params = ExchangeClipParams {
                kind: kind_of(input, "kind")?,
                hma_enabled: if input.contains_key("hma_enabled") { bool_of(input, "hma_enabled")? } else { true },
                sliding_window: u64_or(input, "sliding_window", 0)?,
                block_size: u64_or(input, "block_size", 0)?,
                cache_mode: cache_mode_of(str_or(input, "cache_mode", "none")?)?,
                num_speculative_blocks: u64_or(input, "num_speculative_blocks", 0)?,
            };
            let ids = lib!(clip_exchange_blocks(&u64s(field(input, "ids")?)?, &params));
            out(vec![("ids", u64_arr(&ids))])
        }
        "sliding_window_blocks_to_keep" => {
            let n = lib!(sliding_window_blocks_to_keep(u64_of(input, "window")?, u64_of(input, "block_size")?));
            out(vec![("blocks", u(n))])
        }
        "descriptor_ids" => {
            let groups = match field(input, "groups")? {
                Json::Arr(v) => v
                    .iter()
                    .map(|g| {
                        let g = obj(g)?;
                        check_keys("groups[]", g, &["kind", "ids"])?;
                        Ok(GroupBlockIds { kind: kind_of(g, "kind")?, ids: u64s(field(g, "ids")?)? })
                    })
                    .collect::<CaseResult<Vec<_>>>()?,
                other => return Err(format!("groups: expected an array, got {other:?}")),
            };
            let layout = DescriptorLayout {
                num_blocks: u64_of(input, "num_blocks")?,
                block_size_ratio: u64_of(input, "block_size_ratio")?,
                blocks_per_logical: u64_of(input, "blocks_per_logical")?,
                num_attention_regions: u64_of(input, "num_attention_regions")?,
                num_mamba_regions: u64_of(input, "num_mamba_regions")?,
            };
            let ids = lib!(descriptor_ids(&groups, &layout));
            out(vec![("ids", u64_arr(&ids))])
        }
        "logical_to_kernel_block_ids" => {
            let ids = lib!(logical_to_kernel_block_ids(
                &u64s(field(input, "ids")?)?,
                kind_of(input, "kind")?,
                u64_of(input, "blocks_per_logical")?
            ));
            out(vec![("ids", u64_arr(&ids))])
        }
        "map_block_ids_for_block_size_ratio" => {
            let ids = lib!(map_block_ids_for_block_size_ratio(
                &u64s(field(input, "ids")?)?,
                kind_of(input, "kind")?,
                u64_of(input, "block_size_ratio")?,
                u64_of(input, "remote_len")?
            ));
            out(vec![("ids", u64_arr(&ids))])
        }
        "d_num_new_matched_tokens" => {
            let n = lib!(d_num_new_matched_tokens(
                u64_of(input, "num_prompt_tokens")?,
                u64_of(input, "num_computed_tokens")?,
                bool_of(input, "has_mamba")?
            ));
            out(vec![("tokens", u(n))])
        }
        "plan_remote_decode_prefill" => {
            let p = lib!(plan_remote_decode_prefill(
                u64_of(input, "num_prompt_tokens")?,
                u64_of(input, "local_hit_tokens")?,
                u64_of(input, "block_size")?,
                bool_of(input, "has_mamba")?
            ));
            out(vec![
                ("num_prompt_tokens", u(p.num_prompt_tokens)),
                ("computed_tokens", u(p.computed_tokens)),
                ("new_tokens", u(p.new_tokens)),
            ])
        }
        "derive_offload_geometry" => {
            let layers = match field(input, "layers")? {
                Json::Arr(v) => v
                    .iter()
                    .map(|l| {
                        let l = obj(l)?;
                        check_keys("layers[]", l, &["tensor_bytes", "page_bytes"])?;
                        Ok(OffloadLayer { tensor_bytes: u64_of(l, "tensor_bytes")?, page_bytes: u64_of(l, "page_bytes")? })
                    })
                    .collect::<CaseResult<Vec<_>>>()?,
                other => return Err(format!("layers: expected an array, got {other:?}")),
            };
            let g = lib!(derive_offload_geometry(
                u64_of(input, "config_num_blocks")?,
                u64_of(input, "gpu_block_size")?,
                u64_of(input, "hash_block_size")?,
                &layers
            ));
            out(vec![("num_blocks", u(g.num_blocks)), ("hash_blocks_per_block", u(g.hash_blocks_per_block))])
        }
        other => return Err(format!("unknown op {other:?}: this runner cannot execute it")),
    })
}

/// Compares `expected` against `actual`: objects key by key with equal key sets (a vector
/// states the op's complete output: a missing or extra key fails), arrays element by element,
/// scalars exactly. Returns the first difference.
fn compare(path: &str, expected: &Json, actual: &Json) -> Option<String> {
    match (expected, actual) {
        (Json::Obj(e), Json::Obj(a)) => {
            if let Some(k) = a.keys().find(|k| !e.contains_key(*k)) {
                return Some(format!("{path}.{k}: the vector lacks this output key"));
            }
            e.iter().find_map(|(k, ev)| match a.get(k) {
                None => Some(format!("{path}.{k}: not an output key of the op")),
                Some(av) => compare(&format!("{path}.{k}"), ev, av),
            })
        }
        (Json::Arr(e), Json::Arr(a)) => {
            if e.len() != a.len() {
                return Some(format!("{path}: expected {} elements, got {} ({a:?})", e.len(), a.len()));
            }
            e.iter().zip(a).enumerate().find_map(|(i, (ev, av))| compare(&format!("{path}[{i}]"), ev, av))
        }
        (e, a) if e == a => None,
        (e, a) => Some(format!("{path}: expected {e:?}, got {a:?}")),
    }
}

/// Runs one case; `Err` describes the failure.
fn run_case(case: &Json) -> CaseResult<()> {
    let c = obj(case)?;
    let op = str_of(c, "op")?;
    let input = obj(field(c, "input")?)?;
    let outcome = execute(op, input)?;
    match (c.get("output"), c.get("error"), outcome) {
        (Some(_), Some(_), _) | (None, None, _) => Err("needs exactly one of output / error".into()),
        (Some(expected), None, Outcome::Output(actual)) => {
            obj(expected)?;
            compare("output", expected, &actual).map_or(Ok(()), Err)
        }
        (Some(_), None, Outcome::Failed(err)) => Err(format!("expected output, got error {err}")),
        (None, Some(_), Outcome::Output(actual)) => Err(format!("expected an error, got output {actual:?}")),
        (None, Some(expected), Outcome::Failed(err)) => {
            let e = obj(expected)?;
            let status = str_of(e, "status")?;
            if err.status().name() != status {
                return Err(format!("expected status {status}, got {err}"));
            }
            let needles = match field(e, "message_contains")? {
                Json::Arr(v) => v,
                other => return Err(format!("message_contains: expected an array, got {other:?}")),
            };
            for n in needles {
                let Json::Str(n) = n else { return Err(format!("message_contains: non-string {n:?}")) };
                if !err.message().contains(n.as_str()) {
                    return Err(format!("message {:?} does not contain {n:?}", err.message()));
                }
            }
            Ok(())
        }
    }
}

fn vector_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_vector_file_passes() {
    let files = vector_files();
    assert!(!files.is_empty(), "no tests/vectors/*.json found");
    let mut total = 0usize;
    let mut failures = String::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy();
        let doc = Parser::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let doc = obj(&doc).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(doc.get("format"), Some(&Json::Int(1)), "{name}: unsupported format");
        let Some(Json::Arr(cases)) = doc.get("cases") else { panic!("{name}: no cases array") };
        assert!(!cases.is_empty(), "{name}: empty cases");
        for (i, case) in cases.iter().enumerate() {
            total += 1;
            if let Err(why) = run_case(case) {
                let case_name = obj(case).ok().and_then(|c| str_of(c, "name").ok()).unwrap_or("?");
                let _ = writeln!(failures, "{name}#{i} {case_name}: {why}");
            }
        }
    }
    println!("conformance: {total} cases in {} files", files.len());
    assert!(failures.is_empty(), "conformance failures:\n{failures}");
}

// ---- the runner's own checks: the parser and the comparison must be able to fail --------------

#[test]
fn parser_accepts_the_subset_and_rejects_the_rest() {
    let v = Parser::parse(r#"{"a": [1, -2, true, false, "x\"y\\z"], "b": {}}"#).unwrap();
    let m = obj(&v).unwrap();
    assert_eq!(
        m["a"],
        Json::Arr(vec![Json::Int(1), Json::Int(-2), Json::Bool(true), Json::Bool(false), Json::Str("x\"y\\z".into())])
    );
    for bad in ["1.5", "null", "[1,]", "{\"a\" 1}", "\"\\n\"", "{\"a\":1,\"a\":2}", "[1] x", "-"] {
        assert!(Parser::parse(bad).is_err(), "{bad} parsed");
    }
}

#[test]
fn runner_detects_mismatches_and_unknown_ops() {
    let case = |s: &str| Parser::parse(s).unwrap();
    assert!(run_case(&case(r#"{"name":"ok","op":"tp_ratio","input":{"local_tp":2,"remote_tp":4},"output":{"tp_ratio":-2}}"#)).is_ok());
    assert!(run_case(&case(r#"{"name":"bad","op":"tp_ratio","input":{"local_tp":2,"remote_tp":4},"output":{"tp_ratio":2}}"#)).is_err());
    assert!(run_case(&case(r#"{"name":"key","op":"tp_ratio","input":{"local_tp":2,"remote_tp":4},"output":{"nope":2}}"#)).is_err());
    assert!(run_case(&case(r#"{"name":"unk","op":"warp","input":{},"output":{}}"#)).unwrap_err().contains("unknown op"));
    let typo = run_case(&case(r#"{"name":"typo","op":"tp_ratio","input":{"local_tp":2,"remote_tp":4,"remote_pt":1},"output":{"tp_ratio":-2}}"#));
    assert!(typo.unwrap_err().contains("remote_pt"));
    let lacking = run_case(&case(r#"{"name":"lack","op":"physical_head_range","input":{"tp":2,"total_kv_heads":4,"rank":1},"output":{"begin":2}}"#));
    assert!(lacking.unwrap_err().contains("end"));
    assert!(run_case(&case(r#"{"name":"st","op":"tp_ratio","input":{"local_tp":2,"remote_tp":3},"error":{"status":"PDKV_ERR_OVERFLOW","message_contains":[]}}"#)).is_err());
    assert!(run_case(&case(r#"{"name":"msg","op":"tp_ratio","input":{"local_tp":2,"remote_tp":3},"error":{"status":"PDKV_ERR_TP_NOT_DIVISIBLE","message_contains":["zzz"]}}"#)).is_err());
    assert!(run_case(&case(r#"{"name":"err","op":"tp_ratio","input":{"local_tp":2,"remote_tp":3},"error":{"status":"PDKV_ERR_TP_NOT_DIVISIBLE","message_contains":["2","3"]}}"#)).is_ok());
}
