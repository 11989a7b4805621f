// Handshake validation: one test per rule of docs/semantics.md §5 (with the values checked in the
// message), one per vLLM rejection that pdkv deliberately accepts, and "every problem is reported".
#include <gtest/gtest.h>

#include <algorithm>

#include "pdkv/core/handshake.hpp"

using namespace pdkv::core;

namespace {

constexpr uint64_t kNanoFingerprint = 0x85f1d3f73a3e02c8ull;

uint64_t ceil_div_u64(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Nemotron-3-Nano-30B with fp8 KV at TP `tp` (K=2 heads of 128, Mamba2 x/B/C sharded since
// n_groups 8 >= tp, fp32 SSM). Kernel block 16; ppl = ceil(mamba page / kernel page), giving the
// docs/semantics.md §4 values: 261 at TP1/TP2, 131 at TP4.
EngineMetadata nemotron(uint32_t tp, uint32_t rank, std::string id, bool prefix_caching = false) {
  EngineMetadata m;
  m.engine_id = std::move(id);
  m.tp_size = tp;
  m.tp_rank = rank;
  m.total_kv_heads = 2;
  const uint64_t heads = std::max<uint64_t>(1, 2 / tp);
  m.attention_bytes_per_token = heads * (128 + 128) * 1;
  m.kernel_block_size = 16;
  m.mamba_type = MambaType::Mamba2;
  m.conv_projection_bytes = {24576 / tp, 6144 / tp, 6144 / tp};
  m.conv_bytes = 36864 / tp;
  m.ssm_bytes = 2097152 / tp;
  const uint64_t block_len = 16 * m.attention_bytes_per_token;
  m.physical_blocks_per_logical =
      static_cast<uint32_t>(ceil_div_u64(m.conv_bytes + m.ssm_bytes, block_len));
  m.logical_block_size = 16 * m.physical_blocks_per_logical;
  m.num_kernel_blocks = uint64_t{m.physical_blocks_per_logical} * 50;
  m.prefix_caching = prefix_caching;
  m.cache_mode = prefix_caching ? MambaCacheMode::Align : MambaCacheMode::None;
  m.model_fingerprint = kNanoFingerprint;
  for (uint32_t i = 0; i < 3; ++i) {
    m.regions.push_back({{(uint64_t{i} + 1) << 36, block_len, m.num_kernel_blocks},
                         i == 1 ? RegionKind::Attention : RegionKind::Mamba, i});
  }
  check_metadata(m, Status::InvalidArgument);  // the fixture itself must be well-formed
  return m;
}

// Pure attention, K=8 heads of 128, bf16, 2 layers: a = heads_per_rank * 512 bytes per token.
EngineMetadata llama(uint32_t tp, uint32_t rank, std::string id, uint32_t kernel_block = 16) {
  EngineMetadata m;
  m.engine_id = std::move(id);
  m.tp_size = tp;
  m.tp_rank = rank;
  m.total_kv_heads = 8;
  m.attention_bytes_per_token = std::max<uint64_t>(1, 8 / tp) * 256 * 2;
  m.kernel_block_size = kernel_block;
  m.logical_block_size = kernel_block;
  m.num_kernel_blocks = 1000;
  m.model_fingerprint = 0x1234;
  for (uint32_t i = 0; i < 2; ++i) {
    m.regions.push_back({{(uint64_t{i} + 1) << 36, kernel_block * m.attention_bytes_per_token,
                          1000},
                         RegionKind::Attention, i});
  }
  check_metadata(m, Status::InvalidArgument);
  return m;
}

const Incompatibility* find(const std::vector<Incompatibility>& items, const std::string& field) {
  for (const auto& it : items)
    if (it.field == field) return &it;
  return nullptr;
}

std::string dump(const std::vector<Incompatibility>& items) {
  std::string s;
  for (const auto& it : items) s += "\n  " + to_string(it);
  return s;
}

// Expects an item for `field` with `status`, whose rendered text contains every needle.
void expect_item(const std::vector<Incompatibility>& items, const std::string& field,
                 Status status, std::initializer_list<std::string> needles) {
  const Incompatibility* it = find(items, field);
  ASSERT_NE(it, nullptr) << "no item for " << field << dump(items);
  EXPECT_EQ(it->status, status) << to_string(*it);
  EXPECT_FALSE(it->fix.empty()) << to_string(*it);
  const std::string text = to_string(*it);
  for (const auto& n : needles) {
    EXPECT_NE(text.find(n), std::string::npos) << "'" << n << "' missing in: " << text;
  }
}

}  // namespace

// ---- fixtures reproduce the reference numbers ----
TEST(HandshakeFixture, NemotronPplMatchesReference) {
  EXPECT_EQ(nemotron(1, 0, "a").physical_blocks_per_logical, 261u);
  EXPECT_EQ(nemotron(2, 0, "a").physical_blocks_per_logical, 261u);
  EXPECT_EQ(nemotron(4, 0, "a").physical_blocks_per_logical, 131u);
}

// ---- supported pairs ----
TEST(Handshake, CompatiblePairsHaveNoItems) {
  EXPECT_TRUE(validate_pair(nemotron(2, 0, "d"), nemotron(2, 1, "p")).empty());
  // heterogeneous TP both ways, GQA replication on the TP4/TP8 side
  for (auto [dt, pt] : {std::pair{1u, 2u}, {2u, 1u}, {4u, 2u}, {2u, 4u}, {8u, 1u}, {1u, 4u}}) {
    const auto items = validate_pair(nemotron(dt, 0, "d"), nemotron(pt, 0, "p"));
    EXPECT_TRUE(items.empty()) << "D TP" << dt << " <- P TP" << pt << dump(items);
  }
  EXPECT_TRUE(validate_pair(llama(4, 3, "d"), llama(2, 1, "p")).empty());
  EXPECT_TRUE(validate_pair(llama(2, 0, "d"), llama(8, 0, "p")).empty());
  EXPECT_NO_THROW(require_compatible(llama(8, 0, "d"), llama(2, 0, "p")));
}

// vLLM (#42097, still on main): "Prefix caching with heterogeneous physical_blocks_per_logical is
// not supported for Mamba hybrid models" RuntimeError. pdkv aligns by token offset instead.
TEST(HandshakeBeyondVllm, HeterogeneousPplWithPrefixCaching) {
  const EngineMetadata d = nemotron(2, 0, "d", /*prefix_caching=*/true);  // ppl 261
  const EngineMetadata p = nemotron(4, 0, "p", /*prefix_caching=*/true);  // ppl 131
  ASSERT_NE(d.physical_blocks_per_logical, p.physical_blocks_per_logical);
  const auto items = validate_pair(d, p);
  EXPECT_TRUE(items.empty()) << dump(items);
}

// vLLM: block_size_ratio = local/remote kernel block must be an integer ("Only nP < nD
// supported"). pdkv accepts kernel blocks that are not multiples of each other, both ways.
TEST(HandshakeBeyondVllm, KernelBlockSizesNotMultiples) {
  for (auto [lb, rb] : {std::pair{16u, 48u}, {48u, 32u}, {16u, 24u}}) {
    const auto items = validate_pair(llama(2, 0, "d", lb), llama(2, 0, "p", rb));
    EXPECT_TRUE(items.empty()) << lb << " vs " << rb << dump(items);
  }
}

// vLLM before 07-28: "HMA does not support different remote block size yet" for every hybrid.
TEST(HandshakeBeyondVllm, HybridWithDifferentBlockSizes) {
  EngineMetadata d = nemotron(2, 0, "d", true);
  EngineMetadata p = nemotron(2, 0, "p", true);
  // P on a backend with kernel block 32: same per-token bytes, twice the kernel page.
  p.kernel_block_size = 32;
  p.physical_blocks_per_logical = 131;
  p.logical_block_size = 32 * 131;
  p.num_kernel_blocks = 131 * 50;
  for (auto& r : p.regions) r.region = {r.region.base, 32 * 256, p.num_kernel_blocks};
  check_metadata(p, Status::InvalidArgument);
  const auto items = validate_pair(d, p);
  EXPECT_TRUE(items.empty()) << dump(items);
}

// ---- one test per rule ----
TEST(HandshakeRules, TpNotDivisible) {
  const auto items = validate_pair(llama(2, 0, "d"), llama(3, 0, "p"));
  expect_item(items, "tp_size", Status::TpNotDivisible,
              {"local tp_size 2 and remote tp_size 3 do not divide each other", "multiple"});
}

TEST(HandshakeRules, HeadsNotDivisibleByTp) {
  const auto items = validate_pair(llama(2, 0, "d"), llama(3, 0, "p"));
  const auto it = std::find_if(items.begin(), items.end(), [](const auto& i) {
    return i.status == Status::HeadsNotDivisible;
  });
  ASSERT_NE(it, items.end()) << dump(items);
  EXPECT_NE(to_string(*it).find("tp_size 3 and total_kv_heads 8"), std::string::npos);
  EXPECT_EQ(it->remote_value, "3");
}

TEST(HandshakeRules, ModelFingerprintMismatch) {
  EngineMetadata p = nemotron(2, 0, "p");
  p.model_fingerprint = 0xdeadbeef;
  expect_item(validate_pair(nemotron(2, 0, "d"), p), "model_fingerprint", Status::Incompatible,
              {"0x85f1d3f73a3e02c8", "0x00000000deadbeef", "same model"});
}

TEST(HandshakeRules, MlaMismatch) {
  EngineMetadata p = llama(2, 0, "p");
  p.use_mla = true;
  p.total_kv_heads = 1;
  const auto items = validate_pair(llama(2, 0, "d"), p);
  expect_item(items, "use_mla", Status::Incompatible, {"local: off", "remote: on"});
  expect_item(items, "total_kv_heads", Status::Incompatible, {"8 vs 1"});
}

// Different layouts are served by permuting on receive; heterogeneous heads need HND on at
// least one side (the side read from: the plan checks which).
TEST(HandshakeRules, KvLayoutsMayDifferTheReaderPermutes) {
  EngineMetadata p = llama(2, 0, "p");
  p.kv_layout = KvLayout::NHD;
  EXPECT_TRUE(validate_pair(llama(2, 0, "d"), p).empty());
  EngineMetadata d4 = llama(4, 0, "d");
  d4.kv_layout = KvLayout::NHD;
  EXPECT_TRUE(validate_pair(d4, llama(2, 0, "p")).empty());  // D NHD permutes P's HND head slices
  p.kv_layout = KvLayout::NHD;
  expect_item(validate_pair(d4, p), "kv_layout", Status::UnsupportedLayout,
              {"2 vs 4 KV heads per rank", "HND KV cache layout on the prefill engine"});
}

// vLLM: "Heterogeneous TP head-dimension splitting requires contiguous heads" (HND).
TEST(HandshakeRules, HeadSplittingNeedsHnd) {
  EngineMetadata d = llama(4, 0, "d");
  EngineMetadata p = llama(2, 0, "p");
  d.kv_layout = p.kv_layout = KvLayout::NHD;
  expect_item(validate_pair(d, p), "kv_layout", Status::UnsupportedLayout,
              {"2 vs 4 KV heads per rank", "HND"});
  // Same TP: no head split, NHD on both sides is fine.
  EngineMetadata p2 = llama(4, 1, "p");
  p2.kv_layout = KvLayout::NHD;
  EXPECT_TRUE(validate_pair(d, p2).empty());
  // MLA: one latent head, never split, layout irrelevant.
  EngineMetadata ml = d, mr = p;
  for (EngineMetadata* m : {&ml, &mr}) {
    m->use_mla = true;
    m->total_kv_heads = 1;
    m->attention_bytes_per_token = 1152;
    for (auto& r : m->regions) r.region.block_len = 16 * 1152;
  }
  mr.kv_layout = KvLayout::HND;
  EXPECT_TRUE(validate_pair(ml, mr).empty()) << dump(validate_pair(ml, mr));
}

TEST(HandshakeRules, ConvLayoutMustBeDs) {
  EngineMetadata p = nemotron(2, 0, "p");
  p.conv_layout = ConvLayout::SD;
  expect_item(validate_pair(nemotron(2, 0, "d"), p), "conv_layout", Status::UnsupportedLayout,
              {"remote engine 'p'", "VLLM_SSM_CONV_STATE_LAYOUT=DS"});
}

TEST(HandshakeRules, UnsupportedMambaType) {
  EngineMetadata d = nemotron(2, 0, "d");
  EngineMetadata p = nemotron(2, 0, "p");
  d.mamba_type = p.mamba_type = MambaType::ShortConv;
  expect_item(validate_pair(d, p), "mamba_type", Status::UnsupportedMambaType,
              {"short_conv", "no conv-state split rule"});
}

TEST(HandshakeRules, MambaTypeMismatch) {
  EngineMetadata p = nemotron(2, 0, "p");
  p.mamba_type = MambaType::Gdn;
  expect_item(validate_pair(nemotron(2, 0, "d"), p), "mamba_type", Status::Incompatible,
              {"mamba2 vs gdn"});
}

// pdkv refuses, vLLM does not compare: the cache mode decides which state block of a request
// moves, so hybrids caching Mamba state differently cannot be paired. Pure attention models
// carry no Mamba state: their modes are not compared.
TEST(HandshakeRules, MambaCacheModesMustMatch) {
  EngineMetadata d = nemotron(2, 0, "d", /*prefix_caching=*/true);  // align
  EngineMetadata p = nemotron(4, 0, "p", /*prefix_caching=*/true);
  EXPECT_TRUE(validate_pair(d, p).empty()) << dump(validate_pair(d, p));
  p.cache_mode = MambaCacheMode::All;
  expect_item(validate_pair(d, p), "cache_mode", Status::Incompatible,
              {"local align, remote all", "--mamba-cache-mode"});
  EXPECT_EQ(validate_pair(d, p).size(), 1u) << dump(validate_pair(d, p));
  expect_item(validate_pair(nemotron(2, 0, "d"), nemotron(2, 0, "p", true)), "cache_mode", Status::Incompatible,
              {"local none, remote align"});
  EngineMetadata ld = llama(2, 0, "d");
  EngineMetadata lp = llama(2, 0, "p");
  lp.cache_mode = MambaCacheMode::Align;
  EXPECT_EQ(find(validate_pair(ld, lp), "cache_mode"), nullptr);
}

TEST(HandshakeRules, RegionCountMismatch) {
  EngineMetadata p = nemotron(2, 0, "p");
  p.regions.pop_back();
  expect_item(validate_pair(nemotron(2, 0, "d"), p), "regions", Status::Incompatible,
              {"region counts differ (3 vs 2)"});
}

TEST(HandshakeRules, RegionKindMismatch) {
  EngineMetadata p = nemotron(2, 0, "p");
  p.regions[0].kind = RegionKind::Attention;
  p.regions[2].kind = RegionKind::Attention;
  expect_item(validate_pair(nemotron(2, 0, "d"), p), "regions[0].kind", Status::Incompatible,
              {"2 regions differ in kind, first at index 0", "local: mamba", "remote: attention"});
}

// vLLM: dst_num_blocks / per-region block counts must agree with the advertised num_blocks.
TEST(HandshakeRules, RegionNumBlocksMismatch) {
  EngineMetadata p = nemotron(2, 0, "p");
  p.regions[1].region.num_blocks = 999;
  expect_item(validate_pair(nemotron(2, 0, "d"), p), "regions[1].num_blocks",
              Status::Incompatible, {"has 999 kernel blocks", "num_kernel_blocks 13050"});
}

TEST(HandshakeRules, BlockLenInconsistentWithKernelPage) {
  EngineMetadata d = llama(2, 0, "d");
  d.regions[0].region.block_len = 8192;  // should be 16 * 2048 = 32768
  expect_item(validate_pair(d, llama(2, 0, "p")), "regions[0].block_len", Status::Incompatible,
              {"block_len 8192 != kernel_block_size 16 * attention_bytes_per_token 2048 = 32768"});
}

// #45879 (issue #45330): the remote page follows the per-rank HEAD ratio, not the TP ratio. With
// K=2, TP4 and TP2 both hold one head per rank, so equal pages are right (the pre-06-17 rule
// "remote = local * tp_ratio" rejected this), and a page that follows the TP ratio is wrong.
TEST(HandshakeRules, BlockLenFollowsHeadRatio45879) {
  EXPECT_TRUE(validate_pair(nemotron(4, 0, "d"), nemotron(2, 0, "p")).empty());
  EngineMetadata d = llama(4, 0, "d");  // 2 heads/rank: 1024 B/token
  EngineMetadata p = llama(2, 0, "p");  // 4 heads/rank: must be 2048 B/token
  p.attention_bytes_per_token = 1024;
  for (auto& r : p.regions) r.region.block_len = 16 * 1024;
  expect_item(validate_pair(d, p), "attention_bytes_per_token", Status::Incompatible,
              {"local: 1024", "remote: 1024", "local 2 heads/rank, remote 4 heads/rank", "#45879"});
}

TEST(HandshakeRules, KvDtypeMismatchShowsAsPerTokenBytes) {
  EngineMetadata p = llama(2, 0, "p");
  p.attention_bytes_per_token /= 2;  // fp8 KV on P, bf16 on D
  for (auto& r : p.regions) r.region.block_len /= 2;
  expect_item(validate_pair(llama(2, 0, "d"), p), "attention_bytes_per_token",
              Status::Incompatible, {"local: 2048", "remote: 1024"});
}

TEST(HandshakeRules, SsmBytesMustScaleWithTp) {
  EngineMetadata p = nemotron(1, 0, "p");  // fp32 SSM: 2097152 at TP1
  p.ssm_bytes = 1048576;                  // bf16 SSM instead
  expect_item(validate_pair(nemotron(2, 0, "d"), p), "ssm_bytes", Status::Incompatible,
              {"local 1048576 * tp 2 != remote 1048576 * tp 1", "mamba-ssm-cache-dtype"});
}

TEST(HandshakeRules, ConvProjectionMustScaleWithTp) {
  EngineMetadata p = nemotron(2, 0, "p");
  p.conv_projection_bytes = {12288 + 4096, 3072, 3072};  // e.g. one more speculative row
  p.conv_bytes = 12288 + 4096 + 6144;
  expect_item(validate_pair(nemotron(2, 0, "d"), p), "conv_projection_bytes[0]",
              Status::Incompatible, {"local 12288 * tp 2 != remote 16384 * tp 2"});
}

// vLLM asserts for non-MLA, non-Mamba models: tp_ratio < 0 with a replicated remote.
TEST(HandshakeRules, PureAttentionReplicatedRemoteWithMoreRanks) {
  const auto items = validate_pair(llama(4, 0, "d"), llama(16, 0, "p"));
  expect_item(items, "tp_size", Status::Incompatible,
              {"remote tp_size 16 > local tp_size 4", "replicated remote KV heads (8 heads)"});
  // Hybrids allow it: every P rank is read (SSM shards), so every P rank is released.
  EXPECT_TRUE(validate_pair(nemotron(1, 0, "d"), nemotron(4, 0, "p")).empty());
}

// An agent's admission does not know which engine will read: the pair above is admitted there
// (it is served with the TP16 engine as D), whichever side is passed first; the refused direction
// is left to the plan context. A pair no direction serves is refused with validate_pair's items.
TEST(HandshakeRules, EitherRoleAdmitsAPairServedInOneDirectionOnly) {
  const auto d4 = llama(4, 0, "d"), p16 = llama(16, 0, "p");
  EXPECT_FALSE(validate_pair(d4, p16).empty());
  EXPECT_TRUE(validate_pair(p16, d4).empty());
  EXPECT_TRUE(validate_pair_either_role(d4, p16).empty());
  EXPECT_TRUE(validate_pair_either_role(p16, d4).empty());
  const auto p3 = llama(3, 0, "p");
  EXPECT_FALSE(validate_pair(d4, p3).empty());
  expect_item(validate_pair_either_role(d4, p3), "tp_size", Status::TpNotDivisible, {"do not divide each other"});
  expect_item(validate_pair_either_role(p3, d4), "tp_size", Status::TpNotDivisible, {"do not divide each other"});
}

TEST(HandshakeRules, SameEngineId) {
  expect_item(validate_pair(llama(2, 0, "x"), llama(2, 1, "x")), "engine_id",
              Status::Incompatible, {"'x'", "two distinct engines"});
}

// ---- all problems at once ----
TEST(Handshake, ReportsEveryIncompatibilityNotJustTheFirst) {
  EngineMetadata d = nemotron(2, 0, "d");
  EngineMetadata p = nemotron(2, 0, "p");
  p.model_fingerprint = 1;
  p.conv_layout = ConvLayout::SD;
  p.ssm_bytes = 1000;  // still fits the page
  p.regions.pop_back();
  d.engine_id = "p";
  const auto items = validate_pair(d, p);
  for (const char* f : {"engine_id", "model_fingerprint", "conv_layout", "ssm_bytes", "regions"}) {
    EXPECT_NE(find(items, f), nullptr) << f << dump(items);
  }
  EXPECT_EQ(items.size(), 5u) << dump(items);
  try {
    require_compatible(d, p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Incompatible);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("5 problem(s)"), std::string::npos) << msg;
    for (const auto& it : items) EXPECT_NE(msg.find(to_string(it)), std::string::npos) << msg;
  }
}

// ---- ranks of one remote engine ----
TEST(EngineRanks, MustAgreeAndBeDistinct) {
  std::vector<EngineMetadata> ranks = {nemotron(4, 0, "p"), nemotron(4, 1, "p"),
                                       nemotron(4, 2, "p")};
  EXPECT_TRUE(validate_engine_ranks(ranks).empty());
  ranks[2].num_kernel_blocks = 131 * 40;
  ranks[1].tp_rank = 0;
  const auto items = validate_engine_ranks(ranks);
  expect_item(items, "num_kernel_blocks", Status::Incompatible, {"6550 vs 5240"});
  expect_item(items, "tp_rank", Status::Incompatible, {"repeats a tp_rank"});
}

// The ranks of one engine must agree on the element formats they name: D checks each P rank
// against its own formats, which passes anything when D names none, so a P engine whose ranks
// store the KV cache in two fp8 formats would hand D bytes it decodes two ways.
TEST(EngineRanks, NamedFormatsMustAgreeAcrossRanks) {
  std::vector<EngineMetadata> ranks = {nemotron(4, 0, "p"), nemotron(4, 1, "p"), nemotron(4, 2, "p")};
  ranks[0].kv_cache_format = ElementFormat::Fp8E4m3;
  ranks[2].kv_cache_format = ElementFormat::Fp8E5m2;
  expect_item(validate_engine_ranks(ranks), "kv_cache_format", Status::Incompatible,
              {"rank entry 2 (tp_rank 2) disagrees with rank entry 0 on kv_cache_format (fp8_e4m3 vs fp8_e5m2)"});
  // Unknown on a rank (sizes only, or an older pdkv) stays compatible, as in validate_pair.
  ranks[2].kv_cache_format = ElementFormat::Unknown;
  ranks[1].model_format = ElementFormat::BFloat16;
  EXPECT_TRUE(validate_engine_ranks(ranks).empty());
  ranks[2].model_format = ElementFormat::Float16;
  expect_item(validate_engine_ranks(ranks), "model_format", Status::Incompatible,
              {"rank entry 2 (tp_rank 2) disagrees with rank entry 1 on model_format (bfloat16 vs float16)"});
}

// Regions sharing bytes on either side (hand-built metadata; decode() refuses them already):
// a read into one would overwrite another layer's KV.
TEST(HandshakeRules, OverlappingRegions) {
  EngineMetadata d = llama(2, 0, "d");
  const uint64_t size = 16 * 2048 * 1000;  // block_len 16 tokens * 2048 B, 1000 blocks
  d.regions[1].region.base = d.regions[0].region.base + size - 1;
  const uint64_t b0 = d.regions[0].region.base;
  expect_item(validate_pair(d, llama(2, 0, "p")), "regions[1].base", Status::Incompatible,
              {"local engine 'd'", "regions[0] [" + std::to_string(b0) + ", " + std::to_string(b0 + size) +
                                   ") overlaps regions[1] [" + std::to_string(b0 + size - 1),
               "own non-overlapping address range"});
  EngineMetadata p = llama(2, 0, "p");
  p.regions[0].region.base = p.regions[1].region.base;
  const auto items = validate_pair(llama(2, 0, "d"), p);
  expect_item(items, "regions[1].base", Status::Incompatible, {"remote engine 'p'", "remote: "});
  // Touching is not overlapping.
  EngineMetadata t = llama(2, 0, "p");
  t.regions[1].region.base = t.regions[0].region.base + size;
  EXPECT_TRUE(validate_pair(llama(2, 0, "d"), t).empty()) << dump(validate_pair(llama(2, 0, "d"), t));
}

// A hybrid whose regions are all advertised as Mamba (first user a Mamba layer, as vLLM
// dedups HMA tensors) used to skip the bytes-per-token comparison entirely: P doubling
// attention_bytes_per_token (and block_len with it, so the kernel page rule holds) passed.
// The handshake now compares bytes per token per KV head for every model kind.
TEST(HandshakeRules, BytesPerTokenPerHeadComparedForAllMambaRegionHybrids) {
  auto all_mamba = [](EngineMetadata m) {
    for (auto& r : m.regions) r.kind = RegionKind::Mamba;
    check_metadata(m, Status::InvalidArgument);
    return m;
  };
  const EngineMetadata d = all_mamba(nemotron(2, 0, "d"));
  EXPECT_TRUE(validate_pair(d, all_mamba(nemotron(2, 0, "p"))).empty());
  EXPECT_TRUE(validate_pair(d, all_mamba(nemotron(4, 0, "p"))).empty());
  EngineMetadata p = all_mamba(nemotron(2, 0, "p"));
  p.attention_bytes_per_token *= 2;  // 512 B per token for one head: 512 B per head vs 256
  for (auto& r : p.regions) r.region.block_len *= 2;
  p = all_mamba(p);  // still well-formed metadata on its own
  expect_item(validate_pair(d, p), "attention_bytes_per_token", Status::Incompatible,
              {"per KV head differ (local 256, remote 512)", "local: 256", "remote: 512"});
  // A block_len that is not kernel_block_size * bytes per token is reported for Mamba regions
  // too (hand-built metadata; check_metadata refuses it).
  EngineMetadata q = all_mamba(nemotron(2, 0, "p"));
  q.regions[0].region.block_len *= 2;
  expect_item(validate_pair(d, q), "regions[0].block_len", Status::Incompatible,
              {"mamba region 0 block_len 8192 != kernel_block_size 16 * attention_bytes_per_token "
               "256 = 4096"});
}

// Bytes per token that do not split into whole heads of the rank (hand-built metadata).
TEST(HandshakeRules, BytesPerTokenMustSplitIntoWholeHeads) {
  EngineMetadata p = llama(2, 0, "p");  // 4 heads per rank
  p.attention_bytes_per_token = 2050;
  for (auto& r : p.regions) r.region.block_len = 16 * 2050;
  expect_item(validate_pair(llama(2, 0, "d"), p), "attention_bytes_per_token",
              Status::Incompatible, {"2050 is not a whole number of bytes per KV head (4 heads"});
}

// Element formats (metadata 1.3): equal sizes, different formats. Before the format fields, this
// pair (same fingerprint, same bytes per token) validated clean and D decoded e4m3 bytes as e5m2.
TEST(Handshake, KvCacheFormatsOfEqualSizeMustMatch) {
  EngineMetadata p = nemotron(2, 0, "prefill");
  EngineMetadata d = nemotron(2, 0, "decode");
  p.kv_cache_format = ElementFormat::Fp8E4m3;
  d.kv_cache_format = ElementFormat::Fp8E5m2;
  const auto items = validate_pair(d, p);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].status, Status::Incompatible);
  EXPECT_EQ(items[0].field, "kv_cache_format");
  EXPECT_EQ(items[0].local_value, "fp8_e5m2");
  EXPECT_EQ(items[0].remote_value, "fp8_e4m3");
  const std::string text = to_string(items[0]);
  EXPECT_NE(text.find("kv_cache_format: fp8_e5m2 vs fp8_e4m3"), std::string::npos) << text;
  EXPECT_NE(text.find("--kv-cache-dtype"), std::string::npos) << text;
  EXPECT_THROW(require_compatible(d, p), Error);

  // int8 vs fp8 per-token-head (same 8 bits + 8 scale bytes per head).
  p.kv_cache_format = ElementFormat::Int8PerTokenHead;
  d.kv_cache_format = ElementFormat::Fp8PerTokenHead;
  ASSERT_EQ(validate_pair(d, p).size(), 1u);
  EXPECT_EQ(validate_pair(d, p)[0].field, "kv_cache_format");

  // The same format on both sides passes.
  d.kv_cache_format = ElementFormat::Int8PerTokenHead;
  EXPECT_TRUE(validate_pair(d, p).empty());
}

