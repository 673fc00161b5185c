#include "monitor/view_store.h"

#include "common/crc32c.h"

namespace pdpm::monitor {

Status DecodeViewPayload(std::string_view payload, uint32_t crc, const std::string& what,
                         v1::ClusterView* view) {
  if (Crc32c(payload) != crc) return Status::Corruption(what + ": payload checksum mismatch");
  v1::ClusterView parsed;
  if (!parsed.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return Status::Corruption(what + ": payload is not a valid ClusterView");
  }
  *view = std::move(parsed);
  return Status::OK();
}

}  // namespace pdpm::monitor
