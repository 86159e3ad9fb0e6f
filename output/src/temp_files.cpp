// Temporary output files: names, registry, journaled commits and orphan clean-up
// (temp_files.hpp).
//
// Invariants: every registry operation holds registry().mutex; a commit keeps it from the
// journal's creation to its removal, so a thread that discards the registered files on a signal
// runs either before the commit (the targets are untouched) or after it (every target is
// replaced). The registry is never destroyed: a signal thread may still use it while the
// process exits.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <mutex>
#include <pkscan/error.hpp>
#include <pkscan/output/temp_files.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace pkscan::output {

namespace {

constexpr std::size_t kMaxNameBytes = 128;  // of the target's name inside a temporary name
constexpr std::size_t kMaxHostBytes = 32;
constexpr const char* kTempTag = ".pkscan-tmp.";
constexpr const char* kJournalTag = ".pkscan-commit";
constexpr const char* kJournalMagic = "pkscan-commit 1";
// How long a commit waits for another live process's commit of the same unit.
constexpr std::chrono::seconds kCommitWait{30};

struct Registry {
  std::mutex mutex;
  std::vector<std::string> files;
};

Registry& registry() {
  static Registry* const r = new Registry;  // NOLINT: deliberately never destroyed (see above)
  return *r;
}

bool registered(const Registry& r, const std::string& path) {
  return std::find(r.files.begin(), r.files.end(), path) != r.files.end();
}

void unregister(Registry& r, const std::string& path) {
  const auto it = std::find(r.files.begin(), r.files.end(), path);
  if (it != r.files.end()) r.files.erase(it);
}

// "DIR/" (or "" for a bare name) and "NAME".
std::pair<std::string, std::string> split_path(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {std::string(), path};
  return {path.substr(0, slash + 1), path.substr(slash + 1)};
}

std::string dir_for_open(const std::string& dir) { return dir.empty() ? "." : dir; }

// Removes a temporary file, or a temporary directory with the plain files in it.
bool remove_path(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return true;
  if (errno != EISDIR && errno != EPERM) return false;
  if (DIR* d = ::opendir(path.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string entry = e->d_name;
      if (entry != "." && entry != "..") ::unlink((path + "/" + entry).c_str());
    }
    ::closedir(d);
  }
  return ::rmdir(path.c_str()) == 0;
}

std::string host_tag() {
  char buf[256] = {};
  std::string h;
  if (::gethostname(buf, sizeof buf - 1) == 0) h = buf;
  std::string out;
  for (char c : h) {
    if (out.size() >= kMaxHostBytes) break;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += ok ? c : '-';
  }
  return out.empty() ? std::string("host") : out;
}

const std::string& my_host() {
  static const std::string h = host_tag();
  return h;
}

// ".NAME" with NAME cut to kMaxNameBytes.
std::string hidden_name(const std::string& name) { return "." + name.substr(0, kMaxNameBytes); }

bool parse_pid(const std::string& s, long& pid) {
  if (s.empty() || s.size() > 10) return false;
  pid = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    pid = pid * 10 + (c - '0');
  }
  return pid > 0;
}

