#include "pdkvs/loadgen/verifier.h"

namespace pdpm::pdkvs::loadgen {

namespace {
constexpr uint64_t kChunk = 1 << 16;
}  // namespace

struct Verifier::Entry {
  std::atomic<uint64_t> key{UINT64_MAX}, send{0}, ack{0};  // 0: not yet
};

Verifier::Verifier(const Workload& workload, uint64_t records, uint64_t max_writes)
    : workload_(workload),
      key_floor_(new std::atomic<uint64_t>[records]),
      num_chunks_(max_writes / kChunk + 1),
      chunks_(new std::atomic<Entry*>[num_chunks_]) {
  for (uint64_t i = 0; i < records; ++i) key_floor_[i].store(0, std::memory_order_relaxed);
  for (uint64_t i = 0; i < num_chunks_; ++i) chunks_[i].store(nullptr, std::memory_order_relaxed);
}

Verifier::~Verifier() {
  for (uint64_t i = 0; i < num_chunks_; ++i) delete[] chunks_[i].load();
}

Verifier::Entry& Verifier::At(uint64_t w) {
  std::atomic<Entry*>& slot = chunks_[w / kChunk];
  Entry* chunk = slot.load();
  if (chunk == nullptr) {
    auto* fresh = new Entry[kChunk];
    if (slot.compare_exchange_strong(chunk, fresh)) {
      chunk = fresh;
    } else {
      delete[] fresh;  // another thread won; chunk holds its array
    }
  }
  return chunk[w % kChunk];
}

const Verifier::Entry* Verifier::Find(uint64_t w) const {
  if (w >= next_write_.load() || w / kChunk >= num_chunks_) return nullptr;
  const Entry* chunk = chunks_[w / kChunk].load();
  return chunk == nullptr ? nullptr : &chunk[w % kChunk];
}

uint64_t Verifier::WriteSent(uint64_t key) {
  uint64_t w = next_write_.fetch_add(1);
  Entry& e = At(w);
  e.key.store(key);
  e.send.store(Tick());
  return w;
}

std::string Verifier::WriteAnswered(uint64_t key, uint64_t w, const Reply& reply) {
  if (reply.type != ReplyType::kSimple || reply.text != "OK") {
    return "SET " + workload_.Key(key) + ": " + std::string(reply.text);
  }
  Entry& e = At(w);
  e.ack.store(Tick());
  uint64_t sent = e.send.load();
  std::atomic<uint64_t>& floor = key_floor_[key];
  uint64_t cur = floor.load();
  while (cur < sent && !floor.compare_exchange_weak(cur, sent)) {
  }
  return {};
}

uint64_t Verifier::ReadSent(uint64_t key) const {
  return key_floor_[key].load();
}

std::string Verifier::CheckRead(uint64_t key, uint64_t floor, const Reply& reply) const {
  std::string name = "GET " + workload_.Key(key) + ": ";
  if (reply.type == ReplyType::kNull) return name + "absent (it was loaded)";
  if (reply.type != ReplyType::kBulk) return name + "unexpected reply " + std::string(reply.text);
  uint64_t w;
  const Entry* e = nullptr;
  if (Workload::WriteIdOf(reply.text, &w).ok()) e = Find(w);
  if (e == nullptr) {
    return name + "a value of " + std::to_string(reply.text.size()) + " bytes that no write sent";
  }
  uint64_t written_key = e->key.load();
  if (written_key != key) {
    return name + "the value of write " + std::to_string(w) + ", which went to " +
           (written_key == UINT64_MAX ? "no key" : workload_.Key(written_key));
  }
  if (reply.text != workload_.Value(w)) {
    return name + "the value of write " + std::to_string(w) + " with wrong bytes";
  }
  uint64_t acked = e->ack.load();
  if (acked != 0 && floor > acked) {
    return name + "stale value of write " + std::to_string(w) +
           ", overwritten by a write acknowledged before the GET was sent";
  }
  return {};
}

}  // namespace pdpm::pdkvs::loadgen
