// RESP: the Redis serialization protocol, versions 2 and 3, as the pDKVS
// gateway speaks it. Requests are arrays of bulk strings ("multibulk") or
// inline lines split like Redis does (quotes, \xHH escapes); replies are
// built by RespWriter in the client's protocol version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pdpm::pdkvs {

struct RespLimits {
  // Longest bulk string (argument) of a request: a longer one is a protocol
  // error, as Redis's proto-max-bulk-len.
  uint64_t max_bulk = 512ull << 20;
  // Most arguments of one request.
  uint64_t max_args = 1 << 20;
  // Longest inline request and longest header line ("*<n>", "$<n>").
  uint64_t max_inline = 64 << 10;
};

enum class RespParse {
  kRequest,     // one request parsed (args may be empty: skip it)
  kIncomplete,  // need more bytes
  kError,       // protocol error: reply *error and close the connection
};

// Parses the request at the start of `data`. kRequest: *consumed bytes make
// it up and *args views its arguments, which point into `data` or (inline
// requests with escapes) into *scratch; both must outlive the use of args.
// kError: *error is the Redis message ("Protocol error: ...").
RespParse ParseRespRequest(std::string_view data, const RespLimits& limits, size_t* consumed,
                           std::vector<std::string_view>* args, std::string* scratch,
                           std::string* error);

// Appends replies to a buffer in RESP2 or RESP3.
class RespWriter {
 public:
  explicit RespWriter(std::string* out, int protocol = 2) : out_(out), protocol_(protocol) {}
  int protocol() const { return protocol_; }
  void set_protocol(int protocol) { protocol_ = protocol; }

  void Simple(std::string_view s);  // +OK
  // `message` starts with its code ("ERR ...", "WRONGTYPE ..."); CR and LF
  // in it become spaces.
  void Error(std::string_view message);
  void Integer(int64_t v);
  void Bulk(std::string_view s);
  void Null();       // $-1 (RESP2) or _ (RESP3)
  void NullArray();  // *-1 (RESP2) or _ (RESP3)
  void Array(size_t n);
  void Map(size_t n);                 // RESP3 %n; RESP2 an array of 2n
  void Set(size_t n);                 // RESP3 ~n; RESP2 an array
  void Verbatim(std::string_view s);  // RESP3 =txt:...; RESP2 a bulk string
  // Replies written by another writer of the same protocol (EXEC's).
  void Replies(std::string_view written) { out_->append(written); }

 private:
  void Header(char type, uint64_t n);
  std::string* out_;
  int protocol_;
};

}  // namespace pdpm::pdkvs