// Whether the process `pid` of host `host` is gone. Another host's process is never taken for
// gone; this process is gone for files it does not know (a former process with the same pid).
bool owner_gone(const Registry& r, const std::string& host, long pid, const std::string& file) {
  if (host != my_host()) return false;
  if (pid == static_cast<long>(::getpid())) return !registered(r, file);
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// "HOST.PID.XXXXXX" (what follows the prefix of a temporary name) -> host, pid.
bool parse_temp_suffix(const std::string& rest, std::string& host, long& pid) {
  const std::size_t last = rest.rfind('.');
  if (last == std::string::npos || rest.size() - last - 1 != 6 || last == 0) return false;
  const std::size_t mid = rest.rfind('.', last - 1);
  if (mid == std::string::npos || mid == 0) return false;
  host = rest.substr(0, mid);
  if (host.find('.') != std::string::npos) return false;
  return parse_pid(rest.substr(mid + 1, last - mid - 1), pid);
}

// ---- Journal ------------------------------------------------------------------------------------

struct Journal {
  std::string host;
  long pid = 0;
  std::vector<std::pair<std::string, std::string>> renames;  // names in the unit's directory
  std::vector<std::string> removals;
};

void put_name(std::string& out, const std::string& name) {
  out += std::to_string(name.size()) + ":" + name;
}

std::string journal_text(const Journal& j) {
  std::string t = std::string(kJournalMagic) + "\nowner " + j.host + " " + std::to_string(j.pid);
  for (const auto& [from, to] : j.renames) {
    t += "\nrename ";
    put_name(t, from);
    t += " ";
    put_name(t, to);
  }
  for (const std::string& name : j.removals) {
    t += "\nremove ";
    put_name(t, name);
  }
  return t + "\nend\n";
}

class JournalReader {
 public:
  explicit JournalReader(const std::string& text) : t_(text) {}
  bool word(const std::string& w) {
    if (t_.compare(pos_, w.size(), w) != 0) return false;
    pos_ += w.size();
    return true;
  }
  bool name(std::string& out) {
    std::size_t n = 0;
    std::size_t digits = 0;
    while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9' && digits < 5) {
      n = n * 10 + static_cast<std::size_t>(t_[pos_++] - '0');
      ++digits;
    }
    if (digits == 0 || !word(":") || n == 0 || pos_ + n > t_.size()) return false;
    out = t_.substr(pos_, n);
    pos_ += n;
    return out.find('/') == std::string::npos && out != "." && out != "..";
  }
  bool token(std::string& out) {  // up to the next space or newline
    const std::size_t end = t_.find_first_of(" \n", pos_);
    if (end == std::string::npos || end == pos_) return false;
    out = t_.substr(pos_, end - pos_);
    pos_ = end;
    return true;
  }

 private:
  const std::string& t_;
  std::size_t pos_ = 0;
};

bool parse_journal(const std::string& text, Journal& j) {
  JournalReader in(text);
  std::string pid;
  if (!in.word(std::string(kJournalMagic) + "\nowner ") || !in.token(j.host) || !in.word(" ") ||
      !in.token(pid) || !parse_pid(pid, j.pid))
    return false;
  for (;;) {
    if (in.word("\nend\n")) return true;
    std::string a, b;
    if (in.word("\nrename ")) {
      if (!in.name(a) || !in.word(" ") || !in.name(b)) return false;
      j.renames.emplace_back(a, b);
    } else if (in.word("\nremove ")) {
      if (!in.name(a)) return false;
      j.removals.push_back(a);
    } else {
      return false;
    }
  }
}

bool read_file(const std::string& path, std::string& text) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  text.clear();
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return n == 0;
    }
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > (1u << 20)) {  // not a journal of ours
      ::close(fd);
      return false;
    }
  }
}

