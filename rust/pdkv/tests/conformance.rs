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
        let mut p = Parser {
            s: text.as_bytes(),
            i: 0,
        };
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
            Some(c) => Err(self.err(&format!(
                "unexpected '{}' (outside the conformance subset)",
                c as char
            ))),
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
        text.parse::<i64>()
            .map(Json::Int)
            .map_err(|e| self.err(&format!("integer {text}: {e}")))
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

/// An optional field: `None` (unset) when the vector does not name it.
fn u32_opt(m: &BTreeMap<String, Json>, k: &str) -> CaseResult<Option<u32>> {
    if m.contains_key(k) {
        u32_of(m, k).map(Some)
    } else {
        Ok(None)
    }
}

/// An optional field: `None` (unset) when the vector does not name it.
fn u64_opt(m: &BTreeMap<String, Json>, k: &str) -> CaseResult<Option<u64>> {
    if m.contains_key(k) {
        u64_of(m, k).map(Some)
    } else {
        Ok(None)
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
        "tp_mapping" => &[
            "local_tp_size",
            "local_tp_rank",
            "remote_tp_size",
            "total_kv_heads",
            "use_mla",
            "has_mamba",
        ],
        "geometry" => &["model", "engine"],
        "mamba_reads" => &["model", "prefill", "decode", "decode_rank", "rule"],
        "clip_exchange_blocks" => &[
            "ids",
            "kind",
            "hma_enabled",
            "sliding_window",
            "block_size",
            "cache_mode",
            "num_speculative_blocks",
        ],
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
        "plan_remote_decode_prefill" => &[
            "num_prompt_tokens",
            "local_hit_tokens",
            "block_size",
            "has_mamba",
        ],
        "derive_offload_geometry" => &[
            "config_num_blocks",
            "gpu_block_size",
            "hash_block_size",
            "layers",
        ],
        "trim_group" => &TRIM_KEYS,
        "mamba_aligned_split_v0604" => &[
            "num_computed_tokens",
            "num_new_local_computed_tokens",
            "num_external_computed_tokens",
            "num_new_tokens",
            "num_prompt_tokens",
            "num_tokens",
            "block_size",
            "use_eagle",
            "load_kv_async",
        ],
        "mamba_aligned_split" => &[
            "start",
            "num_new_tokens",
            "num_prompt_tokens",
            "num_tokens",
            "block_size",
            "floor_unit",
            "tail_hash_block_size",
            "shared_prefix_tokens",
            "max_num_scheduled_tokens",
            "long_prefill_token_threshold",
            "use_eagle",
            "load_kv_async",
            "defer_oversized_block",
        ],
        "truncate_for_remote_decode" => {
            &["num_prompt_tokens", "max_tokens", "truncated", "has_mamba"]
        }
        "receive_zero_ranges" => &[
            "local_blocks",
            "tokens_per_block",
            "block_size_ratio",
            "remote_kernel_len",
        ],
        "uncovered_token_ranges" => &[
            "local_blocks",
            "first_block_index",
            "tokens_per_block",
            "held_tokens",
            "written",
        ],
        "mamba_descriptor_ids" => &[
            "ids",
            "num_logical_blocks",
            "num_regions",
            "descs_per_region",
            "first_id",
        ],
        "crc32c" => &["hex"],
        "metadata_roundtrip" => &["model", "engine", "layout"],
        "metadata_decode" => &["hex"],
        "handshake_validate" => &["local", "remote", "item_messages_contain"],
        "transfer_plan" | "transfer_plan_json" => &[
            "model",
            "hf_config",
            "prefill",
            "decode",
            "decode_rank",
            "groups",
            "permute_on_receive",
        ],
        "permute_kv_block" => &["hex", "from", "to", "heads", "tokens", "head_bytes"],
        "engine_plan" => &[
            "model",
            "hf_config",
            "prefill",
            "decode",
            "decode_rank",
            "request",
        ],
        "attention_local_descriptors" => &["regions", "block_size_ratio"],
        "attention_remote_descriptors" => &[
            "local_regions",
            "remote_regions",
            "mapping",
            "block_size_ratio",
        ],
        "attention_split_descriptors" => &["regions", "mapping", "block_size_ratio", "p_tp_rank"],
        "mamba_local_descriptors" => &["model", "engine", "regions", "ppl"],
        "mamba_remote_descriptors" => &[
            "model",
            "prefill",
            "decode",
            "decode_rank",
            "rule",
            "p_regions",
            "p_ppl",
            "p_tp_rank",
        ],
        "mamba_local_split_descriptors" => &[
            "model",
            "prefill",
            "decode",
            "decode_rank",
            "rule",
            "d_regions",
            "d_ppl",
            "p_tp_rank",
        ],
        "mamba_local_conv_offsets" => &["model", "engine"],
        "mamba_remote_conv_offsets" => &["model", "engine", "local_tp_rank", "tp_ratio"],
        "mamba_ssm_read_range" => &[
            "model",
            "engine",
            "remote_conv_bytes",
            "remote_ssm_bytes",
            "local_tp_rank",
            "tp_ratio",
        ],
        "model_preset" => &["model"],
        "model_hf_config" => &["json", "name"],
        "handshake_validate_engine_ranks" => &["ranks", "item_messages_contain"],
        "pipeline_stage_pairs" => &["model", "prefill", "decode"],
        _ => return None,
    })
}

fn bool_or(m: &BTreeMap<String, Json>, k: &str, default: bool) -> CaseResult<bool> {
    if m.contains_key(k) {
        bool_of(m, k)
    } else {
        Ok(default)
    }
}

fn obj_field<'j>(m: &'j BTreeMap<String, Json>, k: &str) -> CaseResult<&'j BTreeMap<String, Json>> {
    obj(field(m, k)?)
}

