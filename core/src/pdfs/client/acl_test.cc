// The POSIX ACL format and the mode rules (acl.h).
#include "pdfs/client/acl.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

namespace pdpm::pdfs {
namespace {

// The bytes the kernel passes for `entries` (tag, perm, id).
std::string Bytes(const std::vector<AclEntry>& entries, uint32_t version = kAclVersion) {
  std::string out;
  auto u16 = [&](uint16_t v) {
    out.push_back(static_cast<char>(v));
    out.push_back(static_cast<char>(v >> 8));
  };
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; i++) out.push_back(static_cast<char>(v >> (8 * i)));
  };
  u32(version);
  for (const AclEntry& e : entries) {
    u16(e.tag);
    u16(e.perm);
    u32(e.id);
  }
  return out;
}

constexpr uint32_t kNone = kAclUndefinedId;

// user::rwx user:1000:r-x group::r-- group:50:-w- mask::rwx other::---
std::vector<AclEntry> Extended() {
  return {{kAclUserObj, 7, kNone}, {kAclUser, 5, 1000},  {kAclGroupObj, 4, kNone},
          {kAclGroup, 2, 50},      {kAclMask, 7, kNone}, {kAclOther, 0, kNone}};
}

TEST(AclTest, DecodesWhatTheKernelPassesAndEncodesItBack) {
  for (const auto& entries : {Extended(), AclFromMode(0640).entries,
                              std::vector<AclEntry>{{kAclUserObj, 6, kNone},
                                                    {kAclGroupObj, 4, kNone},
                                                    {kAclMask, 6, kNone},
                                                    {kAclOther, 4, kNone}}}) {
    const std::string bytes = Bytes(entries);
    Acl acl;
    ASSERT_TRUE(DecodeAcl(bytes, &acl).ok());
    ASSERT_EQ(acl.entries.size(), entries.size());
    for (size_t i = 0; i < entries.size(); i++) {
      EXPECT_EQ(acl.entries[i].tag, entries[i].tag);
      EXPECT_EQ(acl.entries[i].perm, entries[i].perm);
      EXPECT_EQ(acl.entries[i].id, entries[i].id);
    }
    EXPECT_EQ(EncodeAcl(acl), bytes);
  }
}

TEST(AclTest, RefusesEveryInvalidAcl) {
  auto refused = [](const std::string& bytes) {
    Acl acl;
    Status s = DecodeAcl(bytes, &acl);
    return s.code() == StatusCode::kInvalidArgument;
  };
  std::vector<AclEntry> ok = Extended();
  EXPECT_TRUE(refused(""));
  EXPECT_TRUE(refused(Bytes(ok).substr(0, 3)));
  EXPECT_TRUE(refused(Bytes(ok) + "x"));  // not whole entries
  EXPECT_TRUE(refused(Bytes(ok, 1)));     // another version
  EXPECT_TRUE(refused(Bytes({})));        // no entries
  auto without = [&](size_t i) {
    auto v = ok;
    v.erase(v.begin() + static_cast<ptrdiff_t>(i));
    return Bytes(v);
  };
  EXPECT_TRUE(refused(without(0)));  // no owner
  EXPECT_TRUE(refused(without(2)));  // no group
  EXPECT_TRUE(refused(without(4)));  // named entries without a mask
  EXPECT_TRUE(refused(without(5)));  // no other
  auto changed = [&](size_t i, AclEntry e) {
    auto v = ok;
    v[i] = e;
    return Bytes(v);
  };
  EXPECT_TRUE(refused(changed(1, {kAclUser, 8, 1000})));  // perms past rwx
  EXPECT_TRUE(refused(changed(1, {0x40, 5, 1000})));      // an unknown tag
  EXPECT_TRUE(refused(changed(0, {kAclUserObj, 7, 0})));  // an id where none goes
  EXPECT_TRUE(refused(changed(4, {kAclMask, 7, 12})));
  auto v = ok;
  std::swap(v[0], v[1]);  // out of order
  EXPECT_TRUE(refused(Bytes(v)));
  v = ok;
  v.insert(v.begin() + 2, {kAclUser, 4, 1000});  // a user twice
  EXPECT_TRUE(refused(Bytes(v)));
  v = ok;
  v.insert(v.begin() + 2, {kAclUser, 4, 999});  // named users out of order
  EXPECT_TRUE(refused(Bytes(v)));
  v = ok;
  v.insert(v.begin() + 1, {kAclUserObj, 4, kNone});  // the owner twice
  EXPECT_TRUE(refused(Bytes(v)));
  v = ok;
  v.push_back({kAclOther, 4, kNone});  // other twice
  EXPECT_TRUE(refused(Bytes(v)));
}

TEST(AclTest, ModeFollowsTheMaskAndChmodFollowsTheMode) {
  Acl acl;
  ASSERT_TRUE(DecodeAcl(Bytes(Extended()), &acl).ok());
  EXPECT_FALSE(AclIsMinimal(acl));
  EXPECT_EQ(AclPermissionBits(acl), 0770u);  // group bits: the mask's
  AclSetPermissionBits(&acl, 0751);
  EXPECT_EQ(AclPermissionBits(acl), 0751u);
  EXPECT_EQ(acl.entries[2].perm, 4);  // the group entry stays; the mask took the bits
  EXPECT_EQ(acl.entries[4].perm, 5);
  EXPECT_EQ(acl.entries[1].perm, 5);  // named entries are not the mode's

  Acl minimal = AclFromMode(0754);
  EXPECT_TRUE(AclIsMinimal(minimal));
  EXPECT_EQ(AclPermissionBits(minimal), 0754u);
  AclSetPermissionBits(&minimal, 0601);
  EXPECT_EQ(AclPermissionBits(minimal), 0601u);  // without a mask: the group entry
}

TEST(AclTest, NewInodesInheritTheDefaultAclLimitedByTheModeAsked) {
  Acl dflt;
  ASSERT_TRUE(DecodeAcl(Bytes(Extended()), &dflt).ok());
  Acl access;
  uint32_t mode = 0100644 | S_ISUID;  // what open(O_CREAT, 0644) asks
  AclInherit(dflt, &mode, &access);
  EXPECT_EQ(mode, 0100640u | S_ISUID);  // other: the default gives none
  ASSERT_EQ(access.entries.size(), 6u);
  EXPECT_EQ(access.entries[0].perm, 6);  // user:: rwx & rw-
  EXPECT_EQ(access.entries[1].perm, 5);  // named entries as the default says
  EXPECT_EQ(access.entries[3].perm, 2);
  EXPECT_EQ(access.entries[4].perm, 4);  // mask:: rwx & r--
  EXPECT_EQ(access.entries[5].perm, 0);

  mode = 040777;  // mkdir 0777 in a directory whose default is minimal
  AclInherit(AclFromMode(0750), &mode, &access);
  EXPECT_EQ(mode, 040750u);
  EXPECT_TRUE(AclIsMinimal(access));
}

}  // namespace
}  // namespace pdpm::pdfs
