#pragma once
// Rows formatted apart (ResultSink::format, DesignSink::format): the bytes of several files of
// one result in one buffer, each file's part as its size (8 bytes) and then its bytes, in the
// order the sink writes the files; and the sink splitting such a buffer before it appends.
#include <cstdint>
#include <cstring>
#include <vector>

namespace pkscan::output::detail {

// A destination of formatted bytes that appends them to a buffer.
struct Bytes {
  std::vector<char>& out;
  void write(const char* p, std::size_t n) { out.insert(out.end(), p, p + n); }
};

// Appends one part to `bytes`: what rows(Bytes&) writes, led by its size.
template <class Rows>
void append_part(std::vector<char>& bytes, Rows&& rows) {
  const std::size_t at = bytes.size();
  bytes.resize(at + sizeof(std::uint64_t));
  Bytes out{bytes};
  rows(out);
  const auto n = static_cast<std::uint64_t>(bytes.size() - at - sizeof(std::uint64_t));
  std::memcpy(bytes.data() + at, &n, sizeof n);
}

// Splits `bytes` into exactly `parts` parts (begin[k], size[k]); false when it is not that.
inline bool split_parts(const std::vector<char>& bytes, int parts, const char** begin,
                        std::size_t* size) {
  std::size_t at = 0;
  for (int k = 0; k < parts; ++k) {
    std::uint64_t n = 0;
    if (bytes.size() - at < sizeof n) return false;
    std::memcpy(&n, bytes.data() + at, sizeof n);
    at += sizeof n;
    if (n > bytes.size() - at) return false;
    begin[k] = bytes.data() + at;
    size[k] = static_cast<std::size_t>(n);
    at += size[k];
  }
  return at == bytes.size();
}

}  // namespace pkscan::output::detail