void sync_dir(const std::string& dir) {
  const int fd = ::open(dir_for_open(dir).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

enum class JournalState { None, Recovered, Busy };

// Rolls forward the journal of the unit at `path` when its owner is gone. Registry lock held.
// Busy: a journal exists that is not ours to complete (owner alive or on another host, or the
// file is not a journal pkscan can read).
JournalState recover_locked(Registry& r, const std::string& path, Journal* busy_owner) {
  const auto [dir, name] = split_path(path);
  const std::string journal = commit_journal_path(path);
  std::string text;
  if (!read_file(journal, text)) return errno == ENOENT ? JournalState::None : JournalState::Busy;
  Journal j;
  if (!parse_journal(text, j) || !owner_gone(r, j.host, j.pid, journal)) {
    if (busy_owner != nullptr) *busy_owner = j;
    return JournalState::Busy;
  }
  for (const auto& [from, to] : j.renames) {
    struct stat st {};
    if (::lstat((dir + from).c_str(), &st) == 0) ::rename((dir + from).c_str(), (dir + to).c_str());
  }
  for (const std::string& gone : j.removals) ::unlink((dir + gone).c_str());
  ::unlink(journal.c_str());
  return JournalState::Recovered;
}

std::size_t sweep_locked(Registry& r, const std::string& path) {
  const auto [dir, name] = split_path(path);
  const std::string prefix = hidden_name(name) + kTempTag;
  DIR* d = ::opendir(dir_for_open(dir).c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> gone;
  while (const dirent* e = ::readdir(d)) {
    const std::string entry = e->d_name;
    if (entry.compare(0, prefix.size(), prefix) != 0) continue;
    std::string host;
    long pid = 0;
    if (!parse_temp_suffix(entry.substr(prefix.size()), host, pid)) continue;
    if (owner_gone(r, host, pid, dir + entry)) gone.push_back(dir + entry);
  }
  ::closedir(d);
  std::size_t removed = 0;
  for (const std::string& f : gone)
    if (remove_path(f)) ++removed;
  return removed;
}

[[noreturn]] __attribute__((cold, noinline)) void fail(const std::string& what, int err) {
  throw Error(what + ": " + std::strerror(err));
}

}  // namespace

std::string temp_prefix(const std::string& path) {
  const auto [dir, name] = split_path(path);
  return dir + hidden_name(name) + kTempTag;
}

std::string commit_journal_path(const std::string& path) {
  const auto [dir, name] = split_path(path);
  return dir + hidden_name(name) + kJournalTag;
}

std::size_t longest_temp_name(const std::string& path) {
  const std::string hidden = hidden_name(split_path(path).second);
  // HOST.PID.XXXXXX: a pid has at most 10 digits (parse_pid).
  const std::size_t temp = hidden.size() + std::strlen(kTempTag) + kMaxHostBytes + 1 + 10 + 7;
  return std::max(temp, hidden.size() + std::strlen(kJournalTag));
}

int create_temp_file(const std::string& path, std::string& temp) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  recover_locked(r, path, nullptr);
  sweep_locked(r, path);
  std::string name = temp_prefix(path) + my_host() + "." + std::to_string(::getpid()) + ".XXXXXX";
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) fail("cannot create output file " + path, errno);
  ::fchmod(fd, 0644);  // mkstemp creates 0600; results are ordinary files
  r.files.push_back(name);
  temp = name;
  return fd;
}

std::string create_temp_dir(const std::string& path) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  recover_locked(r, path, nullptr);
  sweep_locked(r, path);
  std::string name = temp_prefix(path) + my_host() + "." + std::to_string(::getpid()) + ".XXXXXX";
  if (::mkdtemp(name.data()) == nullptr) fail("cannot create " + path, errno);
  r.files.push_back(name);
  return name;
}

void remove_temp_file(const std::string& temp) noexcept {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  if (!registered(r, temp)) return;  // committed, forgotten or discarded
  remove_path(temp);
  unregister(r, temp);
}

void forget_temp_file(const std::string& temp) noexcept {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  unregister(r, temp);
}

