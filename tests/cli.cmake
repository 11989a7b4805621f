# Smoke tests of the `pdkv plan` main job: worked numbers must appear in the output, and bad
# input must exit non-zero naming the offending value. (Simple regexes: CTest's engine
# backtracks badly on nested groups.)
function(pdkv_cli_test name regex)
  add_test(NAME ${name} COMMAND pdkv_cli ${ARGN})
  set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "${regex}")
endfunction()

set(N30 plan --model nemotron-3-nano-30b --prefill-tp 4 --decode-tp 2)
pdkv_cli_test(cli_plan_conv_bytes "conv state bytes / rank +9216 B [^\n]+18432 B" ${N30})
pdkv_cli_test(cli_plan_ssm_bytes "SSM state bytes / rank +524288 B [^\n]+1048576 B" ${N30})
pdkv_cli_test(cli_plan_block_sizes "attention block size [(]tokens[)] +1056 +2096" ${N30})
pdkv_cli_test(cli_plan_padding_log "Padding mamba page size by 0[.]58% to ensure" ${N30})
pdkv_cli_test(cli_plan_non_multiple_blocks "decode kernel 2096 tokens: not multiples" ${N30})
pdkv_cli_test(cli_plan_rank1_sources "Decode rank 1: handshake with prefill ranks [[]2,3[]]" ${N30})
pdkv_cli_test(cli_plan_json "\"block_size\": 272" plan --model qwen3-next-80b --prefill-tp 4 --decode-tp 4 --json)
pdkv_cli_test(cli_plan_falcon_55208 "issue #55208" plan --model falcon-h1-0.5b --prefill-tp 1 --decode-tp 2)
pdkv_cli_test(cli_plan_bad_tp_names_values "TP_NOT_DIVISIBLE: local tp_size 2 and remote tp_size 3"
  plan --model nemotron-3-nano-30b --prefill-tp 3 --decode-tp 2)
pdkv_cli_test(cli_plan_config_json "attention block size [(]tokens[)] +2096 +2096"
  plan --model ${PROJECT_SOURCE_DIR}/tests/data/hf_configs/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json
  --prefill-tp 2 --decode-tp 2)
add_test(NAME cli_plan_bad_tp_exit_status COMMAND sh -c
  "$<TARGET_FILE:pdkv_cli> plan --model nemotron-3-nano-30b --prefill-tp 3 --decode-tp 2 >/dev/null; test $? -eq 2")
add_test(NAME cli_unknown_preset COMMAND sh -c
  "$<TARGET_FILE:pdkv_cli> plan --model no-such-model --prefill-tp 1 --decode-tp 1 2>&1; test $? -eq 1")
set_tests_properties(cli_unknown_preset PROPERTIES PASS_REGULAR_EXPRESSION "no-such-model")
add_test(NAME cli_unknown_flag COMMAND sh -c
  "$<TARGET_FILE:pdkv_cli> plan --model x --frobnicate 1 2>&1; test $? -eq 1")
set_tests_properties(cli_unknown_flag PROPERTIES PASS_REGULAR_EXPRESSION "--frobnicate")