fn hex_decode(s: &str) -> CaseResult<Vec<u8>> {
    if s.len() % 2 != 0 {
        return Err(format!("hex of odd length {}", s.len()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| format!("hex {:?}: {e}", &s[i..i + 2]))
        })
        .collect()
}

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn obj_of(pairs: Vec<(&str, Json)>) -> Json {
    Json::Obj(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn zero_ranges_json(z: &[ZeroRange]) -> Json {
    Json::Arr(
        z.iter()
            .map(|r| {
                obj_of(vec![
                    ("block", u(r.block)),
                    ("token_begin", u(r.token_begin)),
                    ("token_end", u(r.token_end)),
                ])
            })
            .collect(),
    )
}

fn cache_mode_name(m: MambaCacheMode) -> CaseResult<&'static str> {
    match m {
        MambaCacheMode::None => Ok("none"),
        MambaCacheMode::Align => Ok("align"),
        MambaCacheMode::All => Ok("all"),
        other => Err(format!("library reported unknown cache mode {other:?}")),
    }
}

const TRIM_KEYS: [&str; 13] = [
    "kind",
    "cache_mode",
    "local_blocks",
    "remote_blocks",
    "local_tokens_per_block",
    "remote_tokens_per_block",
    "remote_computed_tokens",
    "local_hit_tokens",
    "sliding_window",
    "local_first_block",
    "remote_first_block",
    "local_kernel_blocks_per_id",
    "remote_kernel_blocks_per_id",
];

/// A trim object (the `trim_group` input keys) -> GroupTrimInput.
fn trim_input(m: &BTreeMap<String, Json>) -> CaseResult<GroupTrimInput> {
    Ok(GroupTrimInput {
        kind: kind_of(m, "kind")?,
        cache_mode: cache_mode_of(str_or(m, "cache_mode", "none")?)?,
        local_blocks: u64s(field(m, "local_blocks")?)?,
        remote_blocks: u64s(field(m, "remote_blocks")?)?,
        local_tokens_per_block: u64_opt(m, "local_tokens_per_block")?,
        remote_tokens_per_block: u64_opt(m, "remote_tokens_per_block")?,
        remote_computed_tokens: u64_or(m, "remote_computed_tokens", 0)?,
        local_hit_tokens: u64_or(m, "local_hit_tokens", 0)?,
        sliding_window: u64_or(m, "sliding_window", 0)?,
        local_first_block: if m.contains_key("local_first_block") {
            Some(u64_of(m, "local_first_block")?)
        } else {
            None
        },
        remote_first_block: u64_or(m, "remote_first_block", 0)?,
        local_kernel_blocks_per_id: u64_opt(m, "local_kernel_blocks_per_id")?,
        remote_kernel_blocks_per_id: u64_opt(m, "remote_kernel_blocks_per_id")?,
    })
}

/// The `model` input: a preset name, or a pure-attention model described field by field
/// (docs/conformance.md).
fn model_of(m: &BTreeMap<String, Json>) -> CaseResult<Result<Model, Error>> {
    match field(m, "model")? {
        Json::Str(name) => Ok(Model::from_preset(name)),
        v => {
            let d = obj(v)?;
            check_keys(
                "model",
                d,
                &[
                    "name",
                    "num_kv_heads",
                    "head_size",
                    "head_size_v",
                    "use_mla",
                    "dtype_bytes",
                    "layer_pattern",
                    "mla_head_size",
                ],
            )?;
            let desc = ModelDesc {
                name: str_of(d, "name")?.to_owned(),
                num_kv_heads: u32_of(d, "num_kv_heads")?,
                head_size: u32_of(d, "head_size")?,
                head_size_v: u32_of(d, "head_size_v")?,
                use_mla: bool_of(d, "use_mla")?,
                dtype_bytes: u32_of(d, "dtype_bytes")?,
                layer_pattern: str_of(d, "layer_pattern")?.to_owned(),
                mla_head_size: u32_of(d, "mla_head_size")?,
                ..ModelDesc::default()
            };
            Ok(Model::new(&desc))
        }
    }
}

/// A `layout` object -> EngineLayout (defaults of pdkv_engine_layout_init).
fn layout_of(v: Option<&Json>) -> CaseResult<EngineLayout> {
    let mut l = EngineLayout::default();
    let Some(v) = v else { return Ok(l) };
    let m = obj(v)?;
    check_keys(
        "layout",
        m,
        &[
            "engine_id",
            "tp_rank",
            "num_logical_blocks",
            "num_regions",
            "base",
            "region_bases",
            "kv_layout",
            "prefix_caching",
            "region_kinds",
            "pp_size",
            "pp_rank",
            "layer_begin",
            "layer_end",
        ],
    )?;
    if let Some(Json::Arr(kinds)) = m.get("region_kinds") {
        for k in kinds {
            l.region_kinds.push(match k {
                Json::Str(s) if s == "attention" => RegionKind::Attention,
                Json::Str(s) if s == "mamba" => RegionKind::Mamba,
                Json::Str(s) if s == "mla" => RegionKind::Mla,
                other => return Err(format!("layout: unknown region kind {other:?}")),
            });
        }
    } else if m.contains_key("region_kinds") {
        return Err("layout: region_kinds must be an array".into());
    }
    if m.contains_key("engine_id") {
        l.engine_id = str_of(m, "engine_id")?.to_owned();
    }
    l.tp_rank = u32_or(m, "tp_rank", l.tp_rank)?;
    l.num_logical_blocks = u64_or(m, "num_logical_blocks", l.num_logical_blocks)?;
    l.num_regions = u32_or(m, "num_regions", l.num_regions)?;
    l.base = u64_or(m, "base", l.base)?;
    if let Some(b) = m.get("region_bases") {
        l.region_bases = u64s(b)?;
    }
    l.kv_layout = match str_or(m, "kv_layout", "HND")? {
        "HND" => KvLayout::Hnd,
        "NHD" => KvLayout::Nhd,
        other => return Err(format!("layout: unknown kv_layout {other:?}")),
    };
    l.prefix_caching = match int_or(m, "prefix_caching", -1)? {
        -1 => None, // absent: unset
        0 => Some(false),
        1 => Some(true),
        other => return Err(format!("layout: prefix_caching {other} is not 0/1")),
    };
    l.pp_size = u32_or(m, "pp_size", l.pp_size)?;
    l.pp_rank = u32_or(m, "pp_rank", l.pp_rank)?;
    l.layer_begin = u32_or(m, "layer_begin", l.layer_begin)?;
    l.layer_end = u32_opt(m, "layer_end")?;
    Ok(l)
}

/// The `metadata_roundtrip` / `metadata_decode` output of a metadata (without `hex`).
fn metadata_output(
    md: &EngineMetadata,
    encoded: &[u8],
) -> CaseResult<Result<Vec<(&'static str, Json)>, Error>> {
    let i = match md.info() {
        Ok(i) => i,
        Err(e) => return Ok(Err(e)),
    };
    let regions = match md.regions() {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let conv = match md.conv_projection_bytes() {
        Ok(c) => c.to_vec(),
        Err(e) => return Ok(Err(e)),
    };
    let payload_crc = match crc32c(encoded.get(16..).unwrap_or(&[])) {
        Ok(c) => c,
        Err(e) => return Ok(Err(e)),
    };
    let kv = match i.kv_layout {
        KvLayout::Hnd => "HND",
        KvLayout::Nhd => "NHD",
        other => return Err(format!("unknown kv layout {other:?}")),
    };
    let conv_layout = match i.conv_layout {
        ConvLayout::Ds => "DS",
        ConvLayout::Sd => "SD",
        other => return Err(format!("unknown conv layout {other:?}")),
    };
    let regions = regions
        .iter()
        .map(|r| {
            let kind = match r.kind {
                RegionKind::Attention => "attention",
                RegionKind::Mamba => "mamba",
                RegionKind::Mla => "mla",
                other => return Err(format!("unknown region kind {other:?}")),
            };
            Ok(obj_of(vec![
                ("base", u(r.base)),
                ("block_len", u(r.block_len)),
                ("num_blocks", u(r.num_blocks)),
                ("kind", Json::Str(kind.into())),
                ("layer", Json::Int(r.layer as i64)),
            ]))
        })
        .collect::<CaseResult<Vec<_>>>()?;
    Ok(Ok(vec![
        ("engine_id", Json::Str(i.engine_id)),
        ("tp_size", Json::Int(i.tp_size as i64)),
        ("tp_rank", Json::Int(i.tp_rank as i64)),
        ("kv_layout", Json::Str(kv.into())),
        ("conv_layout", Json::Str(conv_layout.into())),
        ("logical_block_size", Json::Int(i.logical_block_size as i64)),
        ("kernel_block_size", Json::Int(i.kernel_block_size as i64)),
        (
            "physical_blocks_per_logical",
            Json::Int(i.physical_blocks_per_logical as i64),
        ),
        ("num_kernel_blocks", u(i.num_kernel_blocks)),
        ("regions", Json::Arr(regions)),
        ("mamba_type", Json::Str(i.mamba_type.name().into())),
        ("conv_bytes", u(i.conv_bytes)),
        ("ssm_bytes", u(i.ssm_bytes)),
        ("conv_projection_bytes", u64_arr(&conv)),
        ("attention_bytes_per_token", u(i.attention_bytes_per_token)),
        ("use_mla", Json::Bool(i.use_mla)),
        ("total_kv_heads", Json::Int(i.total_kv_heads as i64)),
        ("prefix_caching", Json::Bool(i.prefix_caching)),
        (
            "cache_mode",
            Json::Str(cache_mode_name(i.cache_mode)?.into()),
        ),
        // 16 lower-case hex digits: the uint64 exceeds the int64 JSON subset.
        (
            "model_fingerprint",
            Json::Str(format!("{:016x}", i.model_fingerprint)),
        ),
        ("pp_size", Json::Int(i.pp_size as i64)),
        ("pp_rank", Json::Int(i.pp_rank as i64)),
        ("layer_begin", Json::Int(i.layer_begin as i64)),
        ("layer_end", Json::Int(i.layer_end as i64)),
        ("encoded_length", Json::Int(encoded.len() as i64)),
        ("payload_crc32c", Json::Int(payload_crc as i64)),
    ]))
}

/// `{model, engine, layout}` -> metadata (handshake_validate sides).
fn side_metadata(m: &BTreeMap<String, Json>) -> CaseResult<Result<EngineMetadata, Error>> {
    check_keys("side", m, &["model", "engine", "layout"])?;
    let model = match model_of(m)? {
        Ok(x) => x,
        Err(e) => return Ok(Err(e)),
    };
    let cfg = match engine(field(m, "engine")?)? {
        Ok(c) => c,
        Err(e) => return Ok(Err(e)),
    };
    Ok(EngineMetadata::from_model(
        &model,
        &cfg,
        &layout_of(m.get("layout"))?,
    ))
}

fn u(v: u64) -> Json {
    Json::Int(i64::try_from(v).expect("value fits i64"))
}

fn ranks(v: &[u32]) -> Json {
    Json::Arr(v.iter().map(|&r| Json::Int(r as i64)).collect())
}

fn out(pairs: Vec<(&str, Json)>) -> Outcome {
    Outcome::Output(Json::Obj(
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    ))
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
        "kv_cache_element_bits",
        "kv_cache_head_extra_bytes",
        "backend",
        "mamba_cache_mode",
        "conv_layout",
        "model_format",
        "kv_cache_format",
        "conv_state_format",
        "ssm_state_format",
    ];
    if let Some(k) = m.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("engine: unknown key {k:?}"));
    }
    let mut formats = [ElementFormat::Unknown; 4];
    for (slot, key) in formats.iter_mut().zip([
        "model_format",
        "kv_cache_format",
        "conv_state_format",
        "ssm_state_format",
    ]) {
        *slot = match ElementFormat::from_name(str_or(m, key, "auto")?) {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
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
    let mut c = EngineConfig::with_tp(u32_of(m, "tp_size")?)
        .num_speculative_tokens(u32_or(m, "num_speculative_tokens", 0)?)
        .kv_cache_head_extra_bytes(u32_or(m, "kv_cache_head_extra_bytes", 0)?)
        .backend(backend)
        .mamba_cache_mode(mode)
        .conv_layout(layout)
        .model_format(formats[0])
        .kv_cache_format(formats[1])
        .conv_state_format(formats[2])
        .ssm_state_format(formats[3]);
    c.kv_cache_dtype_bytes = u32_opt(m, "kv_cache_dtype_bytes")?;
    c.conv_state_dtype_bytes = u32_opt(m, "conv_state_dtype_bytes")?;
    c.ssm_state_dtype_bytes = u32_opt(m, "ssm_state_dtype_bytes")?;
    c.user_block_size = u32_opt(m, "user_block_size")?;
    c.user_mamba_block_size = u32_opt(m, "user_mamba_block_size")?;
    c.kv_cache_element_bits = u32_opt(m, "kv_cache_element_bits")?;
    Ok(Ok(c))
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
    let log_lines = g
        .log_lines()?
        .into_iter()
        .map(|l| Json::Str(l.to_owned()))
        .collect();
    let pairs: Vec<(&str, Json)> = vec![
        ("kv_heads_per_rank", Json::Int(i.kv_heads_per_rank as i64)),
        ("kv_head_bytes_per_token", u(i.kv_head_bytes_per_token)),
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
    Ok(Json::Obj(
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    ))
}

/// A region array (`{base, block_len, num_blocks}` objects) -> `Vec<Region>`.
fn regions_of(m: &BTreeMap<String, Json>, k: &str) -> CaseResult<Vec<Region>> {
    match field(m, k)? {
        Json::Arr(v) => v
            .iter()
            .map(|r| {
                let r = obj(r)?;
                check_keys(k, r, &["base", "block_len", "num_blocks"])?;
                Ok(Region {
                    base: u64_of(r, "base")?,
                    block_len: u64_of(r, "block_len")?,
                    num_blocks: u64_of(r, "num_blocks")?,
                })
            })
            .collect(),
        other => Err(format!("{k}: expected an array, got {other:?}")),
    }
}

/// `{addr, len}` array of a descriptor list, in list order.
fn descriptors_json(list: &DescriptorList) -> Result<Json, Error> {
    Ok(Json::Arr(
        list.items()?
            .iter()
            .map(|d| obj_of(vec![("addr", u(d.addr)), ("len", u(d.len))]))
            .collect(),
    ))
}

/// `{offset, size}` array of byte ranges.
fn ranges_json(r: &[ByteRange]) -> Json {
    Json::Arr(
        r.iter()
            .map(|x| obj_of(vec![("offset", u(x.offset)), ("size", u(x.size))]))
            .collect(),
    )
}

/// A `mapping` object with the `tp_mapping` input keys -> TpMapping (`pdkv_tp_mapping_new`).
fn mapping_of(m: &BTreeMap<String, Json>) -> CaseResult<Result<TpMapping, Error>> {
    check_keys(
        "mapping",
        m,
        &[
            "local_tp_size",
            "local_tp_rank",
            "remote_tp_size",
            "total_kv_heads",
            "use_mla",
            "has_mamba",
        ],
    )?;
    Ok(TpMapping::new(&TpMappingParams {
        local_tp_size: u32_of(m, "local_tp_size")?,
        local_tp_rank: u32_of(m, "local_tp_rank")?,
        remote_tp_size: u32_of(m, "remote_tp_size")?,
        total_kv_heads: u32_of(m, "total_kv_heads")?,
        use_mla: bool_of(m, "use_mla")?,
        has_mamba: bool_of(m, "has_mamba")?,
    }))
}

fn i32_of(m: &BTreeMap<String, Json>, k: &str) -> CaseResult<i32> {
    let v = int(m, k)?;
    i32::try_from(v).map_err(|_| format!("{k}: {v} does not fit i32"))
}

/// The geometry of a `{model, engine}` case.
fn geometry_of_case(input: &BTreeMap<String, Json>) -> CaseResult<Result<Geometry, Error>> {
    let model = match Model::from_preset(str_of(input, "model")?) {
        Ok(m) => m,
        Err(e) => return Ok(Err(e)),
    };
    let cfg = match engine(field(input, "engine")?)? {
        Ok(c) => c,
        Err(e) => return Ok(Err(e)),
    };
    Ok(Geometry::new(&model, &cfg))
}

/// The P and D geometries and the read list of a `mamba_reads`-shaped case (`model`,
/// `prefill`, `decode` engines, `decode_rank`, `rule`).
fn reads_of_case(
    input: &BTreeMap<String, Json>,
) -> CaseResult<Result<(Geometry, Geometry, MambaReadList), Error>> {
    macro_rules! lib_or_return {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(err) => return Ok(Err(err)),
            }
        };
    }
    let rule = match str_of(input, "rule")? {
        "pdkv" => MambaReadsRule::Pdkv,
        "vllm" => MambaReadsRule::Vllm,
        other => return Err(format!("unknown rule {other:?}")),
    };
    let model = lib_or_return!(Model::from_preset(str_of(input, "model")?));
    let p_cfg = lib_or_return!(engine(field(input, "prefill")?)?);
    let d_cfg = lib_or_return!(engine(field(input, "decode")?)?);
    let p = lib_or_return!(Geometry::new(&model, &p_cfg));
    let d = lib_or_return!(Geometry::new(&model, &d_cfg));
    let reads = lib_or_return!(MambaReadList::new(
        &p,
        &d,
        u32_of(input, "decode_rank")?,
        rule
    ));
    Ok(Ok((p, d, reads)))
}