void commit_temp_files(const std::string& main,
                       const std::vector<std::pair<std::string, std::string>>& renames,
                       const std::vector<std::string>& removals) {
  const std::string dir = split_path(main).first;
  auto check_dir = [&](const std::string& p) {
    if (split_path(p).first != dir)
      throw InvalidArgument("commit: " + p + " is not in the directory of " + main +
                            ", but every file of a unit must be");
  };
  for (const auto& [from, to] : renames) {
    check_dir(from);
    check_dir(to);
  }
  for (const std::string& p : removals) check_dir(p);
  Registry& r = registry();

  if (renames.size() + removals.size() <= 1) {  // one operation: atomic by itself
    const std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& [from, to] : renames) {
      if (::rename(from.c_str(), to.c_str()) != 0)
        fail("cannot move output into place at " + to, errno);
      unregister(r, from);
    }
    for (const std::string& p : removals)
      if (::unlink(p.c_str()) != 0 && errno != ENOENT) fail("cannot remove " + p, errno);
    return;
  }

  // The journal, complete and synced under a temporary name before it is linked into place.
  Journal j;
  j.host = my_host();
  j.pid = static_cast<long>(::getpid());
  for (const auto& [from, to] : renames)
    j.renames.emplace_back(split_path(from).second, split_path(to).second);
  for (const std::string& p : removals) j.removals.push_back(split_path(p).second);
  const std::string text = journal_text(j);
  std::string jtemp;
  {
    const int fd = create_temp_file(main, jtemp);
    std::size_t done = 0;
    int err = 0;
    while (done < text.size() && err == 0) {
      const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
      if (w < 0 && errno != EINTR) err = errno;
      if (w > 0) done += static_cast<std::size_t>(w);
    }
    if (err == 0 && ::fsync(fd) != 0) err = errno;
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err != 0) {
      remove_temp_file(jtemp);
      fail("cannot write output file " + main, err);
    }
  }
  const std::string journal = commit_journal_path(main);
  const auto deadline = std::chrono::steady_clock::now() + kCommitWait;
  std::unique_lock<std::mutex> lock(r.mutex);
  bool journaled = false;
  for (;;) {
    if (::link(jtemp.c_str(), journal.c_str()) == 0) {
      journaled = true;
      break;
    }
    const int err = errno;
    if (err == EPERM || err == EOPNOTSUPP || err == ENOSYS || err == EMLINK) break;  // no links
    if (err != EEXIST) {
      ::unlink(jtemp.c_str());
      unregister(r, jtemp);
      fail("cannot write output file " + main + " (commit journal)", err);
    }
    Journal owner;
    if (recover_locked(r, main, &owner) != JournalState::Busy) continue;
    if (std::chrono::steady_clock::now() > deadline) {
      ::unlink(jtemp.c_str());
      unregister(r, jtemp);
      throw Error("cannot commit output file " + main + ": another pkscan process (" +
                  (owner.pid > 0 ? "host " + owner.host + ", pid " + std::to_string(owner.pid)
                                 : std::string("unknown")) +
                  ") is committing it; when no such process runs, remove " + journal);
    }
    lock.unlock();  // a signal may be acted on while waiting
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    lock.lock();
  }
  ::unlink(jtemp.c_str());
  unregister(r, jtemp);
  if (journaled) sync_dir(dir);  // the journal is durable before the first rename

  // The renames and removals. After a failure with a journal, the files still waiting stay for
  // the next run's roll forward; without one, the caller removes them.
  std::size_t i = 0;
  auto stop = [&](const std::string& what, int err) {
    if (journaled)
      for (std::size_t k = i; k < renames.size(); ++k) unregister(r, renames[k].first);
    fail(what + (journaled ? " (the next run to " + main + " completes this commit)" : ""), err);
  };
  for (; i < renames.size(); ++i) {
    if (::rename(renames[i].first.c_str(), renames[i].second.c_str()) != 0)
      stop("cannot move output into place at " + renames[i].second, errno);
    unregister(r, renames[i].first);
  }
  for (const std::string& p : removals)
    if (::unlink(p.c_str()) != 0 && errno != ENOENT) stop("cannot remove " + p, errno);
  if (journaled) ::unlink(journal.c_str());
}

bool recover_commit(const std::string& path) noexcept {
  try {
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    return recover_locked(r, path, nullptr) == JournalState::Recovered;
  } catch (...) {
    return false;
  }
}

std::size_t remove_orphaned_temp_files(const std::string& path) noexcept {
  try {
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    recover_locked(r, path, nullptr);
    return sweep_locked(r, path);
  } catch (...) {
    return 0;
  }
}

std::size_t discard_temp_files(bool hold) noexcept {
  Registry& r = registry();
  std::unique_lock<std::mutex> lock(r.mutex);
  std::size_t n = 0;
  for (const std::string& f : r.files)
    if (remove_path(f)) ++n;
  r.files.clear();
  if (hold) lock.release();  // stays locked until the process ends
  return n;
}

std::vector<std::string> registered_temp_files() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return r.files;
}

}  // namespace pkscan::output