TEST(Handshake, ModelAndStateDtypesOfEqualSizeMustMatchEachNamed) {
  EngineMetadata p = nemotron(2, 0, "prefill");
  EngineMetadata d = nemotron(4, 1, "decode");
  p.model_format = ElementFormat::BFloat16;
  d.model_format = ElementFormat::Float16;
  p.conv_state_format = ElementFormat::BFloat16;
  d.conv_state_format = ElementFormat::Float16;
  p.ssm_state_format = ElementFormat::Float32;
  d.ssm_state_format = ElementFormat::Float32;
  const auto items = validate_pair(d, p);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].field, "model_format");
  EXPECT_NE(items[0].message.find("model_format: float16 vs bfloat16"), std::string::npos) << items[0].message;
  EXPECT_NE(items[0].fix.find("--dtype"), std::string::npos);
  EXPECT_EQ(items[1].field, "conv_state_format");
  EXPECT_EQ(items[1].local_value, "float16");
  EXPECT_EQ(items[1].remote_value, "bfloat16");
  EXPECT_NE(items[1].fix.find("--mamba-cache-dtype"), std::string::npos);
}

TEST(Handshake, AnUnknownFormatIsCompatibleWithAnyFormat) {
  // An engine that gave only byte sizes, or a peer running a pdkv before metadata 1.3.
  EngineMetadata p = nemotron(2, 0, "prefill");
  EngineMetadata d = nemotron(2, 1, "decode");
  p.kv_cache_format = ElementFormat::Fp8E4m3;
  p.model_format = ElementFormat::BFloat16;
  EXPECT_TRUE(validate_pair(d, p).empty());
  EXPECT_TRUE(validate_pair(p, d).empty());
  d.ssm_state_format = ElementFormat::Float32;  // known on one side only: still compatible
  EXPECT_TRUE(validate_pair(d, p).empty());
}
