#include "server/replication.h"

#include <algorithm>

namespace pdpm::server {

void RedoBatch::Add(uint64_t offset, const void* p, size_t n) {
  ranges_.push_back({offset, bytes_.size(), n});
  bytes_.append(static_cast<const char*>(p), n);
}

std::vector<std::string> RedoBatch::Encode(const RequestHeader& h, uint32_t global,
                                           size_t max_bytes, TxTag tag) const {
  std::vector<std::string> out;
  std::string msg;
  uint64_t count = 0;
  size_t tag_at = 0, count_at = 0;
  auto start = [&] {
    msg.clear();
    Encoder e(&msg);
    e.Header(h);
    e.U64(global | (uint64_t{kReplicaApplyVersion} << 32));
    tag_at = msg.size();
    for (int i = 0; i < 4; i++) e.U64(0);
    count_at = msg.size();
    e.U64(0);
    count = 0;
  };
  auto put = [&](size_t at, uint64_t v) {
    for (int i = 0; i < 8; i++) msg[at + i] = static_cast<char>(v >> (8 * i));
  };
  auto finish = [&] {
    put(count_at, count);
    out.push_back(std::move(msg));
  };
  start();
  msg.reserve(msg.size() + std::min(bytes_.size() + 16 * ranges_.size(), max_bytes));
  for (const Range& r : ranges_) {
    size_t done = 0;
    do {
      size_t n = std::min(r.length - done, max_bytes);
      if (count > 0 && msg.size() + 16 + n > max_bytes) {
        finish();
        start();
      }
      Encoder e(&msg);
      e.U64(r.offset + done);
      e.U64(n);
      e.Bytes(bytes(r).substr(done, n));
      count++;
      done += n;
    } while (done < r.length);
  }
  if (count > 0 || tag) {
    put(tag_at, tag.coordinator);
    put(tag_at + 8, tag.tx);
    put(tag_at + 16, static_cast<uint64_t>(tag.kind));
    put(tag_at + 24, tag.block);
    finish();
  }
  return out;
}

Status DecodeApply(Decoder* d, uint32_t* global, std::vector<ApplyRange>* ranges, TxTag* tag) {
  uint64_t g = 0, count = 0;
  TxTag t;
  PDPM_RETURN_IF_ERROR(d->U64(&g));
  uint64_t version = g >> 32;
  g &= 0xffffffffu;
  if (version != 0 && version != 2 && version != kReplicaApplyVersion) {
    return Status::InvalidArgument("replica apply: unknown format version " +
                                   std::to_string(version));
  }
  if (version >= 2) {
    PDPM_RETURN_IF_ERROR(d->U64(&t.coordinator));
    PDPM_RETURN_IF_ERROR(d->U64(&t.tx));
  }
  if (version >= 3) {
    uint64_t kind = 0;
    PDPM_RETURN_IF_ERROR(d->U64(&kind));
    PDPM_RETURN_IF_ERROR(d->U64(&t.block));
    if (kind > static_cast<uint64_t>(TxTagKind::kAllocFreed)) {
      return Status::InvalidArgument("replica apply: unknown tag kind " + std::to_string(kind));
    }
    t.kind = static_cast<TxTagKind>(kind);
  }
  PDPM_RETURN_IF_ERROR(d->U64(&count));
  if (g == 0) return Status::InvalidArgument("replica apply: bad segment");
  *global = static_cast<uint32_t>(g);
  if (tag != nullptr) *tag = t;
  std::string_view rest = d->Rest();
  size_t pos = 0;
  auto u64 = [&](uint64_t* v) {
    if (rest.size() - pos < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; i++) {
      *v |= uint64_t{static_cast<uint8_t>(rest[pos + i])} << (8 * i);
    }
    pos += 8;
    return true;
  };
  ranges->clear();
  for (uint64_t i = 0; i < count; i++) {
    ApplyRange r;
    uint64_t len = 0;
    if (!u64(&r.offset) || !u64(&len) || rest.size() - pos < len) {
      return Status::InvalidArgument("replica apply: truncated range " + std::to_string(i));
    }
    r.bytes = rest.substr(pos, len);
    pos += len;
    ranges->push_back(r);
  }
  if (pos != rest.size()) return Status::InvalidArgument("replica apply: trailing bytes");
  return Status::OK();
}

PeerLinks::Link* PeerLinks::LinkTo(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = links_[address];
  if (slot == nullptr) slot = std::make_unique<Link>();
  return slot.get();
}

Status PeerLinks::Connected(Link* link, const PeerAddress& peer) {
  if (link->rpc != nullptr && link->rpc->connection().healthy()) return Status::OK();
  link->rpc.reset();
  net::RpcOptions ro = DataPlaneRpcOptions(1, timeout_ms_);
  Status s = net::RpcClient::Connect(transport_, peer.address, peer.core, ro, &link->rpc);
  if (!s.ok()) {
    link->rpc.reset();
    return Status::Unavailable("peer " + peer.address + ": " + std::string(s.message()));
  }
  return Status::OK();
}

Status PeerLinks::Judged(Link* link, const std::string& address, Status s) {
  if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kTimeout) {
    link->rpc.reset();
    return Status::Unavailable("peer " + address + ": " + std::string(s.message()));
  }
  return s;
}

Status PeerLinks::Call(const PeerAddress& peer, uint16_t method, std::string_view request,
                       std::string* reply) {
  Link* link = LinkTo(peer.address);
  std::lock_guard<std::mutex> lock(link->mu);
  PDPM_RETURN_IF_ERROR(Connected(link, peer));
  reply->clear();
  Status s = link->rpc->Call(
      method, {reinterpret_cast<const uint8_t*>(request.data()), request.size()}, reply);
  return Judged(link, peer.address, std::move(s));
}

void PeerLinks::CallAll(std::span<PeerCall> calls) {
  // The links locked in address order (other threads lock several too);
  // a call to a peer already taken waits for the next round.
  std::vector<size_t> order(calls.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return calls[a].peer.address < calls[b].peer.address;
  });
  while (!order.empty()) {
    std::vector<size_t> round, later;
    for (size_t i : order) {
      if (!round.empty() && calls[round.back()].peer.address == calls[i].peer.address) {
        later.push_back(i);
      } else {
        round.push_back(i);
      }
    }
    std::vector<std::unique_lock<std::mutex>> locks;
    std::vector<Link*> links;
    std::vector<bool> started(round.size(), false);
    for (size_t k = 0; k < round.size(); ++k) {
      PeerCall& c = calls[round[k]];
      links.push_back(LinkTo(c.peer.address));
      locks.emplace_back(links[k]->mu);
      c.reply.clear();
      c.status = Connected(links[k], c.peer);
      if (!c.status.ok()) continue;
      c.status = links[k]->rpc->Start(
          c.method, {reinterpret_cast<const uint8_t*>(c.request.data()), c.request.size()});
      started[k] = c.status.ok();
      if (!started[k]) c.status = Judged(links[k], c.peer.address, std::move(c.status));
    }
    for (size_t k = 0; k < round.size(); ++k) {
      if (!started[k]) continue;
      PeerCall& c = calls[round[k]];
      c.status = Judged(links[k], c.peer.address, links[k]->rpc->Finish(&c.reply));
    }
    order = std::move(later);
  }
}

}  // namespace pdpm::server
