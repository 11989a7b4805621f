#!/usr/bin/env python3
"""CI check of `pdkv ... --json` against its documented schema (docs/cli-json.schema.json,
described in docs/cli-json.md).

Usage: cli_json_schema_test.py PDKV_BINARY SCHEMA_JSON SCHEMA_DOC_MD

For many deployments and error cases it runs the tool with --json and checks that
  * stdout is exactly one JSON document and stderr is empty,
  * the document validates against the schema (a small validator of the JSON Schema subset the
    schema uses; it is self-tested first on documents it must reject),
  * "exit_status" is the process exit status, and it is the documented one for the case,
  * across all documents every field keeps one type (null aside): a field never changes type
    with the input,
  * every field the schema defines is described in the markdown page.
Standard library only. Exits 0 on success, 1 with the failures listed.
"""

import copy
import json
import os
import re
import subprocess
import sys
import tempfile

# ---- a validator for the JSON Schema keywords docs/cli-json.schema.json uses ----------------

SUPPORTED = {"$schema", "$id", "title", "description", "$defs", "$ref", "type", "enum", "const",
             "properties", "required", "additionalProperties", "items", "minimum", "minItems", "oneOf"}


def json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise TypeError(type(v))


def type_matches(v, t):
    actual = json_type(v)
    return actual == t or (t == "number" and actual == "integer")


class Validator:
    def __init__(self, schema):
        self.root = schema
        self.check_keywords(schema, "#")

    def check_keywords(self, node, where):
        """The schema may only use keywords this validator implements (else it would ignore them)."""
        if isinstance(node, dict):
            for k, v in node.items():
                if where.endswith("/properties") or where.endswith("/$defs") or where.endswith("/envelope_properties"):
                    self.check_keywords(v, where + "/" + k)
                    continue
                if k not in SUPPORTED:
                    raise ValueError(f"schema keyword {k!r} at {where} is not implemented by this validator")
                self.check_keywords(v, where + "/" + k)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                self.check_keywords(v, f"{where}/{i}")

    def resolve(self, ref):
        if not ref.startswith("#/"):
            raise ValueError(f"only local $ref are supported, got {ref}")
        node = self.root
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def errors(self, v, s, path="$"):
        """All violations of schema s by value v, as 'path: reason' strings."""
        out = []
        if "$ref" in s:
            out += self.errors(v, self.resolve(s["$ref"]), path)
        if "type" in s:
            types = s["type"] if isinstance(s["type"], list) else [s["type"]]
            if not any(type_matches(v, t) for t in types):
                return out + [f"{path}: {json_type(v)} {json.dumps(v)[:60]} is not {' or '.join(types)}"]
        if "const" in s and not (v == s["const"] and json_type(v) == json_type(s["const"])):
            out.append(f"{path}: {json.dumps(v)[:60]} is not {json.dumps(s['const'])}")
        if "enum" in s and not any(v == e and json_type(v) == json_type(e) for e in s["enum"]):
            out.append(f"{path}: {json.dumps(v)[:60]} is not one of {json.dumps(s['enum'])}")
        if "minimum" in s and json_type(v) in ("integer", "number") and v < s["minimum"]:
            out.append(f"{path}: {v} is below the minimum {s['minimum']}")
        if isinstance(v, list):
            if "minItems" in s and len(v) < s["minItems"]:
                out.append(f"{path}: {len(v)} items, fewer than {s['minItems']}")
            if "items" in s:
                for i, item in enumerate(v):
                    out += self.errors(item, s["items"], f"{path}[{i}]")
        if isinstance(v, dict):
            props = s.get("properties", {})
            for k in s.get("required", []):
                if k not in v:
                    out.append(f"{path}: required field {k!r} is missing")
            for k, item in v.items():
                if k in props:
                    out += self.errors(item, props[k], f"{path}.{k}")
                elif s.get("additionalProperties") is False:
                    out.append(f"{path}: field {k!r} is not in the schema")
        if "oneOf" in s:
            results = [self.errors(v, alt, path) for alt in s["oneOf"]]
            matching = [r for r in results if not r]
            if len(matching) != 1:
                if not matching:
                    best = min(results, key=len)
                    out.append(f"{path}: matches none of the {len(results)} alternatives; closest: " + "; ".join(best[:5]))
                else:
                    out.append(f"{path}: matches {len(matching)} alternatives, expected exactly one")
        return out


# ---- the cases -------------------------------------------------------------------------------

DEEPSEEK = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
            "torch_dtype": "bfloat16"}
LLAMA = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "torch_dtype": "bfloat16"}
NO_MODEL_TYPE = {"num_hidden_layers": 2, "mamba_n_heads": 8, "ssm_state_size": 16}


