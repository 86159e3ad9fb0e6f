#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <pkscan/config/output.hpp>
#include <pkscan/error.hpp>
#include <vector>

namespace pkscan::config {

namespace {
constexpr std::size_t kBufferBytes = 1 << 20;
std::string errno_text() { return std::strerror(errno); }
}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::vector<char> tmpl(path_.begin(), path_.end());
  const char suffix[] = ".tmp.XXXXXX";
  tmpl.insert(tmpl.end(), suffix, suffix + sizeof suffix);  // includes the terminating NUL
  fd_ = ::mkstemp(tmpl.data());
  if (fd_ < 0) throw Error("cannot create output file " + path_ + ": " + errno_text());
  temp_ = tmpl.data();
  ::fchmod(fd_, 0644);
  buffer_.reserve(kBufferBytes);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::flush() {
  write_all(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFile::write_all(const char* p, std::size_t left) {
  while (left > 0) {
    const ssize_t w = ::write(fd_, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot write output file " + path_ + ": " + errno_text());
    }
    p += w;
    left -= static_cast<std::size_t>(w);
  }
}

void AtomicFile::write(const char* data, std::size_t size) {
  if (buffer_.size() + size > kBufferBytes) flush();
  if (size >= kBufferBytes / 4) {  // large: straight to the file, not through the buffer
    flush();
    write_all(data, size);
    return;
  }
  buffer_.append(data, size);
}

void AtomicFile::commit() {
  flush();
  if (::fsync(fd_) != 0) throw Error("cannot write output file " + path_ + ": " + errno_text());
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw Error("cannot write output file " + path_ + ": " + errno_text());
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0)
    throw Error("cannot move output into place at " + path_ + ": " + errno_text());
  temp_.clear();
}

}  // namespace pkscan::config
