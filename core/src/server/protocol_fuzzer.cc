// Fuzzes the data-plane request decoder (protocol.h) the way a server
// handler uses it: header, then each method's fields, then Done.
#include <cstddef>
#include <cstdint>

#include "server/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pdpm::server;
  if (size == 0) return 0;
  uint8_t shape = data[0] % 4;
  pdpm::server::Decoder d({data + 1, size - 1});
  RequestHeader h;
  if (!d.Header(&h).ok()) return 0;
  pdpm::dsm::ObjectId id;
  pdpm::dsm::GlobalAddress a;
  uint64_t v = 0;
  switch (shape) {
    case 0:
      if (d.U64(&v).ok()) (void)d.Done();
      break;
    case 1:
      if (d.Address(&a).ok()) (void)d.Done();
      break;
    case 2:
      if (d.Id(&id).ok() && d.U64(&v).ok()) (void)d.Rest();
      (void)d.Done();
      break;
    default:
      if (d.Id(&id).ok() && d.U64(&v).ok() && d.U64(&v).ok()) (void)d.Done();
      break;
  }
  return 0;
}
