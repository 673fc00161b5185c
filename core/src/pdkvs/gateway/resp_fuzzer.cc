// libFuzzer target: the RESP request parser must never crash, read out of
// bounds or loop on any input, and what it reports must be consistent.
#include <cstdint>
#include <cstdlib>

#include "pdkvs/gateway/resp.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pdpm::pdkvs;
  RespLimits limits;
  limits.max_bulk = 1 << 16;
  limits.max_args = 1 << 10;
  limits.max_inline = 1 << 12;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> args;
  std::string scratch, error;
  // Parse request after request, as a connection does.
  while (!in.empty()) {
    size_t consumed = 0;
    RespParse r = ParseRespRequest(in, limits, &consumed, &args, &scratch, &error);
    if (r != RespParse::kRequest) break;
    if (consumed == 0 || consumed > in.size()) abort();
    for (std::string_view a : args) {
      const bool in_input = a.data() >= in.data() && a.data() + a.size() <= in.data() + in.size();
      const bool in_scratch =
          a.data() >= scratch.data() && a.data() + a.size() <= scratch.data() + scratch.size();
      if (!in_input && !in_scratch && !a.empty()) abort();
    }
    in.remove_prefix(consumed);
  }
  return 0;
}
