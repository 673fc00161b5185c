// libFuzzer target: the pDFS record decoders (records.h) read objects that
// come over the network from PM any client may have written. On any input
// they must not crash, read out of bounds or loop, and whatever one accepts
// must encode back to exactly the input (a record has one encoding). Each
// input is tried as it is and with a valid checksum appended, so that the
// mutations reach the field checks behind the crc.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/crc32c.h"
#include "pdfs/client/records.h"

namespace {

template <typename T>
void RoundTrip(std::string_view in, pdpm::Status (*decode)(std::string_view, T*),
               std::string (*encode)(const T&)) {
  T value;
  if (decode(in, &value).ok() && encode(value) != in) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pdpm::pdfs;
  std::string sealed(reinterpret_cast<const char*>(data), size);
  const uint32_t crc = pdpm::Crc32c(sealed);
  for (int i = 0; i < 4; i++) sealed.push_back(static_cast<char>(crc >> (8 * i)));
  for (std::string_view in : {std::string_view(sealed).substr(0, size), std::string_view(sealed)}) {
    RoundTrip<Inode>(in, DecodeInode, EncodeInode);
    RoundTrip<DirIndex>(in, DecodeDirIndex, EncodeDirIndex);
    RoundTrip<DirBucket>(in, DecodeDirBucket, EncodeDirBucket);
    RoundTrip<OrphanList>(in, DecodeOrphanList, EncodeOrphanList);
    RoundTrip<VolumeQuota>(in, DecodeVolumeQuota, EncodeVolumeQuota);
    RoundTrip<LockTable>(in, DecodeLockTable, EncodeLockTable);
    RoundTrip<LockSession>(in, DecodeLockSession, EncodeLockSession);
    RoundTrip<SessionList>(in, DecodeSessionList, EncodeSessionList);
  }
  return 0;
}
