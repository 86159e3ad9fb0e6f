// AtomicFile and OutputUnit (output.hpp): files written under temporary names and moved into
// place by one commit (temp_files.hpp).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <pkscan/error.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/output/temp_files.hpp>
#include <utility>
#include <vector>

namespace pkscan::output {

namespace {
constexpr std::size_t kBufferBytes = 1 << 20;
std::string errno_text() { return std::strerror(errno); }

std::string dir_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}
}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  fd_ = create_temp_file(path_, temp_);
  buffer_.reserve(kBufferBytes);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty()) remove_temp_file(temp_);
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
  if (fd_ < 0) throw InvalidArgument("AtomicFile: write() to " + path_ + " after commit()");
  if (buffer_.size() + size > kBufferBytes) flush();
  if (size >= kBufferBytes / 4) {  // large: straight to the file, not through the buffer
    flush();
    write_all(data, size);
    return;
  }
  buffer_.append(data, size);
}

void AtomicFile::finish() {
  if (fd_ < 0) return;
  flush();
  if (::fsync(fd_) != 0) throw Error("cannot write output file " + path_ + ": " + errno_text());
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) throw Error("cannot write output file " + path_ + ": " + errno_text());
}

void AtomicFile::commit() {
  if (temp_.empty()) throw InvalidArgument("AtomicFile: commit() of " + path_ + " called twice");
  finish();
  commit_temp_files(path_, {{temp_, path_}}, {});
  temp_.clear();
}

OutputUnit::OutputUnit(std::string main) : main_(std::move(main)) { recover_commit(main_); }

OutputUnit::~OutputUnit() = default;  // each uncommitted AtomicFile removes its temporary file

void OutputUnit::check_path(const std::string& path) const {
  if (dir_of(path) != dir_of(main_))
    throw InvalidArgument("output unit: " + path + " is not in the directory of " + main_ +
                          ", but every file of a unit must be");
  for (const auto& f : files_)
    if (f->path() == path) throw InvalidArgument("output unit: " + path + " is added twice");
  if (std::find(removals_.begin(), removals_.end(), path) != removals_.end())
    throw InvalidArgument("output unit: " + path + " is added twice");
}

AtomicFile& OutputUnit::add(const std::string& path) {
  if (committed_) throw InvalidArgument("output unit: add() after commit()");
  check_path(path);
  files_.push_back(std::make_unique<AtomicFile>(path));
  return *files_.back();
}

void OutputUnit::drop(const AtomicFile& file) {
  const auto it =
      std::find_if(files_.begin(), files_.end(),
                   [&](const std::unique_ptr<AtomicFile>& f) { return f.get() == &file; });
  if (it == files_.end()) throw InvalidArgument("output unit: drop() of a file not in the unit");
  std::string path = (*it)->path();
  files_.erase(it);  // removes its temporary file
  removals_.push_back(std::move(path));
}

void OutputUnit::remove_on_commit(const std::string& path) {
  if (committed_) throw InvalidArgument("output unit: remove_on_commit() after commit()");
  check_path(path);
  remove_orphaned_temp_files(path);  // a killed run's files for this path go too
  removals_.push_back(path);
}

void OutputUnit::commit() {
  if (committed_) throw InvalidArgument("output unit: commit() called twice");
  std::vector<std::pair<std::string, std::string>> renames;
  for (const auto& f : files_) {
    f->finish();
    renames.emplace_back(f->temp_, f->path_);
  }
  // The main file last (without a journal, e.g. on a file system without hard links, its
  // companions are then in place when it is).
  std::stable_partition(renames.begin(), renames.end(),
                        [&](const auto& r) { return r.second != main_; });
  commit_temp_files(main_, renames, removals_);
  for (const auto& f : files_) f->temp_.clear();
  committed_ = true;
}

}  // namespace pkscan::output
