# Tests of the `pdkv plan` main job. Every test checks BOTH the exit status and the output
# (stdout and stderr together): worked numbers must appear in a good run (exit 0), and bad input
# must exit 1 (usage error) or 2 (configuration error) naming the offending value. CTest ignores
# the exit code as soon as a PASS_REGULAR_EXPRESSION is set, so no test uses one: a small shell
# script checks both and prints the output on failure. Patterns are grep -E, one line each.
set(PDKV_CLI_CHECK ${CMAKE_CURRENT_BINARY_DIR}/pdkv_cli_check.sh)
file(WRITE ${PDKV_CLI_CHECK} [=[
#!/bin/sh
# usage: pdkv_cli_check.sh EXPECTED_STATUS PATTERN [PATTERN...] -- COMMAND [ARGS...]
want=$1
shift
patterns=""
n=0
while [ "$1" != "--" ]; do
  n=$((n + 1))
  eval "pattern_$n=\$1"
  shift
done
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne "$want" ]; then
  echo "FAIL: exit status $rc, expected $want"
  exit 1
fi
i=1
while [ $i -le $n ]; do
  eval "pattern=\$pattern_$i"
  if ! printf '%s\n' "$out" | grep -Eq -e "$pattern"; then
    echo "FAIL: no output line matches: $pattern"
    exit 1
  fi
  i=$((i + 1))
done
echo "PASS: exit status $rc and $n pattern(s)"
]=])

# pdkv_cli_expect(NAME STATUS PATTERNS <p>... ARGS <cli args>...)
function(pdkv_cli_expect name status)
  cmake_parse_arguments(PARSE_ARGV 2 X "" "" "PATTERNS;ARGS")
  add_test(NAME ${name} COMMAND sh ${PDKV_CLI_CHECK} ${status} ${X_PATTERNS} -- $<TARGET_FILE:pdkv_cli> ${X_ARGS})
endfunction()

set(CONFIGS ${PROJECT_SOURCE_DIR}/tests/data/hf_configs)
set(N30 plan --model nemotron-3-nano-30b --prefill-tp 4 --decode-tp 2)

# --- good runs (exit 0) ------------------------------------------------------------------------
pdkv_cli_expect(cli_plan_conv_bytes 0 PATTERNS "conv state bytes / rank +9216 B .+18432 B" ARGS ${N30})
pdkv_cli_expect(cli_plan_ssm_bytes 0 PATTERNS "SSM state bytes / rank +524288 B .+1048576 B" ARGS ${N30})
pdkv_cli_expect(cli_plan_block_sizes 0 PATTERNS "attention block size [(]tokens[)] +1056 +2096" ARGS ${N30})
pdkv_cli_expect(cli_plan_padding_log 0 PATTERNS "Padding mamba page size by 0[.]58% to ensure" ARGS ${N30})
pdkv_cli_expect(cli_plan_non_multiple_blocks 0 PATTERNS "decode kernel 2096 tokens: not multiples" ARGS ${N30})
pdkv_cli_expect(cli_plan_rank1_sources 0 PATTERNS "Decode rank 1: handshake with prefill ranks [[]2,3[]]"
  ARGS ${N30})
pdkv_cli_expect(cli_plan_json 0 PATTERNS "\"block_size\": 272"
  ARGS plan --model qwen3-next-80b --prefill-tp 4 --decode-tp 4 --json)
pdkv_cli_expect(cli_plan_falcon_55208 0 PATTERNS "issue #55208" ARGS plan --model falcon-h1-0.5b --prefill-tp 1 --decode-tp 2)
pdkv_cli_expect(cli_plan_config_json 0 PATTERNS "attention block size [(]tokens[)] +2096 +2096"
  ARGS plan --model ${CONFIGS}/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json --prefill-tp 2 --decode-tp 2)
# An existing file is a config.json path even without the .json suffix.
set(PDKV_CLI_NOSUFFIX ${CMAKE_CURRENT_BINARY_DIR}/cli_nemotron_config)
configure_file(${CONFIGS}/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json ${PDKV_CLI_NOSUFFIX} COPYONLY)
pdkv_cli_expect(cli_plan_config_without_suffix 0 PATTERNS "attention block size [(]tokens[)] +2096 +2096"
  "source: config.json: .*cli_nemotron_config" ARGS plan --model ${PDKV_CLI_NOSUFFIX} --prefill-tp 2 --decode-tp 2)
pdkv_cli_expect(cli_plan_speculative_bound_ok 0 PATTERNS "conv state bytes / rank"
  ARGS ${N30} --num-speculative-tokens 64)