def cases(tmp):
    def write(name, doc):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    deepseek, llama, broken = write("deepseek.json", DEEPSEEK), write("llama.json", LLAMA), \
        write("no_model_type.json", NO_MODEL_TYPE)
    plan = lambda model, p, d, *extra: ["plan", "--model", model, "--prefill-tp", str(p), "--decode-tp", str(d),
                                        *extra, "--json"]
    # (name, argv, expected exit status)
    def demo(*extra):
        # Small: two short requests of the default deployment (six processes, about 300 MiB).
        args = {"--requests": "2", "--tokens": "64-1500", "--concurrency": "1"}
        rest = list(extra)
        for i in range(0, len(rest) - 1, 2):
            args[rest[i]] = rest[i + 1]
        return ["demo", *[x for kv in args.items() for x in kv], "--json"]

    return [
        ("nano_p4_d2_not_multiples", plan("nemotron-3-nano-30b", 4, 2), 0),
        ("nano_pp2_to_pp3", plan("nemotron-3-nano-30b", 2, 4, "--prefill-pp", "2", "--decode-pp", "3"), 0),
        ("config_error_pp_too_deep", plan("nemotron-3-nano-30b", 4, 2, "--decode-pp", "53"), 2),
        ("jamba_kv_layouts_permuted", plan("jamba-v0.1", 4, 2, "--decode-kv-layout", "NHD", "--permute-on-receive"), 0),
        ("config_error_kv_layouts_need_flag", plan("jamba-v0.1", 4, 2, "--decode-kv-layout", "NHD"), 2),
        ("nano_p2_d2_equal", plan("nemotron-3-nano-30b", 2, 2), 0),
        ("qwen3_next_p4_d4_align_prefix_caching",
         plan("qwen3-next-80b", 4, 4, "--mamba-cache-mode", "align", "--enable-prefix-caching"), 0),
        ("qwen3_next_cache_mode_none", plan("qwen3-next-80b", 2, 4, "--mamba-cache-mode", "none"), 0),
        ("qwen3_next_cache_mode_all", plan("qwen3-next-80b", 4, 2, "--mamba-cache-mode", "all"), 0),
        ("falcon_p1_d4_prefill_multiple_vllm_differs", plan("falcon-h1-0.5b", 1, 4), 0),
        ("falcon_p4_d1_decode_multiple", plan("falcon-h1-0.5b", 4, 1), 0),
        ("nemotron_h_8b_flashinfer_head_sharded", plan("nemotron-h-8b", 2, 1, "--prefill-backend", "flashinfer"), 0),
        ("jamba_p2_d1", plan("jamba-v0.1", 2, 1, "--kv-cache-dtype", "fp8"), 0),
        ("qwen35_27b_int8_per_token_head_spec7",
         plan("qwen3.5-27b", 1, 2, "--kv-cache-dtype", "int8_per_token_head", "--mamba-ssm-cache-dtype", "bfloat16",
              "--num-speculative-tokens", "7", "--attention-backend", "triton"), 0),
        ("usage_error_unknown_kv_dtype", plan("qwen3.5-27b", 1, 2, "--kv-cache-dtype", "int8_per_head"), 1),
        ("config_error_kda_has_no_split_rule", plan("kimi-linear-48b", 1, 2, "--attention-backend", "flashmla"), 2),
        ("mla_config_flashmla", plan(deepseek, 2, 2, "--attention-backend", "flashmla"), 0),
        ("dense_llama_config", plan(llama, 8, 2), 0),
        ("llama_with_mla_typed_layers", plan(llama, 4, 2, "--mla-layers", "1", "--mla-head-size", "132"), 0),
        ("config_error_mla_layer_not_attention", plan("nemotron-3-nano-30b", 4, 2, "--mla-layers", "0",
                                                      "--mla-head-size", "132"), 2),
        ("usage_error_mla_head_size_alone", plan("nemotron-3-nano-30b", 4, 2, "--mla-head-size", "132"), 1),
        ("config_error_tp_not_divisible", plan("nemotron-3-nano-30b", 3, 2), 2),
        ("config_error_mla_backend_on_gqa", plan("nemotron-3-nano-30b", 4, 2, "--attention-backend", "flashmla"), 2),
        ("config_error_speculative_over_bound", plan("nemotron-3-nano-30b", 4, 2, "--num-speculative-tokens", "65"), 2),
        ("config_error_bad_config_json", plan(broken, 1, 1), 2),
        ("usage_error_unknown_flag", ["plan", "--model", "x", "--prefil-tp", "2", "--json"], 1),
        ("usage_error_missing_flags", ["plan", "--model", "nemotron-3-nano-30b", "--json"], 1),
        ("usage_error_stray_argument", plan("nemotron-3-nano-30b", 4, 2, "extra"), 1),
        ("usage_error_bad_backend", plan("nemotron-3-nano-30b", 4, 2, "--decode-backend", "flashinfr"), 1),
        ("usage_error_unknown_preset", plan("nemotron-3-nano-3b", 1, 1), 1),
        ("usage_error_missing_config", plan(os.path.join(tmp, "missing.json"), 1, 1), 1),
        ("usage_error_switch_with_value", ["plan", "--json=yes"], 1),
        ("demo_tcp", demo("--transport", "tcp"), 0),
        ("demo_killed_prefill_rank", demo("--transport", "tcp", "--kill-prefill-after", "1", "--requests", "3"), 5),
        ("demo_usage_error_tokens", demo("--tokens", "9-3"), 1),
        ("demo_config_error_tp", demo("--prefill-tp", "3"), 2),
        ("presets", ["presets", "--json"], 0),
        ("presets_stray_argument", ["presets", "all", "--json"], 1),
        ("version", ["version", "--json"], 0),
        ("version_flag_form", ["--version", "--json"], 0),
        ("unknown_command", ["plann", "--json"], 1),
        ("flag_before_command", ["--json"], 1),
    ]


