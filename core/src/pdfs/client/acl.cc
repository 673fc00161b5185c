#include "pdfs/client/acl.h"

namespace pdpm::pdfs {
namespace {

constexpr size_t kHeaderSize = 4;
constexpr size_t kEntrySize = 8;

uint32_t LoadU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint16_t LoadU16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | (static_cast<uint8_t>(p[1]) << 8));
}

void StoreU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; i++) out->push_back(static_cast<char>(v >> (8 * i)));
}

void StoreU16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v));
  out->push_back(static_cast<char>(v >> 8));
}

bool HasId(uint16_t tag) {
  return tag == kAclUser || tag == kAclGroup;
}

// The entry of `tag` (one of the single ones), or nullptr.
template <typename A>
auto* Single(A* acl, uint16_t tag) {
  for (auto& e : acl->entries) {
    if (e.tag == tag) return &e;
  }
  return static_cast<decltype(&acl->entries[0])>(nullptr);
}

}  // namespace

Status DecodeAcl(std::string_view data, Acl* out) {
  if (data.size() < kHeaderSize || (data.size() - kHeaderSize) % kEntrySize != 0) {
    return Status::InvalidArgument("POSIX ACL: " + std::to_string(data.size()) +
                                   " bytes is not a header and whole entries");
  }
  const uint32_t version = LoadU32(data.data());
  if (version != kAclVersion) {
    return Status::InvalidArgument("POSIX ACL: version " + std::to_string(version) +
                                   " (only 2 is known)");
  }
  Acl acl;
  // Tags must ascend, and ids within the named tags.
  uint16_t last_tag = 0;
  uint32_t last_id = 0;
  bool named = false;
  for (size_t off = kHeaderSize; off < data.size(); off += kEntrySize) {
    AclEntry e;
    e.tag = LoadU16(data.data() + off);
    e.perm = LoadU16(data.data() + off + 2);
    e.id = LoadU32(data.data() + off + 4);
    if (e.tag != kAclUserObj && e.tag != kAclUser && e.tag != kAclGroupObj && e.tag != kAclGroup &&
        e.tag != kAclMask && e.tag != kAclOther) {
      return Status::InvalidArgument("POSIX ACL: unknown tag " + std::to_string(e.tag));
    }
    if (e.perm > 7) return Status::InvalidArgument("POSIX ACL: permissions past rwx");
    if (!HasId(e.tag) && e.id != kAclUndefinedId) {
      return Status::InvalidArgument("POSIX ACL: an id on an entry that takes none");
    }
    if (e.tag < last_tag) return Status::InvalidArgument("POSIX ACL: entries out of order");
    if (e.tag == last_tag) {
      if (!HasId(e.tag)) return Status::InvalidArgument("POSIX ACL: an entry twice");
      if (e.id <= last_id) {
        return Status::InvalidArgument("POSIX ACL: named entries out of order or twice");
      }
    }
    named = named || HasId(e.tag);
    last_tag = e.tag;
    last_id = e.id;
    acl.entries.push_back(e);
  }
  bool user_obj = false, group_obj = false, mask = false, other = false;
  for (const AclEntry& e : acl.entries) {
    user_obj = user_obj || e.tag == kAclUserObj;
    group_obj = group_obj || e.tag == kAclGroupObj;
    mask = mask || e.tag == kAclMask;
    other = other || e.tag == kAclOther;
  }
  if (!user_obj || !group_obj || !other) {
    return Status::InvalidArgument("POSIX ACL: the owner, group or other entry is missing");
  }
  if (named && !mask) {
    return Status::InvalidArgument("POSIX ACL: named entries without a mask entry");
  }
  *out = std::move(acl);
  return Status::OK();
}

std::string EncodeAcl(const Acl& acl) {
  std::string out;
  out.reserve(kHeaderSize + kEntrySize * acl.entries.size());
  StoreU32(&out, kAclVersion);
  for (const AclEntry& e : acl.entries) {
    StoreU16(&out, e.tag);
    StoreU16(&out, e.perm);
    StoreU32(&out, e.id);
  }
  return out;
}

Acl AclFromMode(uint32_t mode) {
  Acl acl;
  acl.entries = {{kAclUserObj, static_cast<uint16_t>((mode >> 6) & 7), kAclUndefinedId},
                 {kAclGroupObj, static_cast<uint16_t>((mode >> 3) & 7), kAclUndefinedId},
                 {kAclOther, static_cast<uint16_t>(mode & 7), kAclUndefinedId}};
  return acl;
}

bool AclIsMinimal(const Acl& acl) {
  for (const AclEntry& e : acl.entries) {
    if (e.tag != kAclUserObj && e.tag != kAclGroupObj && e.tag != kAclOther) return false;
  }
  return true;
}

uint32_t AclPermissionBits(const Acl& acl) {
  const AclEntry* group = Single(&acl, kAclMask);
  if (group == nullptr) group = Single(&acl, kAclGroupObj);
  const AclEntry* owner = Single(&acl, kAclUserObj);
  const AclEntry* other = Single(&acl, kAclOther);
  uint32_t bits = 0;
  if (owner != nullptr) bits |= uint32_t{owner->perm} << 6;
  if (group != nullptr) bits |= uint32_t{group->perm} << 3;
  if (other != nullptr) bits |= other->perm;
  return bits;
}

void AclSetPermissionBits(Acl* acl, uint32_t mode) {
  AclEntry* group = Single(acl, kAclMask);
  if (group == nullptr) group = Single(acl, kAclGroupObj);
  if (AclEntry* owner = Single(acl, kAclUserObj)) owner->perm = (mode >> 6) & 7;
  if (group != nullptr) group->perm = (mode >> 3) & 7;
  if (AclEntry* other = Single(acl, kAclOther)) other->perm = mode & 7;
}

void AclInherit(const Acl& dir_default, uint32_t* mode, Acl* access) {
  *access = dir_default;
  const uint32_t asked = *mode;
  AclSetPermissionBits(access, AclPermissionBits(*access) & asked);
  *mode = (asked & ~uint32_t{0777}) | AclPermissionBits(*access);
}

}  // namespace pdpm::pdfs
