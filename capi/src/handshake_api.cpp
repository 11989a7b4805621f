// Handshake validation (core/handshake.hpp): a report handle listing every incompatibility of a
// (local, remote) metadata pair or of the ranks of one remote engine, and a require-style call.
#include <memory>
#include <string>
#include <vector>

#include "boundary.hpp"
#include "pdkv/core/handshake.hpp"
#include "plan_handles.hpp"
#include "struct_sizes.hpp"
#include "structs.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

namespace {

using pdkv::capi::kIncompatibilityMinSize;

pdkv_handshake_report_t* make_report(std::vector<core::Incompatibility> items) {
  auto r = std::make_unique<pdkv_handshake_report>();
  r->items = std::move(items);
  r->texts.reserve(r->items.size());
  for (const auto& i : r->items) r->texts.push_back(core::to_string(i));
  return r.release();
}

}  // namespace

extern "C" {

PDKV_API pdkv_status_t pdkv_handshake_validate(const pdkv_engine_metadata_t* local,
                                               const pdkv_engine_metadata_t* remote, pdkv_handshake_report_t** out,
                                               pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(local, "local");
    require_non_null(remote, "remote");
    require_non_null(out, "out");
    *out = nullptr;
    *out = make_report(core::validate_pair(local->md, remote->md));
  });
}

PDKV_API pdkv_status_t pdkv_handshake_validate_engine_ranks(const pdkv_engine_metadata_t* const* ranks, size_t n_ranks,
                                                            pdkv_handshake_report_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = nullptr;
    if (n_ranks > 0) require_non_null(ranks, "ranks");
    std::vector<core::EngineMetadata> mds;
    mds.reserve(n_ranks);
    for (size_t i = 0; i < n_ranks; ++i) {
      require_non_null(ranks[i], ("ranks[" + std::to_string(i) + "]").c_str());
      mds.push_back(ranks[i]->md);
    }
    *out = make_report(core::validate_engine_ranks(mds));
  });
}

PDKV_API pdkv_status_t pdkv_handshake_report_count(const pdkv_handshake_report_t* report, size_t* count,
                                                   pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(report, "report");
    require_non_null(count, "count");
    *count = report->items.size();
  });
}

PDKV_API pdkv_status_t pdkv_handshake_report_item(const pdkv_handshake_report_t* report, size_t index,
                                                  pdkv_incompatibility_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(report, "report");
    require_non_null(out, "out");
    pdkv::capi::require_index(index, report->items.size(), "incompatibility");
    const core::Incompatibility& i = report->items[index];
    pdkv_incompatibility_t c{};
    c.status = static_cast<int32_t>(i.status);
    c.field = i.field.c_str();
    c.local_value = i.local_value.c_str();
    c.remote_value = i.remote_value.c_str();
    c.message = i.message.c_str();
    c.fix = i.fix.c_str();
    c.text = report->texts[index].c_str();
    pdkv::capi::write_struct_prefix(out, c, kIncompatibilityMinSize, "pdkv_incompatibility_t");
  });
}

PDKV_API void pdkv_handshake_report_free(pdkv_handshake_report_t* report) { delete report; }

PDKV_API pdkv_status_t pdkv_handshake_require_compatible(const pdkv_engine_metadata_t* local,
                                                         const pdkv_engine_metadata_t* remote, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(local, "local");
    require_non_null(remote, "remote");
    core::require_compatible(local->md, remote->md);
  });
}

}  // extern "C"
