#pragma once
// The run-file loader's view of YAML (private to pkscan::config): mappings with known keys, and
// scalars read under a rule. Every error is a ConfigError naming the file, the node's
// line:column, the key and what is accepted (docs/run-files.md).
//
// A YAML::Node that already refers to a node must never be assigned: yaml-cpp's Node::operator=
// makes the referenced node share the right-hand side's data, so it would rewrite the document.
// Nodes (and the Entry and structs holding them) are initialised once; positions kept for later
// are YAML::Mark values.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pkscan::config::detail {

// "a, b, c"
std::string join(const std::vector<std::string>& v);

// Where a value of a library object came from (docs/run-files.md, "Where errors are reported").
struct Located {
  YAML::Node node;      // the value's node (or its parent mapping when the key is absent)
  std::string name;     // its run-file name, lists counted from 1: "doses[2].time"
  bool reword = true;   // "NAME is TEXT, but must be RULE"; false: the library's message as it is
  bool absent = false;  // the key is not in the file (node is its parent): TEXT is "not given"
};
// The node of a library field path (pkscan::Error::field(), 0-based: "doses[1].time"), or none.
using Locate = std::function<std::optional<Located>(const std::string& field)>;
// Locate by a table of field paths: the field, else its nearest ancestor in the table.
using FieldTable = std::map<std::string, Located>;
Locate locate_in(const FieldTable& table);

// The index and the rest of a field path under `prefix`: "doses[1].time" under "doses" gives 1
// and ".time". False when the path is not of that shape.
bool field_index(const std::string& field, const std::string& prefix, std::size_t* index,
                 std::string* rest);

class Loader {
 public:
  explicit Loader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const YAML::Node& node, const std::string& msg) const;
  [[noreturn]] void fail(const YAML::Mark& m, const std::string& msg) const;
  // "FILE:LINE:COLUMN" of a position ("FILE" for a null one), for errors that are not
  // ConfigErrors (BackendUnavailable).
  std::string where(const YAML::Mark& m) const;
  // A path from the run file, relative to the run file's folder unless it is absolute.
  std::string resolve(const std::string& path) const;

  // A mapping's entries by key, rejecting non-scalar keys, duplicates and unknown keys.
  struct Entry {
    YAML::Node key;
    YAML::Node value;
  };
  using Entries = std::map<std::string, Entry>;
  Entries entries(const YAML::Node& node, const std::string& ctx,
                  const std::vector<std::string>& allowed) const;
  // The entry of `key`, or "missing key" at `parent`, the mapping `ctx` that lacks it.
  const Entry& require(const Entries& m, const std::string& key, const YAML::Node& parent,
                       const std::string& ctx) const;

  // A non-empty scalar; `accepted` says what it must be.
  std::string scalar_string(const YAML::Node& v, const std::string& what,
                            const std::string& accepted) const;
  // A plain (unquoted) YAML number. Quoted strings, booleans, empty values are type errors.
  double number(const YAML::Node& v, const std::string& what) const;
  // A parameter's value: a number, not .nan (NaN is the library's mark of a parameter not
  // given); its range is the library's rule.
  double parameter(const YAML::Node& v, const std::string& what) const;
  // A number, finite and >= 0 (> 0 when `positive`); `rule` words that for the message.
  double finite(const YAML::Node& v, const std::string& what, const char* rule,
                bool positive) const;
  // A whole number in [lo, hi].
  std::int64_t integer(const YAML::Node& v, const std::string& what, std::int64_t lo,
                       std::int64_t hi) const;
  // A whole number whose range the library checks (beyond +-2^62 it is clamped to +-2^62, which
  // every library range rejects).
  std::int64_t whole(const YAML::Node& v, const std::string& what) const;

  // Runs a library check (pkscan/checks.hpp and the like): the library writes each rule once and
  // the loader says where the value is. An error about one value whose field `locate` finds
  // becomes a ConfigError at its node, "NAME is TEXT, but must be RULE" with the user's own TEXT
  // (or the library's message without its "simulate: " prefix when the error has no rule or the
  // Located says so); any other library error becomes a ConfigError without a position.
  // BackendUnavailable passes through.
  void checked(const Locate& locate, const std::function<void()>& check) const;

 private:
  std::string file_;
};

}  // namespace pkscan::config::detail