/// The model keys of docs/conformance.md (describe + layer counts + fingerprint); `source` is
/// free text and not reported.
fn model_fields(m: &Model) -> Result<Json, Error> {
    let d = m.describe()?;
    let (na, nm) = m.layer_counts()?;
    let fp = m.fingerprint()?;
    Ok(obj_of(vec![
        ("name", Json::Str(d.name)),
        ("num_kv_heads", Json::Int(d.num_kv_heads as i64)),
        ("head_size", Json::Int(d.head_size as i64)),
        ("head_size_v", Json::Int(d.head_size_v as i64)),
        ("use_mla", Json::Bool(d.use_mla)),
        ("sliding_window", Json::Int(d.sliding_window as i64)),
        ("mamba_type", Json::Str(d.mamba_type.name().into())),
        ("mamba_num_heads", Json::Int(d.mamba_num_heads as i64)),
        ("mamba_head_dim", Json::Int(d.mamba_head_dim as i64)),
        ("mamba_d_state", Json::Int(d.mamba_d_state as i64)),
        ("mamba_n_groups", Json::Int(d.mamba_n_groups as i64)),
        ("mamba_d_inner", u(d.mamba_d_inner)),
        ("mamba_conv_kernel", Json::Int(d.mamba_conv_kernel as i64)),
        // The vectors write an unset optional field as 0.
        (
            "mamba_chunk_size",
            Json::Int(d.mamba_chunk_size.unwrap_or(0) as i64),
        ),
        (
            "mamba_conv_rows_include_spec",
            Json::Bool(d.mamba_conv_rows_include_spec),
        ),
        ("dtype_bytes", Json::Int(d.dtype_bytes as i64)),
        (
            "default_ssm_dtype_bytes",
            Json::Int(d.default_ssm_dtype_bytes.unwrap_or(0) as i64),
        ),
        ("layer_pattern", Json::Str(d.layer_pattern)),
        ("num_attention_layers", Json::Int(na as i64)),
        ("num_mamba_layers", Json::Int(nm as i64)),
        // 16 lower-case hex digits: the uint64 exceeds the int64 JSON subset.
        ("model_fingerprint", Json::Str(format!("{fp:016x}"))),
    ]))
}

/// A report's items as `{status, field}`; checks the optional `item_messages_contain` input
/// (parallel to the items, each an array of strings the item's message must contain; a
/// different length is a failure).
fn report_items(items: &[Incompatibility], input: &BTreeMap<String, Json>) -> CaseResult<Json> {
    if let Some(want) = input.get("item_messages_contain") {
        let Json::Arr(want) = want else {
            return Err("item_messages_contain must be an array".into());
        };
        if want.len() != items.len() {
            return Err(format!(
                "item_messages_contain has {} entries for {} items",
                want.len(),
                items.len()
            ));
        }
        for (k, (w, item)) in want.iter().zip(items).enumerate() {
            let Json::Arr(needles) = w else {
                return Err("item_messages_contain entries must be arrays".into());
            };
            for n in needles {
                let Json::Str(n) = n else {
                    return Err("item_messages_contain must hold strings".into());
                };
                if !item.message.contains(n.as_str()) {
                    return Err(format!(
                        "item {k} message {:?} does not contain {n:?}",
                        item.message
                    ));
                }
            }
        }
    }
    Ok(Json::Arr(
        items
            .iter()
            .map(|i| {
                obj_of(vec![
                    ("status", Json::Str(i.status.name().into())),
                    ("field", Json::Str(i.field.clone())),
                ])
            })
            .collect(),
    ))
}

/// Builds the P and D metadata and geometries of a `transfer_plan` / `transfer_plan_json` case,
/// a plan context with the mapping derived from the metadata, compiles the plan and re-validates
/// it (`Err`: a malformed case; `Ok(Err)`: the library's error).
fn compile_plan(input: &BTreeMap<String, Json>) -> CaseResult<Result<TransferPlan, Error>> {
    macro_rules! lib_or_return {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(err) => return Ok(Err(err)),
            }
        };
    }
    // The model: a preset name (`model`) or config.json text (`hf_config`), exactly one.
    let model = match (input.contains_key("model"), input.contains_key("hf_config")) {
        (true, false) => lib_or_return!(model_of(input)?),
        (false, true) => lib_or_return!(Model::from_hf_config_json(
            str_of(input, "hf_config")?,
            None
        )),
        _ => return Err("transfer_plan needs exactly one of model / hf_config".into()),
    };
    let (pre, dec) = (obj_field(input, "prefill")?, obj_field(input, "decode")?);
    check_keys("prefill", pre, &["engine", "layout", "ranks"])?;
    check_keys("decode", dec, &["engine", "layout"])?;
    let p_cfg = lib_or_return!(engine(field(pre, "engine")?)?);
    let d_cfg = lib_or_return!(engine(field(dec, "engine")?)?);
    let d_tp_rank = u32_of(input, "decode_rank")?;
    let p_layout = layout_of(pre.get("layout"))?;
    let d_layout = EngineLayout {
        tp_rank: d_tp_rank,
        ..layout_of(dec.get("layout"))?
    };
    // Optional `prefill.ranks`: the P ranks whose metadata the context receives, in that order
    // (default: every rank 0..P_TP-1).
    let p_ranks: Vec<u32> = match pre.get("ranks") {
        Some(v) => u64s(v)?
            .into_iter()
            .map(|x| u32::try_from(x).map_err(|_| format!("prefill.ranks: {x} does not fit u32")))
            .collect::<CaseResult<Vec<_>>>()?,
        None => (0..p_cfg.tp_size).collect(),
    };
    let mut p_meta = Vec::new();
    for r in p_ranks {
        let l = EngineLayout {
            tp_rank: r,
            ..p_layout.clone()
        };
        p_meta.push(lib_or_return!(EngineMetadata::from_model(
            &model, &p_cfg, &l
        )));
    }
    let d_meta = lib_or_return!(EngineMetadata::from_model(&model, &d_cfg, &d_layout));
    let pg = lib_or_return!(Geometry::new(&model, &p_cfg));
    let dg = lib_or_return!(Geometry::new(&model, &d_cfg));
    let groups = match field(input, "groups")? {
        Json::Arr(v) => v
            .iter()
            .map(|g| {
                let g = obj(g)?;
                let mut allowed = TRIM_KEYS.to_vec();
                allowed.push("regions");
                allowed.push("layers");
                check_keys("groups[]", g, &allowed)?;
                let u32s = |k: &str| -> CaseResult<Vec<u32>> {
                    match g.get(k) {
                        Some(r) => u64s(r)?
                            .into_iter()
                            .map(|x| {
                                u32::try_from(x).map_err(|_| format!("{k}: {x} does not fit u32"))
                            })
                            .collect(),
                        None => Ok(Vec::new()),
                    }
                };
                Ok(PlanGroup {
                    trim: trim_input(g)?,
                    regions: u32s("regions")?,
                    layers: u32s("layers")?,
                })
            })
            .collect::<CaseResult<Vec<_>>>()?,
        other => return Err(format!("groups: expected an array, got {other:?}")),
    };
    let refs: Vec<&EngineMetadata> = p_meta.iter().collect();
    let permute = bool_or(input, "permute_on_receive", false)?;
    let ctx = lib_or_return!(PlanContext::new(
        &PlanContextParams::new(&d_meta, &refs)
            .geometries(&dg, &pg)
            .permute_on_receive(permute)
    ));
    let plan = lib_or_return!(TransferPlan::compile(&ctx, &groups));
    lib_or_return!(plan.validate(&ctx, &groups));
    Ok(Ok(plan))
}