# ---- checks --------------------------------------------------------------------------------------

def type_paths(v, path, seen):
    """Records, for every field path (array indexes collapsed), the JSON types it took."""
    seen.setdefault(path, set()).add(json_type(v))
    if isinstance(v, dict):
        for k, item in v.items():
            type_paths(item, f"{path}.{k}", seen)
    elif isinstance(v, list):
        for item in v:
            type_paths(item, f"{path}[]", seen)


def schema_field_names(node, out):
    if isinstance(node, dict):
        for k, v in node.get("properties", {}).items():
            out.add(k)
        for v in node.values():
            schema_field_names(v, out)
    elif isinstance(node, list):
        for v in node:
            schema_field_names(v, out)


def self_test(validator, good_plan):
    """The validator must reject what the schema forbids, or passing proves nothing."""
    bad = []
    d = copy.deepcopy(good_plan)
    d["decode_ranks"][0]["attention"]["descriptors_per_block_per_layer"] = "2 to 3 (varies)"
    bad.append(("a descriptor count as a string", d))
    d = copy.deepcopy(good_plan)
    del d["blocks"]
    bad.append(("a missing field", d))
    d = copy.deepcopy(good_plan)
    d["surprise"] = 1
    bad.append(("an unknown field", d))
    d = copy.deepcopy(good_plan)
    d["schema_version"] = 2
    bad.append(("another schema_version", d))
    d = copy.deepcopy(good_plan)
    d["tp_ratio"] = True
    bad.append(("a boolean for an integer", d))
    d = copy.deepcopy(good_plan)
    d["errors"] = [{"kind": "usage", "where": "x", "status": None, "message": "m"}]
    bad.append(("an error without its suggestion field", d))
    failures = []
    for what, doc in bad:
        if not validator.errors(doc, validator.root):
            failures.append(f"validator self-test: accepted {what}")
    return failures


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 1
    binary, schema_path, doc_path = sys.argv[1:]
    with open(schema_path) as f:
        schema = json.load(f)
    validator = Validator(schema)
    failures = []
    seen = {}
    documents = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv, want_status in cases(tmp):
            proc = subprocess.run([binary, *argv], capture_output=True, text=True, timeout=60)
            where = f"{name} (pdkv {' '.join(argv)})"
            if proc.stderr:
                failures.append(f"{where}: printed on stderr under --json: {proc.stderr.strip()[:200]}")
            try:
                doc = json.loads(proc.stdout)
            except json.JSONDecodeError as e:
                failures.append(f"{where}: stdout is not one JSON document ({e}): {proc.stdout[:200]}")
                continue
            documents[name] = doc
            if proc.returncode != want_status:
                failures.append(f"{where}: exit status {proc.returncode}, expected {want_status}: {proc.stdout[:300]}")
            if doc.get("exit_status") != proc.returncode:
                failures.append(f"{where}: exit_status {doc.get('exit_status')} but the process exited {proc.returncode}")
            if (proc.returncode == 0) != (doc.get("errors") == []):
                failures.append(f"{where}: errors {doc.get('errors')} do not agree with exit status {proc.returncode}")
            for err in validator.errors(doc, schema):
                failures.append(f"{where}: {err}")
            type_paths(doc, "$" if doc.get("command") is None else "$" + doc["command"], seen)
    for path, types in sorted(seen.items()):
        if len(types - {"null"}) > 1:
            failures.append(f"field {path} changes type with the input: {sorted(types)}")
    if "nano_p4_d2_not_multiples" in documents:
        failures += self_test(validator, documents["nano_p4_d2_not_multiples"])
    with open(doc_path) as f:
        page = f.read()
    names = set()
    schema_field_names(schema, names)
    for field in sorted(names):
        if f"`{field}`" not in page:
            failures.append(f"{doc_path} does not describe the field `{field}`")
    if failures:
        print("\n".join("FAIL: " + f for f in failures))
        return 1
    print(f"PASS: {len(documents)} documents valid against {os.path.basename(schema_path)}; "
          f"{len(seen)} field paths, each of one type; {len(names)} fields described")
    return 0


if __name__ == "__main__":
    sys.exit(main())