# --- configuration errors (exit 2) -------------------------------------------------------------
pdkv_cli_expect(cli_plan_bad_tp 2 PATTERNS "TP_NOT_DIVISIBLE: --decode-tp 2 and --prefill-tp 3 do not divide each other"
  ARGS plan --model nemotron-3-nano-30b --prefill-tp 3 --decode-tp 2)
# An MLA backend on a non-MLA model, on one side or both.
pdkv_cli_expect(cli_plan_mla_backend_on_gqa 2
  PATTERNS "prefill attention backend: PDKV_ERR_INCOMPATIBLE: backend 'flashmla' is an MLA backend"
           "decode attention backend: PDKV_ERR_INCOMPATIBLE"
  ARGS ${N30} --attention-backend flashmla)
pdkv_cli_expect(cli_plan_mla_backend_decode_only 2
  PATTERNS "decode attention backend: PDKV_ERR_INCOMPATIBLE: backend 'cutlass_mla'"
  ARGS ${N30} --decode-backend cutlass_mla)
# ... and a non-MLA backend on an MLA model (DeepSeek-style config).
set(PDKV_CLI_MLA ${CMAKE_CURRENT_BINARY_DIR}/cli_deepseek_config.json)
file(WRITE ${PDKV_CLI_MLA} [=[
{"model_type": "deepseek_v3", "num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
 "torch_dtype": "bfloat16"}
]=])
pdkv_cli_expect(cli_plan_gqa_backend_on_mla 2
  PATTERNS "prefill attention backend: PDKV_ERR_INCOMPATIBLE: backend 'flash_attn'.*MLA"
  ARGS plan --model ${PDKV_CLI_MLA} --prefill-tp 2 --decode-tp 2)
pdkv_cli_expect(cli_plan_mla_model_mla_backend 0 PATTERNS "Decode rank 1"
  ARGS plan --model ${PDKV_CLI_MLA} --prefill-tp 2 --decode-tp 2 --attention-backend flashmla)
# Engine settings out of range are configuration errors naming the field and value.
pdkv_cli_expect(cli_plan_speculative_over_bound 2 PATTERNS "num_speculative_tokens = 65 exceeds 64"
  ARGS ${N30} --num-speculative-tokens 65)