/// The vectors' spelling of a KV layout.
/// `engine_plan`: D and every P rank described as [`Engine`]s; the P ranks' metadata from
/// [`Engine::metadata`], the context from [`Engine::plan_context`], the plan from
/// [`Engine::plan_request`] with the request's block tables (`Err`: a malformed case; `Ok(Err)`:
/// the library's error).
fn engine_plan(input: &BTreeMap<String, Json>) -> CaseResult<Result<Outcome, Error>> {
    macro_rules! lib_or_return {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(err) => return Ok(Err(err)),
            }
        };
    }
    let model = match (input.contains_key("model"), input.contains_key("hf_config")) {
        (true, false) => lib_or_return!(model_of(input)?),
        (false, true) => lib_or_return!(Model::from_hf_config_json(
            str_of(input, "hf_config")?,
            None
        )),
        _ => return Err("engine_plan needs exactly one of model / hf_config".into()),
    };
    let side = |key: &str| -> CaseResult<(Result<EngineConfig, Error>, String, u64)> {
        let s = obj_field(input, key)?;
        check_keys(key, s, &["engine", "layout"])?;
        let l = obj_field(s, "layout")?;
        check_keys("layout", l, &["engine_id", "num_logical_blocks"])?;
        Ok((
            engine(field(s, "engine")?)?,
            str_of(l, "engine_id")?.to_owned(),
            u64_of(l, "num_logical_blocks")?,
        ))
    };
    let (p_cfg, p_id, p_blocks) = side("prefill")?;
    let (d_cfg, d_id, d_blocks) = side("decode")?;
    let d_tp_rank = u32_of(input, "decode_rank")?;
    let rq = obj_field(input, "request")?;
    check_keys(
        "request",
        rq,
        &["groups", "num_prompt_tokens", "num_local_computed_tokens"],
    )?;
    let Json::Arr(gs) = field(rq, "groups")? else {
        return Err("request.groups must be an array".into());
    };
    let mut ids = Vec::new();
    for g in gs {
        let g = obj(g)?;
        check_keys("request.groups[]", g, &["local", "remote"])?;
        ids.push((u64s(field(g, "local")?)?, u64s(field(g, "remote")?)?));
    }
    let (prompt, hit) = (
        u64_of(rq, "num_prompt_tokens")?,
        u64_of(rq, "num_local_computed_tokens")?,
    );
    let (p_cfg, d_cfg) = (lib_or_return!(p_cfg), lib_or_return!(d_cfg));
    let d = lib_or_return!(Engine::new(
        &model,
        &d_cfg,
        &EngineOptions::new(&d_id, d_tp_rank, d_blocks)
    ));
    let mut remote = Vec::new();
    for r in 0..p_cfg.tp_size {
        let p = lib_or_return!(Engine::new(
            &model,
            &p_cfg,
            &EngineOptions::new(&p_id, r, p_blocks)
        ));
        remote.push(lib_or_return!(p.metadata()));
    }
    let refs: Vec<&EngineMetadata> = remote.iter().collect();
    let ctx = lib_or_return!(d.plan_context(&refs, &p_cfg, false));
    let groups: Vec<RequestGroup<'_>> = ids
        .iter()
        .map(|(l, r)| RequestGroup {
            local_block_ids: l,
            remote_block_ids: r,
        })
        .collect();
    let plan = lib_or_return!(d.plan_request(&ctx, &groups, prompt, hit));
    let text = lib_or_return!(plan.to_json_string());
    // plan_request_into plans the vector's request to the same bytes.
    let mut into = TransferPlan::new_empty().expect("an empty plan");
    d.plan_request_into(&ctx, &groups, prompt, hit, &mut into)
        .expect("plan_request_into refused what plan_request planned");
    assert_eq!(
        into.to_json_string().expect("JSON"),
        text,
        "plan_request_into"
    );
    let info = lib_or_return!(d.info());
    let gj = lib_or_return!(d.groups())
        .iter()
        .map(|g| {
            obj_of(vec![
                ("kind", Json::Str(g.kind.name().into())),
                (
                    "layers",
                    Json::Arr(g.layers.iter().map(|&l| Json::Int(i64::from(l))).collect()),
                ),
            ])
        })
        .collect();
    Ok(Ok(out(vec![
        ("groups", Json::Arr(gj)),
        ("num_regions", Json::Int(i64::from(info.num_regions))),
        (
            "lines",
            Json::Arr(text.split('\n').map(|l| Json::Str(l.to_owned())).collect()),
        ),
    ])))
}

fn layout_name(l: KvLayout) -> CaseResult<&'static str> {
    match l {
        KvLayout::Hnd => Ok("HND"),
        KvLayout::Nhd => Ok("NHD"),
        other => Err(format!("unknown kv layout {other:?}")),
    }
}

// The plain functions' ops (named after the C function; generated from the header).
include!("common/plain_ops.rs");

