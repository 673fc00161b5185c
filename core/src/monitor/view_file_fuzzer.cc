// Fuzzes the view file decoder: whatever the bytes, Decode must return a
// Status (never crash or hang), and a view it accepts must re-encode to a
// file that decodes to the same view.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/crc32c.h"
#include "monitor/file_view_store.h"

namespace {

void Check(const std::string& bytes) {
  using pdpm::monitor::FileViewStore;
  pdpm::v1::ClusterView view;
  uint64_t revision = 0;
  if (!FileViewStore::Decode(bytes, "fuzz", &view, &revision).ok()) return;
  std::string again = FileViewStore::Encode(revision, view);
  pdpm::v1::ClusterView view2;
  uint64_t revision2 = 0;
  if (!FileViewStore::Decode(again, "re-encoded", &view2, &revision2).ok() ||
      revision2 != revision || view2.SerializeAsString() != view.SerializeAsString()) {
    std::abort();
  }
}

void PutLe32(std::string* s, size_t pos, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*s)[pos + i] = static_cast<char>(v >> (8 * i));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  Check(bytes);
  // The same bytes with both checksums made right, so the fuzzer also gets
  // past them to the version, length and protobuf checks.
  using pdpm::monitor::FileViewStore;
  if (bytes.size() >= FileViewStore::kHeaderSize) {
    std::string_view payload(bytes.data() + FileViewStore::kHeaderSize,
                             bytes.size() - FileViewStore::kHeaderSize);
    PutLe32(&bytes, 32, pdpm::Crc32c(payload));
    PutLe32(&bytes, 36, pdpm::Crc32c(std::string_view(bytes.data(), 36)));
    Check(bytes);
  }
  return 0;
}
