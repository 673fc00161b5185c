#include "client/cluster_journal.h"

#include <fstream>
#include <sstream>

#include "common/crc32c.h"

namespace pdpm::client {

Status Expectations::Save(const std::string& path) const {
  std::ofstream out(path + ".tmp");
  for (const auto& [id, states] : objects) {
    out << "obj " << id.first << " " << id.second << " " << states.size();
    for (const auto& s : states) out << " " << s.present << " " << s.size << " " << s.crc;
    out << "\n";
  }
  for (const auto& b : blocks) {
    out << "mem " << b.addr.hi() << " " << b.addr.lo() << " " << b.length << " " << b.crc << "\n";
  }
  out.close();
  if (!out || std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
    return Status::IOError("cannot write " + path);
  }
  return Status::OK();
}

Status Expectations::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("no " + path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string kind;
    ls >> kind;
    if (kind == "obj") {
      uint64_t hi, lo;
      size_t n;
      ls >> hi >> lo >> n;
      auto& states = objects[{hi, lo}];
      for (size_t i = 0; i < n; i++) {
        ObjectState s;
        ls >> s.present >> s.size >> s.crc;
        states.push_back(s);
      }
    } else if (kind == "mem") {
      uint64_t hi, lo;
      Block b;
      ls >> hi >> lo >> b.length >> b.crc;
      b.addr = GlobalAddress::FromWords(hi, lo);
      blocks.push_back(b);
    }
    if (!ls) {
      std::string msg = "bad line in " + path;
      msg.append(": ").append(line);
      return Status::Corruption(msg);
    }
  }
  return Status::OK();
}

size_t Expectations::Verify(Client* client, std::string* problems) const {
  size_t checked = 0;
  for (const auto& [id, states] : objects) {
    std::string data;
    Status s = client->GetObj(ObjectId{id.first, id.second}, &data);
    ObjectState got;
    if (s.ok()) {
      got = {true, data.size(), Crc32c(data)};
    } else if (s.code() != StatusCode::kNotFound) {
      *problems += "object " + std::to_string(id.first) + ":" + std::to_string(id.second) + ": " +
                   s.ToString() + "\n";
      continue;
    }
    bool ok = false;
    for (const auto& want : states) ok = ok || want == got;
    if (!ok) {
      *problems += "object " + std::to_string(id.first) + ":" + std::to_string(id.second) +
                   " reads present=" + std::to_string(got.present) +
                   " size=" + std::to_string(got.size) + " crc=" + std::to_string(got.crc) +
                   ", not an acknowledged state\n";
    }
    checked++;
  }
  for (const auto& b : blocks) {
    std::string data(b.length, '\0');
    Status s = client->Read(b.addr, data.data(), b.length);
    if (!s.ok() || Crc32c(data) != b.crc) {
      *problems += "block " + b.addr.ToString() + ": " +
                   (s.ok() ? std::string("checksum mismatch") : s.ToString()) + "\n";
    }
    checked++;
  }
  return checked;
}

}  // namespace pdpm::client