/// Executes one op. `Err` is a malformed case or an unknown op (a runner failure).
fn execute(op: &str, input: &BTreeMap<String, Json>) -> CaseResult<Outcome> {
    if let Some(outcome) = plain_op(op, input) {
        return outcome;
    }
    let allowed = input_keys(op)
        .ok_or_else(|| format!("unknown op {op:?}: this runner cannot execute it"))?;
    check_keys("input", input, allowed)?;
    Ok(match op {
        "tp_mapping" => {
            let m = lib!(TpMapping::new(&TpMappingParams {
                local_tp_size: u32_of(input, "local_tp_size")?,
                local_tp_rank: u32_of(input, "local_tp_rank")?,
                remote_tp_size: u32_of(input, "remote_tp_size")?,
                total_kv_heads: u32_of(input, "total_kv_heads")?,
                use_mla: bool_of(input, "use_mla")?,
                has_mamba: bool_of(input, "has_mamba")?,
            }));
            let i = lib!(m.info());
            out(vec![
                ("tp_ratio", Json::Int(i.tp_ratio as i64)),
                (
                    "handshake_targets",
                    ranks(lib!(m.ranks(TpList::HandshakeTargets))),
                ),
                (
                    "attention_source_ranks",
                    ranks(lib!(m.ranks(TpList::AttentionSources))),
                ),
                (
                    "mamba_source_ranks",
                    ranks(lib!(m.ranks(TpList::MambaSources))),
                ),
                ("all_source_ranks", ranks(lib!(m.ranks(TpList::AllSources)))),
                (
                    "attention_slots",
                    ranks(lib!(m.ranks(TpList::AttentionSlots))),
                ),
                ("notify_ranks", ranks(lib!(m.ranks(TpList::NotifyTargets)))),
                ("rank_offset_factor", Json::Int(i.rank_offset_factor as i64)),
                ("local_replicated", Json::Bool(i.local_replicated)),
                ("remote_replicated", Json::Bool(i.remote_replicated)),
                (
                    "local_physical_heads",
                    Json::Int(i.local_physical_heads as i64),
                ),
                (
                    "remote_physical_heads",
                    Json::Int(i.remote_physical_heads as i64),
                ),
            ])
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
            let list = lib!(MambaReadList::new(
                &p,
                &d,
                u32_of(input, "decode_rank")?,
                rule
            ));
            let reads = lib!(list.items())
                .into_iter()
                .map(|r| {
                    Json::Obj(BTreeMap::from([
                        ("p_tp_rank".to_owned(), Json::Int(r.p_tp_rank as i64)),
                        ("part".to_owned(), Json::Str(r.part.to_owned())),
                        ("remote_offset".to_owned(), u(r.remote_offset)),
                        ("local_offset".to_owned(), u(r.local_offset)),
                        ("length".to_owned(), u(r.length)),
                    ]))
                })
                .collect();
            out(vec![
                ("reads", Json::Arr(reads)),
                ("source_ranks", ranks(lib!(list.source_ranks()))),
            ])
        }
        "clip_exchange_blocks" => {
            let params = ExchangeClipParams {
                kind: kind_of(input, "kind")?,
                hma_enabled: if input.contains_key("hma_enabled") {
                    bool_of(input, "hma_enabled")?
                } else {
                    true
                },
                sliding_window: u64_or(input, "sliding_window", 0)?,
                block_size: u64_or(input, "block_size", 0)?,
                cache_mode: cache_mode_of(str_or(input, "cache_mode", "none")?)?,
                num_speculative_blocks: u64_or(input, "num_speculative_blocks", 0)?,
            };
            let ids = lib!(clip_exchange_blocks(&u64s(field(input, "ids")?)?, &params));
            out(vec![("ids", u64_arr(&ids))])
        }
        "descriptor_ids" => {
            let groups = match field(input, "groups")? {
                Json::Arr(v) => v
                    .iter()
                    .map(|g| {
                        let g = obj(g)?;
                        check_keys("groups[]", g, &["kind", "ids"])?;
                        Ok(GroupBlockIds {
                            kind: kind_of(g, "kind")?,
                            ids: u64s(field(g, "ids")?)?,
                        })
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
                        Ok(OffloadLayer {
                            tensor_bytes: u64_of(l, "tensor_bytes")?,
                            page_bytes: u64_of(l, "page_bytes")?,
                        })
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
            out(vec![
                ("num_blocks", u(g.num_blocks)),
                ("hash_blocks_per_block", u(g.hash_blocks_per_block)),
            ])
        }
        "trim_group" => {
            let t = lib!(GroupTrim::new(&trim_input(input)?));
            let (kind, tokens) = lib!(t.summary());
            let runs = lib!(t.runs())
                .iter()
                .map(|r| {
                    obj_of(vec![
                        ("local_block", u(r.local_block)),
                        ("local_token_begin", u(r.local_token_begin)),
                        ("remote_block", u(r.remote_block)),
                        ("remote_token_begin", u(r.remote_token_begin)),
                        ("num_tokens", u(r.num_tokens)),
                    ])
                })
                .collect();
            let states = lib!(t.states())
                .iter()
                .map(|p| {
                    obj_of(vec![
                        ("local_block", u(p.local_block)),
                        ("remote_block", u(p.remote_block)),
                        ("tokens", u(p.tokens)),
                    ])
                })
                .collect();
            out(vec![
                ("kind", Json::Str(kind.name().into())),
                ("transferred_tokens", u(tokens)),
                ("runs", Json::Arr(runs)),
                ("states", Json::Arr(states)),
                ("zero_ranges", zero_ranges_json(lib!(t.zero_ranges()))),
                ("unfilled_states", u64_arr(lib!(t.unfilled_states()))),
            ])
        }
        "mamba_aligned_split_v0604" => {
            let n = lib!(mamba_aligned_split_v0604(&AlignedSplitV0604Input {
                num_computed_tokens: u64_or(input, "num_computed_tokens", 0)?,
                num_new_local_computed_tokens: u64_or(input, "num_new_local_computed_tokens", 0)?,
                num_external_computed_tokens: u64_or(input, "num_external_computed_tokens", 0)?,
                num_new_tokens: u64_or(input, "num_new_tokens", 0)?,
                num_prompt_tokens: u64_or(input, "num_prompt_tokens", 0)?,
                num_tokens: u64_or(input, "num_tokens", 0)?,
                block_size: u64_or(input, "block_size", 0)?,
                use_eagle: bool_or(input, "use_eagle", false)?,
                load_kv_async: bool_or(input, "load_kv_async", false)?,
            }));
            out(vec![("num_new_tokens", u(n))])
        }
        "mamba_aligned_split" => {
            let n = lib!(mamba_aligned_split(&AlignedSplitInput {
                start: u64_or(input, "start", 0)?,
                num_new_tokens: u64_or(input, "num_new_tokens", 0)?,
                num_prompt_tokens: u64_or(input, "num_prompt_tokens", 0)?,
                num_tokens: u64_or(input, "num_tokens", 0)?,
                block_size: u64_or(input, "block_size", 0)?,
                floor_unit: u64_opt(input, "floor_unit")?,
                tail_hash_block_size: u64_opt(input, "tail_hash_block_size")?,
                shared_prefix_tokens: u64_or(input, "shared_prefix_tokens", 0)?,
                max_num_scheduled_tokens: u64_opt(input, "max_num_scheduled_tokens")?,
                long_prefill_token_threshold: u64_opt(input, "long_prefill_token_threshold")?,
                use_eagle: bool_or(input, "use_eagle", false)?,
                load_kv_async: bool_or(input, "load_kv_async", false)?,
                defer_oversized_block: bool_or(input, "defer_oversized_block", false)?,
            }));
            out(vec![("num_new_tokens", u(n))])
        }
        "truncate_for_remote_decode" => {
            let r = lib!(truncate_for_remote_decode(
                &RemoteDecodePrefill {
                    num_prompt_tokens: u64_of(input, "num_prompt_tokens")?,
                    max_tokens: u64_of(input, "max_tokens")?,
                    truncated: bool_or(input, "truncated", false)?,
                },
                bool_of(input, "has_mamba")?
            ));
            out(vec![
                ("num_prompt_tokens", u(r.num_prompt_tokens)),
                ("max_tokens", u(r.max_tokens)),
                ("truncated", Json::Bool(r.truncated)),
            ])
        }
        "receive_zero_ranges" => {
            let z = lib!(receive_zero_ranges(
                &u64s(field(input, "local_blocks")?)?,
                u64_of(input, "tokens_per_block")?,
                u64_of(input, "block_size_ratio")?,
                u64_of(input, "remote_kernel_len")?
            ));
            out(vec![("zero_ranges", zero_ranges_json(&z))])
        }
        "uncovered_token_ranges" => {
            let written = match field(input, "written")? {
                Json::Arr(v) => v
                    .iter()
                    .map(|w| {
                        let w = obj(w)?;
                        check_keys("written[]", w, &["begin", "end"])?;
                        Ok(TokenInterval {
                            begin: u64_of(w, "begin")?,
                            end: u64_of(w, "end")?,
                        })
                    })
                    .collect::<CaseResult<Vec<_>>>()?,
                other => return Err(format!("written: expected an array, got {other:?}")),
            };
            let z = lib!(uncovered_token_ranges(
                &u64s(field(input, "local_blocks")?)?,
                u64_of(input, "first_block_index")?,
                u64_of(input, "tokens_per_block")?,
                u64_of(input, "held_tokens")?,
                &written
            ));
            out(vec![("zero_ranges", zero_ranges_json(&z))])
        }
        "mamba_descriptor_ids" => {
            let ids = lib!(mamba_descriptor_ids(
                &u64s(field(input, "ids")?)?,
                u64_of(input, "num_logical_blocks")?,
                u64_of(input, "num_regions")?,
                u64_of(input, "descs_per_region")?,
                u64_of(input, "first_id")?
            ));
            out(vec![("ids", u64_arr(&ids))])
        }
        "crc32c" => {
            let c = lib!(crc32c(&hex_decode(str_of(input, "hex")?)?));
            out(vec![("crc32c", Json::Int(c as i64))])
        }
        "metadata_roundtrip" => {
            let model = lib!(model_of(input)?);
            let cfg = lib!(engine(field(input, "engine")?)?);
            let md = lib!(EngineMetadata::from_model(
                &model,
                &cfg,
                &layout_of(input.get("layout"))?
            ));
            let bytes = lib!(md.encode_bytes());
            if lib!(md.encode()) != bytes {
                return Err("encode (caller buffer) and encode_bytes disagree".into());
            }
            let back = lib!(EngineMetadata::decode(&bytes));
            if back != md {
                return Err("decoded metadata is not equal to the original".into());
            }
            let mut pairs = lib!(metadata_output(&back, &bytes)?);
            // The fields of the built metadata equal the decoded ones (as the C++ runner checks).
            if lib!(metadata_output(&md, &bytes)?) != pairs {
                return Err("metadata fields differ before and after the round trip".into());
            }
            pairs.push(("hex", Json::Str(hex_encode(&bytes))));
            out(pairs)
        }
        "metadata_decode" => {
            let bytes = hex_decode(str_of(input, "hex")?)?;
            let md = lib!(EngineMetadata::decode(&bytes));
            out(lib!(metadata_output(&md, &bytes)?))
        }
        "handshake_validate" => {
            let local = lib!(side_metadata(obj_field(input, "local")?)?);
            let remote = lib!(side_metadata(obj_field(input, "remote")?)?);
            let report = lib!(handshake_validate(&local, &remote));
            let items = report_items(&report, input)?;
            let compatible = match handshake_require_compatible(&local, &remote) {
                Ok(()) => true,
                Err(e) if e.status() == Status::Incompatible => false,
                Err(e) => {
                    return Err(format!(
                        "handshake_require_compatible: unexpected error {e}"
                    ))
                }
            };
            if compatible != report.is_empty() {
                return Err(format!("handshake_require_compatible ({compatible}) disagrees with a report of {} items", report.len()));
            }
            out(vec![
                ("items", items),
                ("compatible", Json::Bool(compatible)),
            ])
        }
        "transfer_plan" => {
            let plan = lib!(compile_plan(input)?);
            let i = lib!(plan.info());
            let mut reads = Vec::new();
            let mut rank_bytes = Vec::new();
            for p in 0..i.p_tp_size {
                let (r, bytes) = lib!(plan.rank_reads(p));
                if r.iter().map(|x| x.length).sum::<u64>() != bytes {
                    return Err(format!(
                        "rank_reads({p}): bytes {bytes} differ from the sum of lengths"
                    ));
                }
                let mut r = r.to_vec();
                r.sort_by_key(|x| (x.local_region, x.local_offset));
                reads.push(Json::Arr(
                    r.iter()
                        .map(|x| {
                            obj_of(vec![
                                ("local_region", Json::Int(x.local_region as i64)),
                                ("local_offset", u(x.local_offset)),
                                ("remote_region", Json::Int(x.remote_region as i64)),
                                ("remote_offset", u(x.remote_offset)),
                                ("length", u(x.length)),
                            ])
                        })
                        .collect(),
                ));
                rank_bytes.push(u(bytes));
            }
            if rank_bytes
                .iter()
                .map(|b| if let Json::Int(b) = b { *b } else { 0 })
                .sum::<i64>()
                != i.bytes as i64
            {
                return Err(format!(
                    "plan bytes {} differ from the per-rank sums",
                    i.bytes
                ));
            }
            let mut zero_groups = Vec::new();
            for g in 0..i.num_groups {
                let z = lib!(plan.group_zero(g));
                zero_groups.push(obj_of(vec![
                    ("kind", Json::Str(z.kind.name().into())),
                    ("regions", ranks(z.regions)),
                    ("zero_ranges", zero_ranges_json(z.zero)),
                    ("unfilled_states", u64_arr(z.unfilled_states)),
                    ("permute_blocks", u64_arr(z.permute_blocks)),
                    ("permute_regions", ranks(z.permute_regions)),
                ]));
            }
            let (read_ranks, notify_ranks) = (lib!(plan.read_ranks()), lib!(plan.notify_ranks()));
            if read_ranks.len() != i.num_read_ranks || notify_ranks.len() != i.num_notify_ranks {
                return Err("plan info counts disagree with the rank lists".into());
            }
            out(vec![
                ("d_tp_size", Json::Int(i.d_tp_size as i64)),
                ("p_tp_size", Json::Int(i.p_tp_size as i64)),
                ("read_ranks", ranks(read_ranks)),
                ("notify_ranks", ranks(notify_ranks)),
                (
                    "notifications_per_p_rank",
                    Json::Int(i.notifications_per_p_rank as i64),
                ),
                ("reads", Json::Arr(reads)),
                ("rank_bytes", Json::Arr(rank_bytes)),
                ("groups", Json::Arr(zero_groups)),
                ("pieces_before_coalescing", u(i.pieces_before_coalescing)),
                ("pieces_after_coalescing", u(i.pieces_after_coalescing)),
                ("bytes", u(i.bytes)),
                ("attention_bytes", u(i.attention_bytes)),
                ("mamba_bytes", u(i.mamba_bytes)),
                ("empty", Json::Bool(i.empty)),
                ("d_pp_size", Json::Int(i.d_pp_size as i64)),
                ("d_pp_rank", Json::Int(i.d_pp_rank as i64)),
                ("p_pp_size", Json::Int(i.p_pp_size as i64)),
                ("p_pp_rank", Json::Int(i.p_pp_rank as i64)),
                ("layer_begin", Json::Int(i.layer_begin as i64)),
                ("layer_end", Json::Int(i.layer_end as i64)),
                (
                    "permute",
                    obj_of(vec![
                        ("from", Json::Str(layout_name(i.permute.from)?.into())),
                        ("to", Json::Str(layout_name(i.permute.to)?.into())),
                        ("heads", u(i.permute.heads)),
                        ("tokens", u(i.permute.tokens)),
                        ("head_bytes", u(i.permute.head_bytes)),
                    ]),
                ),
            ])
        }
        "permute_kv_block" => {
            let mut b = hex_decode(str_of(input, "hex")?)?;
            let layout = |k: &str| -> CaseResult<KvLayout> {
                match str_of(input, k)? {
                    "HND" => Ok(KvLayout::Hnd),
                    "NHD" => Ok(KvLayout::Nhd),
                    other => Err(format!("{k}: unknown layout {other:?}")),
                }
            };
            lib!(permute_kv_block(
                &mut b,
                layout("from")?,
                layout("to")?,
                u64_of(input, "heads")?,
                u64_of(input, "tokens")?,
                u64_of(input, "head_bytes")?
            ));
            out(vec![("hex", Json::Str(hex_encode(&b)))])
        }
        "pipeline_stage_pairs" => {
            let model = lib!(model_of(input)?);
            let (pre, dec) = (obj_field(input, "prefill")?, obj_field(input, "decode")?);
            check_keys("prefill", pre, &["engine", "stages"])?;
            check_keys("decode", dec, &["engine", "stages"])?;
            let p_cfg = lib!(engine(field(pre, "engine")?)?);
            let d_cfg = lib!(engine(field(dec, "engine")?)?);
            let stages = |side: &BTreeMap<String, Json>,
                          cfg: &EngineConfig|
             -> CaseResult<Result<Vec<EngineMetadata>, Error>> {
                let Json::Arr(list) = field(side, "stages")? else {
                    return Err("stages: expected an array".into());
                };
                let mut out = Vec::new();
                for l in list {
                    match EngineMetadata::from_model(&model, cfg, &layout_of(Some(l))?) {
                        Ok(m) => out.push(m),
                        Err(e) => return Ok(Err(e)),
                    }
                }
                Ok(Ok(out))
            };
            let p = lib!(stages(pre, &p_cfg)?);
            let d = lib!(stages(dec, &d_cfg)?);
            let (pr, dr): (Vec<&EngineMetadata>, Vec<&EngineMetadata>) =
                (p.iter().collect(), d.iter().collect());
            let pairs = lib!(pipeline_stage_pairs(&pr, &dr));
            let p_pp = lib!(p[0].info()).pp_size;
            let mut notes = Vec::new();
            for s in 0..p_pp {
                notes.push(Json::Int(lib!(pipeline_notifications_expected(
                    &pairs,
                    s,
                    p_cfg.tp_size,
                    d_cfg.tp_size
                )) as i64));
            }
            out(vec![
                (
                    "pairs",
                    Json::Arr(
                        pairs
                            .iter()
                            .map(|x| {
                                obj_of(vec![
                                    ("p_pp_rank", Json::Int(x.p_pp_rank as i64)),
                                    ("d_pp_rank", Json::Int(x.d_pp_rank as i64)),
                                    ("layer_begin", Json::Int(x.layer_begin as i64)),
                                    ("layer_end", Json::Int(x.layer_end as i64)),
                                ])
                            })
                            .collect(),
                    ),
                ),
                ("notifications", Json::Arr(notes)),
            ])
        }
        "transfer_plan_json" => {
            let plan = lib!(compile_plan(input)?);
            let text = lib!(plan.to_json_string());
            // The caller-buffer form must give the same text.
            if lib!(plan.to_json()) != text {
                return Err("to_json (caller buffer) and to_json_string disagree".into());
            }
            out(vec![(
                "lines",
                Json::Arr(text.split('\n').map(|l| Json::Str(l.to_owned())).collect()),
            )])
        }
        "engine_plan" => lib!(engine_plan(input)?),
        "attention_local_descriptors" => {
            let list = lib!(attention_local_descriptors(
                &regions_of(input, "regions")?,
                u32_of(input, "block_size_ratio")?
            ));
            out(vec![("descriptors", lib!(descriptors_json(&list)))])
        }
        "attention_remote_descriptors" => {
            let (local, remote) = (
                regions_of(input, "local_regions")?,
                regions_of(input, "remote_regions")?,
            );
            let mapping = lib!(mapping_of(obj_field(input, "mapping")?)?);
            let list = lib!(attention_remote_descriptors(
                &local,
                &remote,
                &mapping,
                u32_of(input, "block_size_ratio")?
            ));
            out(vec![("descriptors", lib!(descriptors_json(&list)))])
        }
        "attention_split_descriptors" => {
            let regions = regions_of(input, "regions")?;
            let mapping = lib!(mapping_of(obj_field(input, "mapping")?)?);
            let bsr = u32_of(input, "block_size_ratio")?;
            let local = lib!(attention_local_descriptors(&regions, bsr));
            let list = lib!(attention_split_descriptors(
                &local,
                &mapping,
                bsr,
                u32_of(input, "p_tp_rank")?
            ));
            out(vec![("descriptors", lib!(descriptors_json(&list)))])
        }
        "mamba_local_descriptors" => {
            let regions = regions_of(input, "regions")?;
            let ppl = u64_of(input, "ppl")?;
            let g = lib!(geometry_of_case(input)?);
            let list = lib!(mamba_local_descriptors(&regions, ppl, &g));
            out(vec![("descriptors", lib!(descriptors_json(&list)))])
        }
        "mamba_remote_descriptors" => {
            let (regions, ppl, p_tp_rank) = (
                regions_of(input, "p_regions")?,
                u64_of(input, "p_ppl")?,
                u32_of(input, "p_tp_rank")?,
            );
            let (p, _d, reads) = lib!(reads_of_case(input)?);
            let list = lib!(mamba_remote_descriptors(
                &regions, ppl, &p, &reads, p_tp_rank
            ));
            out(vec![("descriptors", lib!(descriptors_json(&list)))])
        }
        "mamba_local_split_descriptors" => {
            let (regions, ppl, p_tp_rank) = (
                regions_of(input, "d_regions")?,
                u64_of(input, "d_ppl")?,
                u32_of(input, "p_tp_rank")?,
            );
            let (_p, d, reads) = lib!(reads_of_case(input)?);
            let list = lib!(mamba_local_split_descriptors(
                &regions, ppl, &d, &reads, p_tp_rank
            ));
            out(vec![("descriptors", lib!(descriptors_json(&list)))])
        }
        "mamba_local_conv_offsets" => {
            let g = lib!(geometry_of_case(input)?);
            out(vec![(
                "ranges",
                ranges_json(&lib!(g.mamba_local_conv_offsets())),
            )])
        }
        "mamba_remote_conv_offsets" => {
            let (rank, ratio) = (u32_of(input, "local_tp_rank")?, i32_of(input, "tp_ratio")?);
            let g = lib!(geometry_of_case(input)?);
            out(vec![(
                "ranges",
                ranges_json(&lib!(g.mamba_remote_conv_offsets(rank, ratio))),
            )])
        }
        "mamba_ssm_read_range" => {
            let (rc, rs) = (
                u64_of(input, "remote_conv_bytes")?,
                u64_of(input, "remote_ssm_bytes")?,
            );
            let (rank, ratio) = (u32_of(input, "local_tp_rank")?, i32_of(input, "tp_ratio")?);
            let g = lib!(geometry_of_case(input)?);
            let r = lib!(g.mamba_ssm_read_range(rc, rs, rank, ratio));
            out(vec![("offset", u(r.offset)), ("size", u(r.size))])
        }
        "model_preset" => {
            let m = lib!(Model::from_preset(str_of(input, "model")?));
            Outcome::Output(lib!(model_fields(&m)))
        }
        "model_hf_config" => {
            let name = if input.contains_key("name") {
                Some(str_of(input, "name")?)
            } else {
                None
            };
            let m = lib!(Model::from_hf_config_json(str_of(input, "json")?, name));
            Outcome::Output(lib!(model_fields(&m)))
        }
        "handshake_validate_engine_ranks" => {
            let entries = match field(input, "ranks")? {
                Json::Arr(v) => v,
                other => return Err(format!("ranks: expected an array, got {other:?}")),
            };
            let mut ranks = Vec::new();
            for r in entries {
                ranks.push(lib!(side_metadata(obj(r)?)?));
            }
            let refs: Vec<&EngineMetadata> = ranks.iter().collect();
            let items = report_items(&lib!(handshake_validate_engine_ranks(&refs)), input)?;
            out(vec![("items", items)])
        }
        other => {
            return Err(format!(
                "unknown op {other:?}: this runner cannot execute it"
            ))
        }
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
                return Some(format!(
                    "{path}: expected {} elements, got {} ({a:?})",
                    e.len(),
                    a.len()
                ));
            }
            e.iter()
                .zip(a)
                .enumerate()
                .find_map(|(i, (ev, av))| compare(&format!("{path}[{i}]"), ev, av))
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
        (Some(_), Some(_), _) | (None, None, _) => {
            Err("needs exactly one of output / error".into())
        }
        (Some(expected), None, Outcome::Output(actual)) => {
            obj(expected)?;
            compare("output", expected, &actual).map_or(Ok(()), Err)
        }
        (Some(_), None, Outcome::Failed(err)) => Err(format!("expected output, got error {err}")),
        (None, Some(_), Outcome::Output(actual)) => {
            Err(format!("expected an error, got output {actual:?}"))
        }
        (None, Some(expected), Outcome::Failed(err)) => {
            let e = obj(expected)?;
            let status = str_of(e, "status")?;
            if err.status().name() != status {
                return Err(format!("expected status {status}, got {err}"));
            }
            let needles = match field(e, "message_contains")? {
                Json::Arr(v) => v,
                other => {
                    return Err(format!(
                        "message_contains: expected an array, got {other:?}"
                    ))
                }
            };
            for n in needles {
                let Json::Str(n) = n else {
                    return Err(format!("message_contains: non-string {n:?}"));
                };
                if !err.message().contains(n.as_str()) {
                    return Err(format!(
                        "message {:?} does not contain {n:?}",
                        err.message()
                    ));
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
        assert_eq!(
            doc.get("format"),
            Some(&Json::Int(1)),
            "{name}: unsupported format"
        );
        let Some(Json::Arr(cases)) = doc.get("cases") else {
            panic!("{name}: no cases array")
        };
        assert!(!cases.is_empty(), "{name}: empty cases");
        let mut passed = 0usize;
        for (i, case) in cases.iter().enumerate() {
            total += 1;
            match run_case(case) {
                Ok(()) => passed += 1,
                Err(why) => {
                    let case_name = obj(case)
                        .ok()
                        .and_then(|c| str_of(c, "name").ok())
                        .unwrap_or("?");
                    let _ = writeln!(failures, "{name}#{i} {case_name}: {why}");
                }
            }
        }
        println!("conformance: {name}: {passed}/{} cases passed", cases.len());
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
        Json::Arr(vec![
            Json::Int(1),
            Json::Int(-2),
            Json::Bool(true),
            Json::Bool(false),
            Json::Str("x\"y\\z".into())
        ])
    );
    for bad in [
        "1.5",
        "null",
        "[1,]",
        "{\"a\" 1}",
        "\"\\n\"",
        "{\"a\":1,\"a\":2}",
        "[1] x",
        "-",
    ] {
        assert!(Parser::parse(bad).is_err(), "{bad} parsed");
    }
}

#[test]
fn runner_detects_mismatches_and_unknown_ops() {
    let case = |s: &str| Parser::parse(s).unwrap();
    assert!(run_case(&case(r#"{"name":"ok","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":4},"output":{"out":-2}}"#)).is_ok());
    assert!(run_case(&case(r#"{"name":"bad","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":4},"output":{"out":2}}"#)).is_err());
    assert!(run_case(&case(
        r#"{"name":"key","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":4},"output":{"nope":2}}"#
    ))
    .is_err());
    assert!(run_case(&case(
        r#"{"name":"unk","op":"warp","input":{},"output":{}}"#
    ))
    .unwrap_err()
    .contains("unknown op"));
    let typo = run_case(&case(
        r#"{"name":"typo","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":4,"remote_pt":1},"output":{"out":-2}}"#,
    ));
    assert!(typo.unwrap_err().contains("remote_pt"));
    let lacking = run_case(&case(
        r#"{"name":"lack","op":"pdkv_physical_head_range","input":{"tp_size":2,"tp_rank":1,"total_kv_heads":4},"output":{"begin":2}}"#,
    ));
    assert!(lacking.unwrap_err().contains("end"));
    assert!(run_case(&case(r#"{"name":"st","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":3},"error":{"status":"PDKV_ERR_OVERFLOW","message_contains":[]}}"#)).is_err());
    assert!(run_case(&case(r#"{"name":"msg","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":3},"error":{"status":"PDKV_ERR_TP_NOT_DIVISIBLE","message_contains":["zzz"]}}"#)).is_err());
    assert!(run_case(&case(r#"{"name":"err","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":3},"error":{"status":"PDKV_ERR_TP_NOT_DIVISIBLE","message_contains":["2","3"]}}"#)).is_ok());
}

/// Cross-op checks of the planning handlers beyond the vectors: each must run, produce its
/// complete key set, and agree with itself across ops (round trip vs decode, worked numbers).
#[test]
fn newer_op_handlers_are_consistent() {
    let run = |op: &str, input: &str| -> BTreeMap<String, Json> {
        let input = Parser::parse(input).unwrap();
        match execute(op, obj(&input).unwrap()).unwrap_or_else(|e| panic!("{op}: {e}")) {
            Outcome::Output(Json::Obj(m)) => m,
            Outcome::Output(other) => panic!("{op}: {other:?}"),
            Outcome::Failed(e) => panic!("{op}: {e}"),
        }
    };
    assert_eq!(
        run("crc32c", r#"{"hex": "313233343536373839"}"#)["crc32c"],
        Json::Int(0xE306_9283)
    );
    let rt = run(
        "metadata_roundtrip",
        r#"{"model": "nemotron-3-nano-30b", "engine": {"tp_size": 2}, "layout": {"engine_id": "d", "tp_rank": 1, "num_regions": 6}}"#,
    );
    assert_eq!(rt.len(), 27, "{:?}", rt.keys());
    let Json::Str(fp) = &rt["model_fingerprint"] else {
        panic!("model_fingerprint is not a string")
    };
    assert!(
        fp.len() == 16 && fp.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
        "{fp}"
    );
    let Json::Str(hex) = &rt["hex"] else {
        panic!("hex")
    };
    let dec = run("metadata_decode", &format!(r#"{{"hex": "{hex}"}}"#));
    let mut rt_no_hex = rt.clone();
    rt_no_hex.remove("hex");
    assert_eq!(
        compare("decode", &Json::Obj(rt_no_hex), &Json::Obj(dec)),
        None
    );
    let err = execute(
        "metadata_decode",
        obj(&Parser::parse(r#"{"hex": "00"}"#).unwrap()).unwrap(),
    )
    .unwrap();
    assert!(matches!(err, Outcome::Failed(e) if e.status() == Status::Parse));
    let hs = run(
        "handshake_validate",
        r#"{"local": {"model": "nemotron-3-nano-30b", "engine": {"tp_size": 1}, "layout": {"engine_id": "d", "kv_layout": "NHD"}},
            "remote": {"model": "nemotron-3-nano-30b", "engine": {"tp_size": 2}, "layout": {"engine_id": "p", "kv_layout": "NHD"}}}"#,
    );
    // Distinct engine ids: NHD on both sides with heads split by TP is the one problem reported.
    assert_eq!(hs["compatible"], Json::Bool(false));
    assert_eq!(
        hs["items"],
        Parser::parse(r#"[{"status": "PDKV_ERR_UNSUPPORTED_LAYOUT", "field": "kv_layout"}]"#)
            .unwrap()
    );
    let trim = run(
        "trim_group",
        r#"{"kind": "attention", "local_blocks": [6, 7, 8, 9], "remote_blocks": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
            "local_tokens_per_block": 16, "remote_tokens_per_block": 16, "remote_computed_tokens": 160, "local_hit_tokens": 96}"#,
    );
    assert_eq!(trim["transferred_tokens"], Json::Int(64));
    let plan = run(
        "transfer_plan",
        r#"{"model": "nemotron-3-nano-30b", "decode_rank": 1,
            "prefill": {"engine": {"tp_size": 4}, "layout": {"engine_id": "p", "num_regions": 6}},
            "decode": {"engine": {"tp_size": 2}, "layout": {"engine_id": "d", "num_regions": 6}},
            "groups": [{"kind": "attention", "local_blocks": [10, 11], "remote_blocks": [20, 21, 22], "remote_computed_tokens": 3000},
                       {"kind": "mamba", "local_blocks": [40], "remote_blocks": [50], "remote_computed_tokens": 3000}]}"#,
    );
    assert_eq!(plan.len(), 21);
    assert_eq!(
        plan["read_ranks"],
        Json::Arr(vec![Json::Int(2), Json::Int(3)])
    );
    let Json::Arr(rb) = &plan["rank_bytes"] else {
        panic!("rank_bytes")
    };
    let sum: i64 = rb
        .iter()
        .map(|b| if let Json::Int(i) = b { *i } else { 0 })
        .sum();
    assert_eq!(plan["bytes"], Json::Int(sum));
    let t = run(
        "truncate_for_remote_decode",
        r#"{"num_prompt_tokens": 100, "max_tokens": 5, "has_mamba": true}"#,
    );
    assert_eq!(t["num_prompt_tokens"], Json::Int(99));
    let z = run(
        "receive_zero_ranges",
        r#"{"local_blocks": [11, 12, 13], "tokens_per_block": 64, "block_size_ratio": 4, "remote_kernel_len": 6}"#,
    );
    assert_eq!(Json::Obj(z.clone()), Parser::parse(r#"{"zero_ranges": [{"block": 12, "token_begin": 32, "token_end": 64}, {"block": 13, "token_begin": 0, "token_end": 64}]}"#).unwrap());
    let u = run(
        "uncovered_token_ranges",
        r#"{"local_blocks": [5, 6, 7], "first_block_index": 2, "tokens_per_block": 16, "held_tokens": 32, "written": [{"begin": 32, "end": 70}]}"#,
    );
    assert_eq!(
        u["zero_ranges"],
        Parser::parse(r#"[{"block": 7, "token_begin": 6, "token_end": 16}]"#).unwrap()
    );
    let m = run(
        "mamba_descriptor_ids",
        r#"{"ids": [3], "num_logical_blocks": 10, "num_regions": 2, "descs_per_region": 4, "first_id": 1000}"#,
    );
    let Json::Arr(ids) = &m["ids"] else {
        panic!("ids")
    };
    assert_eq!(ids.len(), 8);
    run(
        "mamba_aligned_split_v0604",
        r#"{"num_new_tokens": 1000, "num_prompt_tokens": 5000, "num_tokens": 5000, "block_size": 512}"#,
    );
    run(
        "mamba_aligned_split",
        r#"{"num_new_tokens": 1000, "num_prompt_tokens": 5000, "num_tokens": 5000, "block_size": 512}"#,
    );
}

/// The descriptor and model handlers must be able to fail: `item_messages_contain` (a missing substring or
/// a count different from the item count), a changed descriptor, conv range, model field or
/// plan JSON line, and a typo inside a nested region or mapping object.
#[test]
fn descriptor_and_model_handlers_detect_mismatches() {
    let case = |s: &str| Parser::parse(s).unwrap();
    let ranks = r#""ranks":[{"model":"nemotron-3-nano-30b","engine":{"tp_size":2},"layout":{"engine_id":"p"}},
                           {"model":"nemotron-3-nano-30b","engine":{"tp_size":2},"layout":{"engine_id":"q","tp_rank":1}}]"#;
    let items = r#""output":{"items":[{"status":"PDKV_ERR_INCOMPATIBLE","field":"engine_id"}]}"#;
    let hs = |contains: &str| {
        run_case(&case(&format!(
            r#"{{"name":"x","op":"handshake_validate_engine_ranks","input":{{{ranks},"item_messages_contain":{contains}}},{items}}}"#
        )))
    };
    assert!(hs(r#"[["zzz"]]"#).unwrap_err().contains("zzz"));
    assert!(hs("[]").unwrap_err().contains("1 items"));
    assert_eq!(hs(r#"[["p vs q"]]"#), Ok(()));
    let pair = r#""local":{"model":"nemotron-3-nano-30b","engine":{"tp_size":1},"layout":{"engine_id":"d","kv_layout":"NHD"}},
                  "remote":{"model":"nemotron-3-nano-30b","engine":{"tp_size":2},"layout":{"engine_id":"p","kv_layout":"NHD"}}"#;
    let hv = |contains: &str| {
        run_case(&case(&format!(
            r#"{{"name":"x","op":"handshake_validate","input":{{{pair},"item_messages_contain":{contains}}},"output":{{"items":[{{"status":"PDKV_ERR_UNSUPPORTED_LAYOUT","field":"kv_layout"}}],"compatible":false}}}}"#
        )))
    };
    assert_eq!(hv(r#"[["2 vs 1"]]"#), Ok(()));
    assert!(hv(r#"[["XYZ"]]"#).unwrap_err().contains("XYZ"));

    let local = |descs: &str, region: &str| {
        run_case(&case(&format!(
            r#"{{"name":"x","op":"attention_local_descriptors","input":{{"regions":[{region}],"block_size_ratio":1}},"output":{{"descriptors":{descs}}}}}"#
        )))
    };
    let region = r#"{"base":0,"block_len":16,"num_blocks":2}"#;
    assert_eq!(
        local(r#"[{"addr":0,"len":16},{"addr":16,"len":16}]"#, region),
        Ok(())
    );
    assert!(
        local(r#"[{"addr":0,"len":16},{"addr":32,"len":16}]"#, region)
            .unwrap_err()
            .contains("descriptors[1].addr")
    );
    let typo = local(
        r#"[]"#,
        r#"{"base":0,"block_len":16,"num_blocks":2,"num_block":1}"#,
    );
    assert!(typo.unwrap_err().contains("num_block"));

    let mapping_typo = run_case(&case(
        r#"{"name":"x","op":"attention_remote_descriptors","input":{"local_regions":[],"remote_regions":[],
            "mapping":{"local_tp_size":1,"local_tp_rank":0,"remote_tp_size":1,"total_kv_heads":2,"use_mla":false,"has_mamba":false,"mla":true},
            "block_size_ratio":1},"output":{"descriptors":[]}}"#,
    ));
    assert!(mapping_typo.unwrap_err().contains("mla"));

    let conv = |ranges: &str| {
        run_case(&case(&format!(
            r#"{{"name":"x","op":"mamba_local_conv_offsets","input":{{"model":"nemotron-3-nano-30b","engine":{{"tp_size":2}}}},"output":{{"ranges":{ranges}}}}}"#
        )))
    };
    assert_eq!(
        conv(
            r#"[{"offset":0,"size":12288},{"offset":12288,"size":3072},{"offset":15360,"size":3072}]"#
        ),
        Ok(())
    );
    assert!(conv(r#"[{"offset":0,"size":12288},{"offset":12288,"size":3072}]"#).is_err());

    // model_preset: the full key set, and a changed fingerprint fails.
    let m = match execute(
        "model_preset",
        obj(&case(r#"{"model":"nemotron-3-nano-30b"}"#)).unwrap(),
    )
    .unwrap()
    {
        Outcome::Output(Json::Obj(m)) => m,
        _ => panic!("model_preset did not produce an object"),
    };
    assert_eq!(m.len(), 21, "{:?}", m.keys());
    let mut wrong = m.clone();
    wrong.insert(
        "model_fingerprint".into(),
        Json::Str("0000000000000000".into()),
    );
    assert!(compare("output", &Json::Obj(wrong), &Json::Obj(m))
        .unwrap()
        .contains("model_fingerprint"));
    // model_hf_config: malformed JSON is a library PARSE error, not a runner failure.
    let bad = execute("model_hf_config", obj(&case(r#"{"json":"{"}"#)).unwrap()).unwrap();
    assert!(matches!(bad, Outcome::Failed(e) if e.status() == Status::Parse));

    // transfer_plan_json: the dump is split into lines; the first and last are the braces.
    let plan_input = r#"{"model":"nemotron-3-nano-30b","decode_rank":1,
        "prefill":{"engine":{"tp_size":2},"layout":{"engine_id":"p"}},
        "decode":{"engine":{"tp_size":2},"layout":{"engine_id":"d"}},
        "groups":[{"kind":"attention","local_blocks":[3,4],"remote_blocks":[7,8],"remote_computed_tokens":2106}]}"#;
    let lines = match execute("transfer_plan_json", obj(&case(plan_input)).unwrap()).unwrap() {
        Outcome::Output(Json::Obj(m)) => m["lines"].clone(),
        _ => panic!("transfer_plan_json did not produce an object"),
    };
    let Json::Arr(l) = &lines else {
        panic!("lines is not an array")
    };
    assert_eq!(
        (l.first(), l.last()),
        (Some(&Json::Str("{".into())), Some(&Json::Str("}".into())))
    );
    assert_eq!(l[3], Json::Str("  \"d_tp_rank\": 1,".into()));
    let mut changed = l.clone();
    changed[3] = Json::Str("  \"d_tp_rank\": 0,".into());
    assert!(compare("output", &Json::Arr(changed), &lines).is_some());
}

/// The optional `transfer_plan` inputs must be able to fail: `model` and `hf_config` together or
/// neither is a runner failure, a config.json model plans exactly like the preset it describes,
/// `prefill.ranks` in any order plans like the default, a plan reading from an unlisted P rank is
/// the library's NOT_FOUND, and a typo next to `ranks` is still rejected.
#[test]
fn plan_model_source_and_prefill_ranks() {
    let plan = |model: &str, prefill_extra: &str| -> CaseResult<Outcome> {
        let text = format!(
            r#"{{{model}"decode_rank":1,
                "prefill":{{"engine":{{"tp_size":4}},"layout":{{"engine_id":"p","num_regions":6}}{prefill_extra}}},
                "decode":{{"engine":{{"tp_size":2}},"layout":{{"engine_id":"d","num_regions":6}}}},
                "groups":[{{"kind":"attention","local_blocks":[10,11],"remote_blocks":[20,21,22],"remote_computed_tokens":3000}},
                          {{"kind":"mamba","local_blocks":[40],"remote_blocks":[50],"remote_computed_tokens":3000}}]}}"#
        );
        let input = Parser::parse(&text).unwrap();
        execute("transfer_plan", obj(&input).unwrap())
    };
    let output = |r: CaseResult<Outcome>| match r {
        Ok(Outcome::Output(j)) => j,
        Ok(Outcome::Failed(e)) => panic!("library error {e}"),
        Err(e) => panic!("runner failure {e}"),
    };
    let preset = r#""model":"nemotron-3-nano-30b","#;
    let reference = output(plan(preset, ""));

    // The preset's own config.json (the one the api tests load from a file), as one string.
    let cfg = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/hf_configs/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"
    ))
    .unwrap();
    let escaped = cfg
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace(['\n', '\r', '\t'], " ");
    let hf = format!(r#""hf_config":"{escaped}","#);
    assert_eq!(
        compare("hf_config", &reference, &output(plan(&hf, ""))),
        None
    );
    let both = plan(&format!("{preset}{hf}"), "");
    assert!(both
        .err()
        .unwrap()
        .contains("exactly one of model / hf_config"));
    let neither = plan("", "");
    assert!(neither
        .err()
        .unwrap()
        .contains("exactly one of model / hf_config"));
    let malformed = plan(r#""hf_config":"{","#, "");
    assert!(matches!(malformed, Ok(Outcome::Failed(e)) if e.status() == Status::Parse));

    assert_eq!(
        compare(
            "ranks",
            &reference,
            &output(plan(preset, r#","ranks":[3,1,2,0]"#))
        ),
        None
    );
    // D rank 1 of TP2 reads P ranks 2 and 3: without rank 3's metadata the plan cannot be built.
    let missing = plan(preset, r#","ranks":[0,1,2]"#);
    assert!(
        matches!(missing, Ok(Outcome::Failed(e)) if e.status() == Status::NotFound && e.message().contains('3'))
    );
    assert!(plan(preset, r#","ranks":[0,1,2,3],"rank":[0]"#)
        .err()
        .unwrap()
        .contains("rank"));
    assert!(plan(preset, r#","ranks":[-1]"#).is_err());
}
