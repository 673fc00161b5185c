#include "monitor/etcd/etcd_view_store.h"

#include <cstring>

#include "common/crc32c.h"

namespace pdpm::monitor {
namespace {

constexpr char kMagic[8] = {'P', 'D', 'P', 'M', 'E', 'T', 'C', 'D'};

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetU32(const std::string& in, size_t pos) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(in[pos + i])} << (8 * i);
  return v;
}

etcdserverpb::RequestOp RangeOp(const std::string& key) {
  etcdserverpb::RequestOp op;
  op.mutable_request_range()->set_key(key);
  return op;
}

// The single key a range op of a transaction found, or nullptr.
const etcdserverpb::KeyValue* Found(const etcdserverpb::TxnResponse& resp, int op) {
  if (resp.responses_size() <= op || !resp.responses(op).has_response_range() ||
      resp.responses(op).response_range().kvs_size() == 0) {
    return nullptr;
  }
  return &resp.responses(op).response_range().kvs(0);
}

}  // namespace

EtcdKeys EtcdKeys::ForPrefix(const std::string& prefix) {
  return {prefix + "/view", prefix + "/leader"};
}

EtcdViewStore::EtcdViewStore(EtcdClient* client, EtcdKeys keys, int64_t lease)
    : client_(client), keys_(std::move(keys)), lease_(lease) {}

std::string EtcdViewStore::Describe() const {
  return "etcd:" + keys_.view + " at " + client_->endpoints();
}

std::string EtcdViewStore::Encode(const v1::ClusterView& view) {
  std::string payload;
  view.SerializeToString(&payload);
  std::string out(kMagic, sizeof(kMagic));
  PutU32(&out, kFormatVersion);
  PutU32(&out, Crc32c(payload));
  return out + payload;
}

Status EtcdViewStore::Decode(const std::string& value, const std::string& what,
                             v1::ClusterView* view) {
  if (value.size() < kHeaderSize) {
    return Status::Corruption(what + " holds " + std::to_string(value.size()) +
                              " bytes, shorter than the " + std::to_string(kHeaderSize) +
                              "-byte header of a PDPM view");
  }
  if (std::memcmp(value.data(), kMagic, sizeof(kMagic)) != 0) {
    return Status::Corruption(what + " does not hold a PDPM view (bad magic)");
  }
  uint32_t version = GetU32(value, 8);
  if (version != kFormatVersion) {
    return Status::Corruption(what + " has view format version " + std::to_string(version) +
                              "; this monitor reads version " + std::to_string(kFormatVersion));
  }
  std::string_view payload(value.data() + kHeaderSize, value.size() - kHeaderSize);
  return DecodeViewPayload(payload, GetU32(value, 12), what, view);
}

Status EtcdViewStore::Load(v1::ClusterView* view, uint64_t* revision) {
  etcdserverpb::KeyValue kv;
  bool found = false;
  PDPM_RETURN_IF_ERROR(client_->Get(keys_.view, &kv, &found));
  if (!found) {
    *revision = 0;
    return Status::NotFound("no view stored at " + Describe());
  }
  PDPM_RETURN_IF_ERROR(Decode(kv.value(), "etcd key " + keys_.view, view));
  *revision = static_cast<uint64_t>(kv.mod_revision());
  return Status::OK();
}

Status EtcdViewStore::CompareAndPut(uint64_t expected_revision, const v1::ClusterView& view,
                                    uint64_t* new_revision) {
  std::string value = Encode(view);
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* same_view = txn.add_compare();
  same_view->set_key(keys_.view);
  same_view->set_target(etcdserverpb::Compare::MOD);
  same_view->set_result(etcdserverpb::Compare::EQUAL);
  same_view->set_mod_revision(static_cast<int64_t>(expected_revision));
  etcdserverpb::Compare* leading = txn.add_compare();
  leading->set_key(keys_.leader);
  leading->set_target(etcdserverpb::Compare::LEASE);
  leading->set_result(etcdserverpb::Compare::EQUAL);
  leading->set_lease(lease_);
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(keys_.view);
  put->set_value(value);
  *txn.add_failure() = RangeOp(keys_.view);
  *txn.add_failure() = RangeOp(keys_.leader);

  etcdserverpb::TxnResponse resp;
  Status s = client_->Txn(txn, &resp);
  if (!s.ok()) {
    broken_ = true;
    return s.WithContext("store the view at " + Describe());
  }
  if (resp.succeeded()) {
    *new_revision = static_cast<uint64_t>(resp.header().revision());
    return Status::OK();
  }
  const etcdserverpb::KeyValue* stored = Found(resp, 0);
  const etcdserverpb::KeyValue* leader = Found(resp, 1);
  if (stored != nullptr && stored->value() == value && leader != nullptr &&
      leader->lease() == lease_) {
    // A repeat of a transaction whose first attempt landed.
    *new_revision = static_cast<uint64_t>(stored->mod_revision());
    return Status::OK();
  }
  broken_ = true;
  if (leader == nullptr || leader->lease() != lease_) {
    return Status::Aborted("this monitor no longer holds " + keys_.leader + " (leader now: " +
                           (leader == nullptr ? std::string("none") : leader->value()) + ")");
  }
  return Status::Aborted("view revision is " +
                         std::to_string(stored == nullptr ? 0 : stored->mod_revision()) + ", not " +
                         std::to_string(expected_revision));
}

}  // namespace pdpm::monitor
