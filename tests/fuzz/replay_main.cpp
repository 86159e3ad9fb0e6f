// Replay driver: runs every file of the given corpus directories (or single files) through the
// fuzz target's LLVMFuzzerTestOneInput, without libFuzzer. Linked with each fuzz target in the
// normal build and registered as a ctest test, so the committed corpus is replayed in CI (and
// under the sanitizers by scripts/sanitize.sh).
//
// Fails (exit status 1) when a path is missing or when no file was replayed; a target that
// crashes, aborts or lets an unexpected exception escape fails the test by itself.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;

bool replay_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
    return false;
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::size_t replayed = 0;
  bool ok = true;
  for (int a = 1; a < argc; ++a) {
    const fs::path path = argv[a];
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<fs::path> files;
      for (const fs::directory_entry& e : fs::directory_iterator(path, ec))
        if (e.is_regular_file()) files.push_back(e.path());
      if (ec) {
        std::fprintf(stderr, "replay: cannot list %s: %s\n", path.c_str(), ec.message().c_str());
        ok = false;
      }
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) {
        ok = replay_file(f) && ok;
        ++replayed;
      }
    } else if (fs::is_regular_file(path, ec)) {
      ok = replay_file(path) && ok;
      ++replayed;
    } else {
      std::fprintf(stderr, "replay: no such file or directory: %s\n", path.c_str());
      ok = false;
    }
  }
  std::printf("replay: %zu inputs replayed\n", replayed);
  if (replayed == 0) {
    std::fprintf(stderr, "replay: no inputs found\n");
    return 1;
  }
  return ok ? 0 : 1;
}
