// POSIX ACLs (docs/pdfs.md "POSIX ACLs"): the value of the
// `system.posix_acl_access` and `system.posix_acl_default` xattrs in
// Linux's format (version 2, what the kernel passes a FUSE file system and
// what getfacl/setfacl read and write through it), and the rules that keep
// an inode's mode and its ACLs in step.
//
//   format: u32 version (2), then entries of 8 bytes: u16 tag, u16 perm
//   (rwx bits), u32 id (a uid for kUser, a gid for kGroup, 0xffffffff for
//   the other tags); little-endian.
//
// A valid ACL (what DecodeAcl accepts, as the kernel's posix_acl_valid
// does) has its entries ordered by tag then id: exactly one kUserObj,
// kUser entries of distinct ids, one kGroupObj, kGroup entries of distinct
// ids, a kMask (required when there is any kUser or kGroup entry, allowed
// otherwise), one kOther; perms 0..7. Anything else is
// kInvalidArgument (EINVAL). A valid ACL has one encoding: EncodeAcl of
// what DecodeAcl accepted gives back the same bytes. Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pdpm::pdfs {

inline constexpr std::string_view kAccessAclXattr = "system.posix_acl_access";
inline constexpr std::string_view kDefaultAclXattr = "system.posix_acl_default";
inline constexpr uint32_t kAclVersion = 2;
inline constexpr uint32_t kAclUndefinedId = 0xffffffff;

enum AclTag : uint16_t {
  kAclUserObj = 0x01,
  kAclUser = 0x02,
  kAclGroupObj = 0x04,
  kAclGroup = 0x08,
  kAclMask = 0x10,
  kAclOther = 0x20,
};

struct AclEntry {
  uint16_t tag = 0;
  uint16_t perm = 0;  // 4 read, 2 write, 1 execute
  uint32_t id = kAclUndefinedId;
};

struct Acl {
  std::vector<AclEntry> entries;
};

Status DecodeAcl(std::string_view data, Acl* out);
std::string EncodeAcl(const Acl& acl);

// The ACL that says what the permission bits of `mode` say (owner, group,
// other entries only).
Acl AclFromMode(uint32_t mode);
// True when `acl` has only the owner, group and other entries: it says no
// more than the permission bits (such an access ACL is kept as the mode
// alone, as Linux file systems do).
bool AclIsMinimal(const Acl& acl);
// The permission bits (0777) `acl` gives: owner and other from their
// entries, group from the mask when there is one (else the group entry).
uint32_t AclPermissionBits(const Acl& acl);
// chmod of an inode with access ACL `acl`: its owner, other and mask (or,
// without a mask, group) entries take the permission bits of `mode`.
void AclSetPermissionBits(Acl* acl, uint32_t mode);
// A new inode in a directory with default ACL `dir_default` (POSIX 1003.1e
// inheritance; the umask does not apply): its access ACL is the default
// one with the owner, other and mask (or group) entries limited to the
// bits `*mode` asks for, and *mode's permission bits become what that ACL
// gives.
void AclInherit(const Acl& dir_default, uint32_t* mode, Acl* access);

}  // namespace pdpm::pdfs
