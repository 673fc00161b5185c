// libFuzzer target: the POSIX ACL decoder (acl.h) reads the value of a
// system.posix_acl_* xattr that any pDFSLib caller may pass, and the stored
// one back from PM. On any input it must not crash or read out of bounds;
// what it accepts must encode back to exactly the input (one encoding),
// and the mode rules must keep an accepted ACL valid.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "pdfs/client/acl.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pdpm::pdfs;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  Acl acl;
  if (!DecodeAcl(in, &acl).ok()) return 0;
  if (EncodeAcl(acl) != in) abort();
  Acl changed = acl;
  AclSetPermissionBits(&changed, 0751);
  Acl again;
  if (!DecodeAcl(EncodeAcl(changed), &again).ok() || AclPermissionBits(again) != 0751) abort();
  uint32_t mode = 0100664;
  Acl inherited;
  AclInherit(acl, &mode, &inherited);
  if (!DecodeAcl(EncodeAcl(inherited), &again).ok() || (mode & 0777) != AclPermissionBits(again) ||
      (mode & ~uint32_t{0664}) != 0100000) {
    abort();
  }
  return 0;
}