# An unknown model_type whose config describes Mamba layers is not read as pure attention.
set(PDKV_CLI_BAMBA ${CMAKE_CURRENT_BINARY_DIR}/cli_bamba_config.json)
file(WRITE ${PDKV_CLI_BAMBA} [=[
{"model_type": "bamba", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
 "num_key_value_heads": 8, "attn_layer_indices": [9, 18, 27], "mamba_n_heads": 128, "mamba_d_head": 64,
 "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2}
]=])
pdkv_cli_expect(cli_plan_unknown_hybrid_model_type 2
  PATTERNS "configuration error: --model: PDKV_ERR_UNSUPPORTED_MAMBA_TYPE: .*model_type 'bamba'.*'attn_layer_indices'"
           "supported model types: nemotron_h"
  ARGS plan --model ${PDKV_CLI_BAMBA} --prefill-tp 1 --decode-tp 1)
set(PDKV_CLI_NO_TYPE ${CMAKE_CURRENT_BINARY_DIR}/cli_no_model_type.json)
file(WRITE ${PDKV_CLI_NO_TYPE} [=[
{"num_hidden_layers": 2, "mamba_n_heads": 8, "ssm_state_size": 16}
]=])
pdkv_cli_expect(cli_plan_missing_model_type 2 PATTERNS "missing key 'model_type' in .*cli_no_model_type[.]json"
  ARGS plan --model ${PDKV_CLI_NO_TYPE} --prefill-tp 1 --decode-tp 1)

# --- usage errors (exit 1) ---------------------------------------------------------------------
pdkv_cli_expect(cli_unknown_preset 1 PATTERNS "usage error: --model: .*no-such-model"
  ARGS plan --model no-such-model --prefill-tp 1 --decode-tp 1)
pdkv_cli_expect(cli_unknown_flag 1 PATTERNS "usage error: unknown flag '--frobnicate' for 'pdkv plan'$"
  "run 'pdkv plan --help' for usage" ARGS plan --model x --frobnicate 1)
pdkv_cli_expect(cli_unknown_command 1 PATTERNS "unknown command 'frobnicate'" ARGS frobnicate)
pdkv_cli_expect(cli_missing_flags 1
  PATTERNS "usage error: 'pdkv plan' is missing --prefill-tp, --decode-tp [(]--prefill-tp [(]the prefill engine's"
  ARGS plan --model nemotron-3-nano-30b)
pdkv_cli_expect(cli_model_directory 1 PATTERNS "PDKV_ERR_IO: '${CONFIGS}' is a directory"
  ARGS plan --model ${CONFIGS} --prefill-tp 1 --decode-tp 1)
pdkv_cli_expect(cli_model_missing_json 1 PATTERNS "PDKV_ERR_IO: config.json '/nonexistent/config[.]json' does not exist"
  ARGS plan --model /nonexistent/config.json --prefill-tp 1 --decode-tp 1)
pdkv_cli_expect(cli_model_missing_json_relative 1 PATTERNS "PDKV_ERR_IO: config.json 'nope[.]json' does not exist"
  ARGS plan --model nope.json --prefill-tp 1 --decode-tp 1)
pdkv_cli_expect(cli_bad_cache_mode 1 PATTERNS "--mamba-cache-mode 'sometimes' is not one of none, align, all"
  ARGS ${N30} --mamba-cache-mode sometimes)
pdkv_cli_expect(cli_empty_kernel_block_sizes 1 PATTERNS "--kernel-block-sizes is empty" ARGS ${N30} --kernel-block-sizes=)
pdkv_cli_expect(cli_bad_kernel_block_sizes 1 PATTERNS "--kernel-block-sizes entry 'x' in '16,x'" ARGS ${N30} --kernel-block-sizes 16,x)
pdkv_cli_expect(cli_trailing_comma_kernel_block_sizes 1 PATTERNS "--kernel-block-sizes entry '' in '16,'"
  ARGS ${N30} --kernel-block-sizes 16,)
pdkv_cli_expect(cli_zero_kernel_block_size 1 PATTERNS "--kernel-block-sizes entry '0'" ARGS ${N30} --kernel-block-sizes 0)
pdkv_cli_expect(cli_bad_dtype 1 PATTERNS "--kv-cache-dtype: PDKV_ERR_NOT_FOUND: unknown KV cache dtype 'fp9'"
  ARGS ${N30} --kv-cache-dtype fp9)
# Element formats (metadata 1.3) from the dtype flags, per engine or for both: formats of equal size
# that differ are an "element formats" error naming the field, both formats and vLLM's flag; the
# same named format on both engines plans.
pdkv_cli_expect(cli_kv_format_mismatch 2
  PATTERNS "element formats: PDKV_ERR_INCOMPATIBLE: kv_cache_format: decode fp8_e5m2, prefill fp8_e4m3: the two engines' KV cache formats differ"
           "use the same --kv-cache-dtype on both engines"
  ARGS ${N30} --prefill-kv-cache-dtype fp8_e4m3 --decode-kv-cache-dtype fp8_e5m2)
pdkv_cli_expect(cli_fp8_is_e4m3 2 PATTERNS "kv_cache_format: decode fp8_e5m2, prefill fp8_e4m3"
  ARGS ${N30} --kv-cache-dtype fp8 --decode-kv-cache-dtype fp8_e5m2)
pdkv_cli_expect(cli_conv_format_mismatch 2
  PATTERNS "conv_state_format: decode float16, prefill bfloat16: the two engines' Mamba conv state dtypes differ"
  ARGS ${N30} --mamba-cache-dtype bfloat16 --decode-mamba-cache-dtype float16)
pdkv_cli_expect(cli_ssm_format_mismatch 2 PATTERNS "ssm_state_format: decode float16, prefill bfloat16"
  ARGS ${N30} --prefill-mamba-ssm-cache-dtype bfloat16 --decode-mamba-ssm-cache-dtype float16)
pdkv_cli_expect(cli_same_named_formats 0 PATTERNS "KV bytes / token / head +256 +256" "mamba state from"
           "KV cache format +fp8_e5m2 +fp8_e5m2" "conv state format +float16 +float16"
  ARGS ${N30} --kv-cache-dtype fp8_e5m2 --prefill-mamba-cache-dtype float16 --decode-mamba-cache-dtype float16)
pdkv_cli_expect(cli_element_formats_json 0 PATTERNS "\"kv_cache\": \"bfloat16\"" "\"kv_cache\": null"
  ARGS ${N30} --decode-kv-cache-dtype bfloat16 --json)
pdkv_cli_expect(cli_bad_side_dtype 1
  PATTERNS "--decode-kv-cache-dtype: PDKV_ERR_NOT_FOUND: unknown KV cache dtype 'fp9'"
  ARGS ${N30} --decode-kv-cache-dtype fp9)
# Quantized KV with per-head scales (issue 12 item 2): Qwen3.5-27B at TP1 with int8 per-token-head
# KV, bf16 SSM state and 7 speculative tokens logs an 864-token block and 1.09% padding; a KV
# head is 520 bytes per token (256 + 256 int8 + two fp32 scales) and moves whole.
pdkv_cli_expect(cli_int8_per_token_head_864 0
  PATTERNS "KV bytes / token / head +520 [(]8 B scales[)] +520 [(]8 B scales[)]"
           "[[]prefill vLLM log[]] Setting attention block size to 864 tokens"
           "[[]prefill vLLM log[]] Padding mamba page size by 1[.]09%"
           "prefill rank 0: 1040 B/token, 898560 B .* per decode block, head slice at [+]1040 B/token in P -> [+]0 in D"
  ARGS plan --model qwen3.5-27b --prefill-tp 1 --decode-tp 2 --kv-cache-dtype int8_per_token_head
       --mamba-ssm-cache-dtype bfloat16 --num-speculative-tokens 7 --attention-backend triton)
# GQA layers split by heads, MLA-typed layers read whole from one prefill rank (issue 12 item 4),
# on a dense 4-layer Llama-like config (8 KV heads of 128, bf16) whose layers 1 and 3 are marked.
set(PDKV_CLI_LLAMA ${CMAKE_CURRENT_BINARY_DIR}/cli_llama4.json)
file(WRITE ${PDKV_CLI_LLAMA} "{\"model_type\": \"llama\", \"num_hidden_layers\": 4, \"hidden_size\": 4096, \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"torch_dtype\": \"bfloat16\"}")
pdkv_cli_expect(cli_mla_typed_layers 0
  PATTERNS "MLA-typed attention layers: 2 [(]latent of 132 elements"
           "MLA-typed layers bytes / token +264 +264"
           "prefill rank 3: 1024 B/token, .* head slice at [+]0 B/token in P -> [+]1024 in D"
           "MLA-typed layers: the whole latent from prefill rank 2 only, 264 B/token"
  ARGS plan --model ${PDKV_CLI_LLAMA} --prefill-tp 4 --decode-tp 2 --mla-layers 1,3 --mla-head-size 132)
pdkv_cli_expect(cli_mla_layers_in_hybrid 2 PATTERNS "MLA-typed layers 'L' in a hybrid [(]Mamba type mamba2[)] model are not supported"
  ARGS plan --model nemotron-3-nano-30b --prefill-tp 4 --decode-tp 2 --mla-layers 5 --mla-head-size 132)
pdkv_cli_expect(cli_mla_layer_not_attention 2 PATTERNS "--mla-layers: .*layer 0 is not a GQA attention layer"
  ARGS plan --model nemotron-3-nano-30b --prefill-tp 4 --decode-tp 2 --mla-layers 0 --mla-head-size 132)
# Pipeline parallelism (issue 12 item 1): vLLM's default split of Nemotron-3-Nano's 52 layers;
# at PP2 the stage boundary falls between Mamba layer 25 and attention layer 26.
pdkv_cli_expect(cli_pp_2_to_1 0
  PATTERNS "prefill stage 0: layers .0, 26.: 3 attention, 12 mamba"
           "prefill stage boundary before layer 26: mamba . attention"
           "decode stage 0 <- prefill stage 1: layers .26, 52., 3 attention, 11 mamba"
           "READ notifications each prefill rank waits for, per prefill stage: .1,1."
  ARGS ${N30} --prefill-pp 2)
pdkv_cli_expect(cli_pp_1_to_2 0
  PATTERNS "decode stage 1: layers .26, 52." "decode stage 0 <- prefill stage 0: layers .0, 26."
           "decode stage 1 <- prefill stage 0: layers .26, 52."
           "per prefill stage: .4."
  ARGS plan --model nemotron-3-nano-30b --prefill-tp 2 --decode-tp 4 --decode-pp 2)
pdkv_cli_expect(cli_pp_2_to_3 0
  PATTERNS "decode stage 1 <- prefill stage 0: layers .17, 26., 1 attention, 4 mamba"
           "decode stage 1 <- prefill stage 1: layers .26, 35., 2 attention, 3 mamba"
           "per prefill stage: .4,4."
  ARGS plan --model nemotron-3-nano-30b --prefill-tp 2 --decode-tp 4 --prefill-pp 2 --decode-pp 3)
pdkv_cli_expect(cli_pp_too_deep 2 PATTERNS "--decode-pp: PDKV_ERR_INVALID_ARGUMENT: --decode-pp 53: pp_size 53 exceeds the model's 52 layers"
  ARGS ${N30} --decode-pp 53)
# Different KV layouts (issue 12 item 3): Jamba-v0.1 (8 KV heads) P TP4 HND -> D TP2 NHD.
set(JAMBA_P4_D2 plan --model jamba-v0.1 --prefill-tp 4 --decode-tp 2)
pdkv_cli_expect(cli_kv_layouts_permuted 0
  PATTERNS "KV cache layouts: prefill HND, decode NHD. decode writes each received block in HND and permutes it to NHD .4 heads x 80 tokens x 512 B = 163840 B"
  ARGS ${JAMBA_P4_D2} --decode-kv-layout NHD --permute-on-receive)
pdkv_cli_expect(cli_kv_layouts_need_the_flag 2
  PATTERNS "kv cache layouts: PDKV_ERR_UNSUPPORTED_LAYOUT: KV cache layouts differ .D NHD, P HND.* Fix: pass --permute-on-receive"
  ARGS ${JAMBA_P4_D2} --decode-kv-layout NHD)
pdkv_cli_expect(cli_kv_layouts_prefill_nhd_head_subsets 2
  PATTERNS "NHD KV cache layout on P with 4 .D. vs 2 .P. KV heads per rank.*.--prefill-kv-layout HND"
  ARGS ${JAMBA_P4_D2} --prefill-kv-layout NHD --permute-on-receive)
pdkv_cli_expect(cli_kv_layout_bad 1 PATTERNS "--decode-kv-layout 'nhd' is not one of HND, NHD. did you mean 'NHD'"
  ARGS ${JAMBA_P4_D2} --decode-kv-layout nhd)
pdkv_cli_expect(cli_pp_zero 1 PATTERNS "--prefill-pp must be a positive integer" ARGS ${N30} --prefill-pp 0)
pdkv_cli_expect(cli_bad_ssm_dtype 1 PATTERNS "--mamba-ssm-cache-dtype: .*'float13'"
  ARGS ${N30} --mamba-ssm-cache-dtype float13)
pdkv_cli_expect(cli_bad_backend 1 PATTERNS "--decode-backend: PDKV_ERR_NOT_FOUND: .*'warp_attn'"
  ARGS ${N30} --decode-backend warp_attn)
pdkv_cli_expect(cli_bad_integer 1 PATTERNS "--prefill-tp must be a positive integer below 2\\^32, got 'four'"
  ARGS plan --model nemotron-3-nano-30b --prefill-tp four --decode-tp 2)
pdkv_cli_expect(cli_negative_integer 1 PATTERNS "--block-size must be a positive integer below 2\\^32, got '-16'"
  ARGS ${N30} --block-size -16)
# Usage errors are reported before the model is read (a bad flag wins over a bad --model).
pdkv_cli_expect(cli_usage_before_model 1 PATTERNS "--mamba-cache-mode 'x'"
  ARGS plan --model no-such-model --prefill-tp 1 --decode-tp 1 --mamba-cache-mode x)

# --- block-size relations: every direction gets its own label, vLLM note and descriptor count ---
# Falcon-H1 P TP1 -> D TP4: P kernel 800, D kernel 400. P = 2 D blocks (not "not multiples");
# vLLM refuses it (ratio 400/800 below 1); pdkv: one piece per head (1 head per D rank).
set(FALCON_P1_D4 plan --model falcon-h1-0.5b --prefill-tp 1 --decode-tp 4)
pdkv_cli_expect(cli_blocks_prefill_multiple 0
  PATTERNS "prefill kernel 800 tokens, decode kernel 400 tokens: prefill block = 2 decode blocks$"
           "note: vLLM refuses this pair [(]block_size_ratio = decode/prefill kernel block = 400/800 is below 1; vLLM serves only prefill blocks <= decode blocks"
           "^  attention from [[]0[]], descriptors per block per layer: 1$"
  ARGS ${FALCON_P1_D4})
# The old label and the old descriptor text must be gone from this report (exit 1 = no match).
add_test(NAME cli_blocks_prefill_multiple_not_mislabelled
  COMMAND sh -c "out=$(\"$0\" \"$@\" 2>&1) || exit 1; if printf '%s\\n' \"$out\" | grep -Eq 'not multiples|not a whole number'; then printf '%s\\n' \"$out\"; echo 'FAIL: mislabelled as not multiples'; exit 1; fi; echo PASS"
          $<TARGET_FILE:pdkv_cli> ${FALCON_P1_D4})
pdkv_cli_expect(cli_blocks_prefill_multiple_json 0
  PATTERNS "\"relation\": \"prefill_multiple\"" "\"blocks_per_block\": 2,"
  ARGS ${FALCON_P1_D4} --json)
# Falcon-H1 P TP4 -> D TP1: D = 2 P blocks, which vLLM serves (no refusal note); D reads one head
# from each of P ranks 0 and 2, two token runs per D block: 2 x 2 = 4 pieces.
pdkv_cli_expect(cli_blocks_decode_multiple 0
  PATTERNS "prefill kernel 400 tokens, decode kernel 800 tokens: decode block = 2 prefill blocks$"
           "^  attention from [[]0,2[]], descriptors per block per layer: 4$"
  ARGS plan --model falcon-h1-0.5b --prefill-tp 4 --decode-tp 1)
add_test(NAME cli_blocks_decode_multiple_no_refusal
  COMMAND sh -c "out=$(\"$0\" \"$@\" 2>&1) || exit 1; if printf '%s\\n' \"$out\" | grep -q 'vLLM refuses'; then printf '%s\\n' \"$out\"; echo 'FAIL: vLLM serves D = N P blocks'; exit 1; fi; echo PASS"
          $<TARGET_FILE:pdkv_cli> plan --model falcon-h1-0.5b --prefill-tp 4 --decode-tp 1)
# Nemotron-H-8B (8 KV heads) P TP2 -> D TP1 with FlashInfer on P: P kernel 16, D kernel 1040 =
# 65 P blocks; heads sharded over two P ranks, which vLLM refuses with heterogeneous block sizes;
# pdkv: 65 runs x 8 heads = 520 pieces.
pdkv_cli_expect(cli_blocks_decode_multiple_head_sharded 0
  PATTERNS "decode block = 65 prefill blocks$"
           "note: vLLM refuses this pair: heterogeneous block sizes with head-sharded attention reads"
           "descriptors per block per layer: 520$"
  ARGS plan --model nemotron-h-8b --prefill-tp 2 --decode-tp 1 --prefill-backend flashinfer)
# Equal kernel blocks: one piece per read.
pdkv_cli_expect(cli_blocks_equal 0
  PATTERNS "prefill kernel 800 tokens, decode kernel 800 tokens: equal$" "descriptors per block per layer: 1$"
  ARGS plan --model falcon-h1-0.5b --prefill-tp 2 --decode-tp 2)
# Not multiples (P 1056, D 2096): 2 to 3 P blocks per D block, 1 head each.
pdkv_cli_expect(cli_blocks_not_multiples 0
  PATTERNS "note: vLLM refuses this pair [(]block_size_ratio = decode/prefill kernel block = 2096/1056 is not a whole number"
           "descriptors per block per layer: 2 to 3 [(]one per head and token run: 1 heads x 2 to 3 prefill blocks"
  ARGS ${N30})

# --- repeated flags and --block-size 0 are usage errors naming the flag ----------------------------
pdkv_cli_expect(cli_repeated_flag 1 PATTERNS "usage error: flag --prefill-tp is given more than once"
  ARGS plan --model nemotron-3-nano-30b --prefill-tp 2 --prefill-tp 4 --decode-tp 2)
pdkv_cli_expect(cli_repeated_flag_inline_form 1 PATTERNS "usage error: flag --block-size is given more than once"
  ARGS ${N30} --block-size=16 --block-size 32)
pdkv_cli_expect(cli_repeated_switch 1 PATTERNS "\"message\": \"flag --json is given more than once"
  ARGS ${N30} --json --json)
pdkv_cli_expect(cli_zero_block_size 1 PATTERNS "usage error: --block-size must be a positive integer, got '0'"
  ARGS ${N30} --block-size 0)
pdkv_cli_expect(cli_zero_block_size_inline 1 PATTERNS "usage error: --block-size must be a positive integer, got '0'"
  ARGS ${N30} --block-size=0)

# --- a tool: --version, --help everywhere, strict arguments, suggestions, flag terms ------------
pdkv_cli_expect(cli_version_flag 0 PATTERNS "^pdkv [0-9]+[.][0-9]+[.][0-9]+$" ARGS --version)
pdkv_cli_expect(cli_version_command 0 PATTERNS "^pdkv [0-9]+[.][0-9]+[.][0-9]+$" ARGS version)
pdkv_cli_expect(cli_help 0 PATTERNS "^usage: pdkv COMMAND" "^  3  internal error" "docs/cli-json[.]md" ARGS --help)
pdkv_cli_expect(cli_help_short 0 PATTERNS "^usage: pdkv COMMAND" ARGS -h)
pdkv_cli_expect(cli_help_plan 0 PATTERNS "^usage: pdkv plan --model" "^  --decode-tp N" "^exit status:" ARGS plan --help)
pdkv_cli_expect(cli_help_plan_via_help 0 PATTERNS "^usage: pdkv plan --model" ARGS help plan)
pdkv_cli_expect(cli_help_presets 0 PATTERNS "^usage: pdkv presets" ARGS presets --help)
pdkv_cli_expect(cli_help_version 0 PATTERNS "^usage: pdkv version" ARGS version -h)
pdkv_cli_expect(cli_help_help 0 PATTERNS "^usage: pdkv help" ARGS help help)
# --help wins over anything else on the line, even an unknown flag.
pdkv_cli_expect(cli_help_wins 0 PATTERNS "^usage: pdkv plan" ARGS plan --frobnicate --help)
pdkv_cli_expect(cli_no_command 1 PATTERNS "usage error: no command given" "run 'pdkv --help' for usage" ARGS)
pdkv_cli_expect(cli_flag_before_command 1 PATTERNS "unknown flag '--json' before the command" ARGS --json plan)
pdkv_cli_expect(cli_unknown_global_flag 1 PATTERNS "unknown flag '--versoin' before the command.*did you mean '--version'[?]"
  ARGS --versoin)
pdkv_cli_expect(cli_unknown_flag_suggestion 1
  PATTERNS "unknown flag '--prefil-tp' for 'pdkv plan'; did you mean '--prefill-tp'[?]$"
  ARGS plan --model nemotron-3-nano-30b --prefil-tp 4 --decode-tp 2)
pdkv_cli_expect(cli_unknown_flag_abbreviation 1
  PATTERNS "unknown flag '--prefill' for 'pdkv plan'; did you mean '--prefill-tp', '--prefill-pp', '--prefill-kv-layout', '--prefill-kv-cache-dtype', '--prefill-mamba-cache-dtype', '--prefill-mamba-ssm-cache-dtype' or '--prefill-backend'[?]"
  ARGS plan --model nemotron-3-nano-30b --prefill 4)
pdkv_cli_expect(cli_unknown_flag_far 1 PATTERNS "unknown flag '--xyz' for 'pdkv plan'$" ARGS plan --xyz)
pdkv_cli_expect(cli_unknown_command_suggestion 1 PATTERNS "unknown command 'plann'; did you mean 'plan'[?]" ARGS plann)
pdkv_cli_expect(cli_help_unknown_command 1 PATTERNS "unknown command 'prests'; did you mean 'presets'[?]"
  ARGS help prests)
pdkv_cli_expect(cli_help_extra_argument 1 PATTERNS "'pdkv help' takes at most one command, got 'plan'" ARGS help plan plan)
pdkv_cli_expect(cli_plan_stray_argument 1 PATTERNS "unexpected argument 'extra': 'pdkv plan' takes only flags"
  ARGS ${N30} extra)
pdkv_cli_expect(cli_plan_positional_flag_name 1 PATTERNS "unexpected argument 'json'.*did you mean '--json'[?]"
  ARGS ${N30} json)
pdkv_cli_expect(cli_presets_stray_argument 1 PATTERNS "unexpected argument 'all': 'pdkv presets' takes only flags"
  ARGS presets all)
pdkv_cli_expect(cli_presets_unknown_flag 1 PATTERNS "unknown flag '--jsn' for 'pdkv presets'; did you mean '--json'[?]"
  ARGS presets --jsn)
pdkv_cli_expect(cli_version_stray_argument 1 PATTERNS "unexpected argument 'now'" ARGS version now)
pdkv_cli_expect(cli_value_is_a_flag 1 PATTERNS "flag --model needs a value, got the flag '--prefill-tp'"
  ARGS plan --model --prefill-tp 4 --decode-tp 2)
pdkv_cli_expect(cli_missing_value 1 PATTERNS "flag --decode-tp needs a value$" ARGS plan --model x --prefill-tp 1 --decode-tp)
pdkv_cli_expect(cli_switch_with_value 1 PATTERNS "flag --json takes no value, got 'yes'" ARGS ${N30} --json=yes)
pdkv_cli_expect(cli_zero_tp 1 PATTERNS "--prefill-tp must be a positive integer, got '0'"
  ARGS plan --model nemotron-3-nano-30b --prefill-tp 0 --decode-tp 2)
pdkv_cli_expect(cli_cache_mode_suggestion 1 PATTERNS "--mamba-cache-mode 'alig' is not one of none, align, all; did you mean 'align'[?]"
  ARGS ${N30} --mamba-cache-mode alig)
pdkv_cli_expect(cli_preset_suggestion 1 PATTERNS "unknown model preset 'nemotron-3-nano-3b'.*did you mean 'nemotron-3-nano-30b'[?]"
  ARGS plan --model nemotron-3-nano-3b --prefill-tp 1 --decode-tp 1)
pdkv_cli_expect(cli_backend_suggestion 1 PATTERNS "--decode-backend: PDKV_ERR_NOT_FOUND: .*'flashinfr'.*did you mean 'flashinfer'[?]"
  ARGS ${N30} --decode-backend flashinfr)
# Messages speak of prefill and decode, as the flags do: never the library's local / remote.
foreach(case "3;2" "2;3" "4;6")
  list(GET case 0 p)
  list(GET case 1 d)
  add_test(NAME cli_flag_terms_tp_${p}_${d}
    COMMAND sh -c "out=$(\"$0\" \"$@\" 2>&1); rc=$?; printf '%s\\n' \"$out\"; [ $rc -eq 2 ] || { echo \"FAIL: exit $rc, expected 2\"; exit 1; }; printf '%s\\n' \"$out\" | grep -q -- '--decode-tp ${d} and --prefill-tp ${p}' || { echo 'FAIL: flags not named'; exit 1; }; if printf '%s\\n' \"$out\" | grep -Eiq '(^|[^a-z_])(local|remote)([^a-z]|$)'; then echo 'FAIL: says local/remote'; exit 1; fi; echo PASS"
            $<TARGET_FILE:pdkv_cli> plan --model nemotron-3-nano-30b --prefill-tp ${p} --decode-tp ${d})
endforeach()

# --- --json: errors as JSON on stdout, nothing on stderr; the schema check ----------------------
add_test(NAME cli_json_usage_error_on_stdout
  COMMAND sh -c "out=$(\"$0\" \"$@\" 2>/dev/null); rc=$?; err=$(\"$0\" \"$@\" 2>&1 >/dev/null); printf '%s\\n' \"$out\"; [ $rc -eq 1 ] || { echo \"FAIL: exit $rc\"; exit 1; }; [ -z \"$err\" ] || { echo \"FAIL: stderr: $err\"; exit 1; }; printf '%s\\n' \"$out\" | grep -q '\"suggestion\": \"did you mean .--prefill-tp.?\"' || { echo 'FAIL: no suggestion in JSON'; exit 1; }; echo PASS"
          $<TARGET_FILE:pdkv_cli> plan --model nemotron-3-nano-30b --prefil-tp 4 --decode-tp 2 --json)
pdkv_cli_expect(cli_json_config_json_error 2
  PATTERNS "\"kind\": \"configuration\"" "\"where\": \"--model\"" "\"exit_status\": 2" "\"schema_version\": 1"
  ARGS plan --model ${PDKV_CLI_NO_TYPE} --prefill-tp 1 --decode-tp 1 --json)
pdkv_cli_expect(cli_json_descriptor_count_is_an_object 0
  PATTERNS "\"detail\": \"one per head and token run: 1 heads x 2 to 3 prefill blocks per decode block\"" "\"min\": 2$"
  ARGS ${N30} --json)
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME cli_json_schema
    COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tests/cli_json_schema_test.py $<TARGET_FILE:pdkv_cli>
            ${PROJECT_SOURCE_DIR}/docs/cli-json.schema.json ${PROJECT_SOURCE_DIR}/docs/cli-json.md)
else()
  # Without Python the schema check cannot run; fail loudly instead of dropping it.
  add_test(NAME cli_json_schema COMMAND sh -c "echo 'FAIL: python3 not found: the --json schema check cannot run'; exit 1")
endif()

# --- pdkv demo: small runs of the default deployment (six processes), checked through the exit
# status and the --json summary (tests/demo_test.py). Serial: each starts six rank processes
# and times its transfers against their deadline.
if(Python3_Interpreter_FOUND)
  foreach(case shm_read tcp_write kill fault_flip fault_stray usage)
    add_test(NAME cli_demo_${case}
      COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tests/demo_test.py $<TARGET_FILE:pdkv_cli> ${case})
    set_tests_properties(cli_demo_${case} PROPERTIES RUN_SERIAL TRUE TIMEOUT 180 LABELS demo)
  endforeach()
else()
  add_test(NAME cli_demo COMMAND sh -c "echo 'FAIL: python3 not found: the demo checks cannot run'; exit 1")
endif()
