// Fuzzes the data-plane request decoder (protocol.h) the way a server
// handler uses it: header, then each method's fields, then Done.
#include <cstddef>
#include <cstdint>

#include "server/kv_protocol.h"
#include "server/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pdpm::server;
  if (size == 0) return 0;
  // Shapes 0..3: object and heap requests; 4..19: the pDKVS requests;
  // 20: kListObj.
  uint8_t shape = data[0] % 21;
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
    case 3:
      if (d.Id(&id).ok() && d.U64(&v).ok() && d.U64(&v).ok()) (void)d.Done();
      break;
    case 20:
      if (d.U64(&v).ok() && d.U64(&v).ok() && d.Id(&id).ok() && d.U64(&v).ok()) (void)d.Done();
      break;
    default: {
      KvRequest r;
      (void)DecodeKvRequest(static_cast<uint16_t>(kKvGet + (shape - 4)), &d, &r);
      break;
    }
  }
  return 0;
}
