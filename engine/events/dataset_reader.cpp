// NONMEM-format dataset reader (CSV).
//
// ---- Dataset conventions (NONMEM's; copy into docs/conventions.md) ---------------------------
// File
// - At most 1 GiB (checked before reading). An optional UTF-8 byte-order mark is ignored.
// - Lines end in LF or CRLF. Lines that are empty or hold only spaces/tabs are skipped, and so
//   are lines whose first non-blank character is '#' or '@' (comments; NONMEM IGNORE=# / @).
// - The first line that is not skipped is the header; every later one is a record.
// - Fields are separated by ','. Spaces and tabs around a field are ignored. A field may be
//   quoted, "...", with "" for a quote inside; it may then contain ','. Quotes are removed
//   before a value is read, in any column (R's write.csv quotes header names and ID text).
// Columns
// - Header names are compared ignoring case and may come in any order. Required: ID, TIME.
//   Optional: AMT, RATE, EVID, CMT, II, ADDL, SS, DV, MDV.
// - A column whose name is a model parameter's name or alias (ignoring case, e.g. KA or K01)
//   is a parameter column: its values are that parameter per record, stored under the name
//   the model gives it (ModelInfo::parameters). The standard names above win over parameter
//   names.
// - Every other column is a covariate: carried as text (quotes and surrounding spaces removed)
//   to the output, under the name as written.
// - Two columns with the same name ignoring case, two columns naming the same parameter
//   (KA and K01), and an empty column name are errors.
// Values
// - '.' or an empty field means missing.
// - A number is the whole field read like strtod (locale-independent: '.' is the decimal
//   point), finite: trailing text, hexadecimal, NaN and infinity are rejected.
// - Whole-number columns (EVID, CMT, ADDL, SS, MDV) accept integral values written as reals
//   (1.0).
// - Missing AMT, RATE, II, ADDL, SS and CMT mean 0. CMT 0 (or missing) means the NONMEM
//   default compartment, chosen by the engine. Missing DV is NaN.
// - Missing EVID (or no EVID column): 1 (dose) if AMT > 0 or if the record is a steady-state
//   constant infusion (SS > 0 and RATE > 0), else 0 (observation). This is NONMEM without EVID:
//   a record with an amount is a dose.
// - Missing MDV (or no MDV column): 1 if EVID != 0 or DV is missing, else 0.
// - Covariate text is kept as written ('.' stays '.'); parameter values are numbers or
//   missing (NaN); their ranges (negative rates, zero volumes) are checked by the engine.
// Records (each violation is a ConfigError at file:line:column, column = 1-based field index,
// naming the column as written in the header, the value and the rule)
// - Every record has as many fields as the header.
// - ID is given on every record. The records of one subject are consecutive: an ID that
//   appears again after other IDs is an error. IDs are compared as text (1 and 01 differ).
// - TIME is given, >= 0, and does not decrease within a subject. (NONMEM lets time go back at
//   a reset record, EVID 3 or 4; pkscan does not: start a new ID instead.)
// - EVID is 0 observation, 1 dose, 2 other, 3 reset, 4 reset and dose.
// - CMT is an integer in 1..(number of compartments of the model), or 0 / missing.
// - AMT >= 0. A dose (EVID 1 or 4) has AMT > 0, except a steady-state record (SS 1 or 2).
// - RATE >= 0: 0 is a bolus, > 0 a zero-order infusion of AMT at that rate. RATE -1 and -2
//   (rate or duration modeled in the control stream) are not supported.
// - II >= 0. ADDL is a whole number >= 0; ADDL > 0 needs II > 0.
// - SS is 0, 1 or 2; SS > 0 needs II > 0, except SS 1 with RATE > 0 and AMT 0 (a
//   steady-state constant infusion).
// - A record that is not a dose (EVID 0, 2, 3) carries no dosing information: AMT, RATE, II,
//   ADDL and SS are 0 or missing there (NM-TRAN rejects dosing items on observation records;
//   pkscan applies the same to EVID 2 and 3). RATE there is "RATE without AMT".
// - MDV is 0 or 1, and 1 on every record that is not an observation (EVID != 0).
// - DV and parameter columns are numbers or missing.
// - A dataset holds at least one record.
// Errors are reported for the first offending record; within a record: a missing ID first,
// then single values in column order, then ID order (consecutive), TIME order, and the rules
// that combine columns, in the order above.
// -----------------------------------------------------------------------------------------------
//
// Implementation: one pass over the text, line by line, with a reused field buffer. Nothing
// is printed; every problem throws ConfigError through the cold `fail` helper.

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <pkscan/dataset.hpp>
#include <pkscan/error.hpp>
#include <string_view>
#include <system_error>
#include <unordered_map>

namespace pkscan {

std::int64_t Dataset::observation_count() const noexcept {
  std::int64_t n = 0;
  for (const DatasetSubject& s : subjects)
    for (const DatasetRecord& r : s.records) n += r.evid == 0 ? 1 : 0;
  return n;
}

int Dataset::covariate_index(const std::string& name) const noexcept {
  for (std::size_t i = 0; i < covariate_columns.size(); ++i)
    if (covariate_columns[i] == name) return static_cast<int>(i);
  auto same = [](const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t k = 0; k < a.size(); ++k)
      if (std::tolower(static_cast<unsigned char>(a[k])) !=
          std::tolower(static_cast<unsigned char>(b[k])))
        return false;
    return true;
  };
  for (std::size_t i = 0; i < covariate_columns.size(); ++i)
    if (same(covariate_columns[i], name)) return static_cast<int>(i);
  return -1;
}

int Dataset::header_column(const std::string& name) const noexcept {
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return static_cast<int>(i + 1);
  return 0;
}

std::int64_t Dataset::record_count() const noexcept {
  std::int64_t n = 0;
  for (const DatasetSubject& s : subjects) n += static_cast<std::int64_t>(s.records.size());
  return n;
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Largest ADDL accepted: every whole number up to 2^53 is exact in a double and fits int64.
constexpr double kMaxAddl = 9007199254740992.0;
constexpr const char* kMaxAddlText = "9007199254740992";
// Longest piece of a value quoted in a message.
constexpr std::size_t kMaxShown = 60;

enum class Kind { Id, Time, Amt, Rate, Evid, Cmt, Ii, Addl, Ss, Dv, Mdv, Parameter, Covariate };

struct StandardColumn {
  const char* name;  // lower case
  Kind kind;
};

constexpr StandardColumn kStandard[] = {
    {"id", Kind::Id},     {"time", Kind::Time}, {"amt", Kind::Amt}, {"rate", Kind::Rate},
    {"evid", Kind::Evid}, {"cmt", Kind::Cmt},   {"ii", Kind::Ii},   {"addl", Kind::Addl},
    {"ss", Kind::Ss},     {"dv", Kind::Dv},     {"mdv", Kind::Mdv},
};

struct Column {
  std::string name;  // as written (spaces and quotes removed)
  Kind kind = Kind::Covariate;
  int slot = -1;  // index into DatasetRecord::parameters / covariates
};

// One field of a line; `text` is reused across lines to avoid allocations.
struct Field {
  std::string text;
  bool quoted = false;
};

enum class Num { Ok, Missing, Bad };

bool is_blank(char c) noexcept { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool is_missing(std::string_view s) noexcept {
  s = trim(s);
  return s.empty() || s == ".";
}

// Reads a whole field as a finite number (strtod syntax, '.' decimal point, no hex/inf/nan).
Num parse_number(std::string_view s, double& out) noexcept {
  s = trim(s);
  if (s.empty() || s == ".") return Num::Missing;
  for (char c : s) {
    const bool ok =
        (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
    if (!ok) return Num::Bad;
  }
  if (s.front() == '+') {  // from_chars takes no '+'; strtod does
    s.remove_prefix(1);
    if (s.empty() || s.front() == '+' || s.front() == '-') return Num::Bad;
  }
  double v = 0.0;
  const char* end = s.data() + s.size();
  const std::from_chars_result r = std::from_chars(s.data(), end, v);
  if (r.ec != std::errc() || r.ptr != end || !std::isfinite(v)) return Num::Bad;
  out = v + 0.0;  // -0 -> +0
  return Num::Ok;
}

// Text of a value for a message: control bytes replaced, long values cut.
std::string shown(std::string_view s) {
  std::string out;
  const std::size_t n = s.size() < kMaxShown ? s.size() : kMaxShown;
  out.reserve(n + 5);
  out += '"';
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  if (n < s.size()) out += "...";
  out += '"';
  return out;
}

[[noreturn, gnu::cold, gnu::noinline]] void fail(const std::string& file, std::int64_t line,
                                                 int column, const std::string& message) {
  // Lines fit in int: the text is at most kMaxDatasetBytes (2^30) bytes.
  throw ConfigError(file, static_cast<int>(line), column, message);
}

// Splits a line into fields. Returns the number of fields, or -(1-based index) of a malformed
// quoted field with `why` set.
int split_fields(std::string_view line, std::vector<Field>& fields, std::string& why) {
  std::size_t pos = 0;
  const std::size_t n = line.size();
  int count = 0;
  while (true) {
    if (static_cast<std::size_t>(count) == fields.size()) fields.emplace_back();
    Field& f = fields[static_cast<std::size_t>(count)];
    ++count;
    f.text.clear();
    f.quoted = false;
    while (pos < n && is_blank(line[pos])) ++pos;
    if (pos < n && line[pos] == '"') {
      f.quoted = true;
      ++pos;
      bool closed = false;
      while (pos < n) {
        const char c = line[pos++];
        if (c != '"') {
          f.text += c;
        } else if (pos < n && line[pos] == '"') {
          f.text += '"';
          ++pos;
        } else {
          closed = true;
          break;
        }
      }
      if (!closed) {
        why = "has an opening quote but no closing quote on the same line";
        return -count;
      }
      while (pos < n && is_blank(line[pos])) ++pos;
      if (pos < n && line[pos] != ',') {
        why = "has text after its closing quote";
        return -count;
      }
    } else {
      std::size_t end = line.find(',', pos);
      if (end == std::string_view::npos) end = n;
      f.text.assign(trim(line.substr(pos, end - pos)));
      pos = end;
    }
    if (pos >= n) break;
    ++pos;  // the ','
  }
  return count;
}

class DatasetParser {
 public:
  DatasetParser(const std::string& file, const ModelInfo& model)
      : file_(file), compartments_(static_cast<int>(model.compartments.size())) {
    for (const ParameterInfo& p : model.parameters) {  // stored as the model spells it
      parameters_.emplace(lower(p.name), p.name);
      if (!p.alias.empty()) parameters_.emplace(lower(p.alias), p.name);
    }
  }

  Dataset parse(const std::string& text) {
    dataset_.file = file_;
    std::string_view rest(text);
    if (rest.size() >= 3 && rest.substr(0, 3) == "\xEF\xBB\xBF") rest.remove_prefix(3);
    std::int64_t line_no = 0;
    while (!rest.empty()) {
      std::size_t eol = rest.find('\n');
      std::string_view line = rest.substr(0, eol);
      rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      const std::string_view content = trim(line);
      if (content.empty() || content.front() == '#' || content.front() == '@') continue;
      line_ = line_no;
      if (header_line_ == 0) {
        header(line);
      } else {
        record(line);
      }
    }
    if (header_line_ == 0)
      fail(file_, 0, 0,
           "the dataset is empty, but must start with a header line naming its columns (ID, "
           "TIME, ...) followed by records");
    if (dataset_.subjects.empty())
      fail(file_, header_line_, 0,
           "the dataset has no records after its header (line " + std::to_string(header_line_) +
               "), but must hold at least one record");
    return std::move(dataset_);
  }

 private:
  // ---- header -------------------------------------------------------------------------------
  void header(std::string_view line) {
    header_line_ = line_;
    std::string why;
    const int count = split_fields(line, fields_, why);
    if (count < 0) fail(file_, line_, -count, "header field " + std::to_string(-count) + " " + why);
    std::unordered_map<std::string, int> seen;            // lower-case name -> column
    std::unordered_map<std::string, int> seen_parameter;  // canonical -> column
    for (int c = 0; c < count; ++c) {
      Column col;
      col.name = fields_[static_cast<std::size_t>(c)].text;
      if (fields_[static_cast<std::size_t>(c)].quoted) col.name = std::string(trim(col.name));
      if (col.name.empty())
        fail(file_, line_, c + 1,
             "column " + std::to_string(c + 1) +
                 " has an empty name in the header, but every column must have a name");
      const std::string key = lower(col.name);
      const auto [it, inserted] = seen.emplace(key, c);
      if (!inserted) {
        const Column& first = columns_[static_cast<std::size_t>(it->second)];
        fail(file_, line_, c + 1,
             "column " + col.name + " (column " + std::to_string(c + 1) + ") repeats column " +
                 first.name + " (column " + std::to_string(it->second + 1) +
                 "), but column names must be unique (compared ignoring case)");
      }
      bool standard = false;
      for (const StandardColumn& s : kStandard) {
        if (key == s.name) {
          col.kind = s.kind;
          standard = true;
          break;
        }
      }
      if (!standard) {
        const auto p = parameters_.find(key);
        if (p != parameters_.end()) {
          const auto [q, fresh] = seen_parameter.emplace(p->second, c);
          if (!fresh) {
            const Column& first = columns_[static_cast<std::size_t>(q->second)];
            fail(file_, line_, c + 1,
                 "column " + col.name + " (column " + std::to_string(c + 1) + ") and column " +
                     first.name + " (column " + std::to_string(q->second + 1) +
                     ") both give model parameter " + p->second +
                     ", but each parameter may appear in one column only");
          }
          col.kind = Kind::Parameter;
          col.slot = static_cast<int>(dataset_.parameter_columns.size());
          dataset_.parameter_columns.push_back(p->second);
        } else {
          col.kind = Kind::Covariate;
          col.slot = static_cast<int>(dataset_.covariate_columns.size());
          dataset_.covariate_columns.push_back(col.name);
        }
      }
      dataset_.columns.push_back(col.name);
      columns_.push_back(std::move(col));
    }
    for (const char* required : {"ID", "TIME"}) {
      if (seen.count(lower(required)) == 0) {
        std::string found;
        for (const Column& col : columns_) found += (found.empty() ? "" : ", ") + col.name;
        fail(file_, line_, 0,
             std::string("the header has no ") + required +
                 " column, but must name the columns ID and TIME (any case, any order); it "
                 "names: " +
                 found +
                 " (the header is the first line that is not empty and does not start with '#' "
                 "or '@')");
      }
    }
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      const Kind k = columns_[c].kind;
      const int index = static_cast<int>(c);
      if (k == Kind::Id) id_col_ = index;
      if (k == Kind::Time) time_col_ = index;
      if (k == Kind::Amt) amt_col_ = index;
      if (k == Kind::Rate) rate_col_ = index;
      if (k == Kind::Evid) evid_col_ = index;
      if (k == Kind::Cmt) cmt_col_ = index;
      if (k == Kind::Ii) ii_col_ = index;
      if (k == Kind::Addl) addl_col_ = index;
      if (k == Kind::Ss) ss_col_ = index;
      if (k == Kind::Mdv) mdv_col_ = index;
    }
  }

  // ---- messages -----------------------------------------------------------------------------
  const std::string& text_of(int c) const { return fields_[static_cast<std::size_t>(c)].text; }
  const std::string& name_of(int c) const { return columns_[static_cast<std::size_t>(c)].name; }

  std::string context() const { return id_.empty() ? std::string() : " (ID " + shown(id_) + ")"; }

  // "<NAME> is <value>, but must be <rule> (ID "x")" at field c of the current line.
  [[noreturn]] void bad(int c, const std::string& rule) const {
    const std::string& t = text_of(c);
    const std::string value = is_missing(t) ? std::string("missing") : shown(t);
    fail(file_, line_, c + 1, name_of(c) + " is " + value + ", but must be " + rule + context());
  }

  std::string evid_note(const DatasetRecord& r) const {
    std::string s = "EVID " + std::to_string(r.evid);
    if (!evid_given_) s += ", derived: EVID is missing and AMT is not > 0";
    return s;
  }

  // ---- one value ----------------------------------------------------------------------------
  // Reads field c as a number; false when missing. Non-numeric text is an error under `rule`.
  bool number(int c, double& v, const std::string& rule) const {
    switch (parse_number(text_of(c), v)) {
      case Num::Ok:
        return true;
      case Num::Missing:
        return false;
      case Num::Bad:
        break;
    }
    bad(c, rule);
  }

  std::string cmt_rule() const {
    const std::string n = std::to_string(compartments_);
    return "an integer in 1.." + n + " (the model has " + n +
           " compartments; 0 or '.' = the NONMEM default compartment)";
  }

  // ---- records ------------------------------------------------------------------------------
  void record(std::string_view line) {
    std::string why;
    const int count = split_fields(line, fields_, why);
    if (count < 0)
      fail(file_, line_, -count,
           "field " + std::to_string(-count) + " (" +
               (static_cast<std::size_t>(-count) <= columns_.size() ? name_of(-count - 1)
                                                                    : std::string("no column")) +
               ") " + why);
    const int columns = static_cast<int>(columns_.size());
    if (count != columns) {
      fail(file_, line_, (count > columns ? columns : count) + 1,
           "the record has " + std::to_string(count) + " fields, but must have " +
               std::to_string(columns) + " like the header (line " + std::to_string(header_line_) +
               ")");
    }

    // ID first: every later message names it.
    id_.clear();
    const std::string_view id = trim(text_of(id_col_));
    if (id.empty() || id == ".") bad(id_col_, "given on every record");
    id_.assign(id);

    DatasetRecord r;
    r.line = line_;
    r.parameters.assign(dataset_.parameter_columns.size(), kNaN);
    r.covariates.resize(dataset_.covariate_columns.size());
    evid_given_ = false;
    bool mdv_given = false;
    double v = 0.0;
    // AMT and II: a number >= 0, or '.' for none (the field keeps its default).
    auto non_negative_or_none = [&](int c, double& field) {
      if (number(c, v, "a number >= 0, or '.' for none")) {
        if (v < 0.0) bad(c, ">= 0");
        field = v;
      }
    };
    for (int c = 0; c < columns; ++c) {
      const Column& col = columns_[static_cast<std::size_t>(c)];
      switch (col.kind) {
        case Kind::Id:
          break;
        case Kind::Time:
          if (!number(c, v, "a number >= 0") || v < 0.0) bad(c, "a number >= 0");
          r.time = v;
          break;
        case Kind::Amt:
          non_negative_or_none(c, r.amt);
          break;
        case Kind::Rate:
          if (number(c, v, "a number >= 0 (0 or '.' = bolus)")) {
            if (v == -1.0)
              bad(c,
                  ">= 0: RATE -1 (infusion rate modeled in the control stream) is not "
                  "supported; give the infusion rate in RATE");
            if (v == -2.0)
              bad(c,
                  ">= 0: RATE -2 (infusion duration modeled in the control stream) is not "
                  "supported; give the infusion rate (AMT / duration) in RATE");
            if (v < 0.0) bad(c, ">= 0 (0 or '.' = bolus)");
            r.rate = v;
          }
          break;
        case Kind::Evid: {
          const std::string rule =
              "one of 0 (observation), 1 (dose), 2 (other), 3 (reset), 4 (reset and dose), or "
              "'.' to derive it from AMT";
          if (number(c, v, rule)) {
            if (!(v == 0.0 || v == 1.0 || v == 2.0 || v == 3.0 || v == 4.0)) bad(c, rule);
            r.evid = static_cast<int>(v);
            evid_given_ = true;
          }
          break;
        }
        case Kind::Cmt:
          if (number(c, v, cmt_rule())) {
            if (v != std::floor(v) || v < 0.0 || v > static_cast<double>(compartments_))
              bad(c, cmt_rule());
            r.cmt = static_cast<int>(v);
          }
          break;
        case Kind::Ii:
          non_negative_or_none(c, r.ii);
          break;
        case Kind::Addl: {
          const std::string rule = std::string("a whole number in 0..") + kMaxAddlText;
          if (number(c, v, rule)) {
            if (v != std::floor(v) || v < 0.0 || v > kMaxAddl) bad(c, rule);
            r.addl = static_cast<std::int64_t>(v);
          }
          break;
        }
        case Kind::Ss:
          if (number(c, v, "0, 1 or 2")) {
            if (!(v == 0.0 || v == 1.0 || v == 2.0)) bad(c, "0, 1 or 2");
            r.ss = static_cast<int>(v);
          }
          break;
        case Kind::Dv:
          if (number(c, v, "a number, or '.' for none")) r.dv = v;
          break;
        case Kind::Mdv:
          if (number(c, v, "0 or 1, or '.' to derive it")) {
            if (!(v == 0.0 || v == 1.0)) bad(c, "0 or 1, or '.' to derive it");
            r.mdv = v == 1.0;
            mdv_given = true;
          }
          break;
        case Kind::Parameter:
          if (number(c, v,
                     "a number, or '.' for none (model parameter " +
                         dataset_.parameter_columns[static_cast<std::size_t>(col.slot)] + ")"))
            r.parameters[static_cast<std::size_t>(col.slot)] = v;
          break;
        case Kind::Covariate: {
          const Field& f = fields_[static_cast<std::size_t>(c)];
          r.covariates[static_cast<std::size_t>(col.slot)] = f.text;
          break;
        }
      }
    }

    if (!evid_given_) r.evid = (r.amt > 0.0 || (r.ss > 0 && r.rate > 0.0)) ? 1 : 0;
    subject_of(r);
    check_rules(r, mdv_given);
    if (!mdv_given) r.mdv = r.evid != 0 || std::isnan(r.dv);
    dataset_.subjects.back().records.push_back(std::move(r));
  }

  // Starts a new subject or continues the current one; IDs must be contiguous.
  void subject_of(const DatasetRecord& r) {
    if (!dataset_.subjects.empty() && dataset_.subjects.back().id == id_) {
      const DatasetRecord& prev = dataset_.subjects.back().records.back();
      if (r.time < prev.time) {
        std::string rule = ">= " + format_value(prev.time) +
                           ", the TIME of the previous record (line " + std::to_string(prev.line) +
                           "): the records of one subject must be sorted by time";
        if (r.evid == 3 || r.evid == 4)
          rule +=
              "; NONMEM lets TIME go back at a reset record (EVID 3 or 4), pkscan does not: "
              "give the records after the reset a new ID";
        bad(time_col_, rule);
      }
      return;
    }
    const auto found = ended_.find(id_);
    if (found != ended_.end())
      fail(file_, line_, id_col_ + 1,
           "ID " + shown(id_) + " appears again at line " + std::to_string(line_) +
               " after other IDs (its earlier records end at line " +
               std::to_string(found->second) + "); records of one subject must be consecutive");
    if (!dataset_.subjects.empty()) {
      const DatasetSubject& last = dataset_.subjects.back();
      ended_.emplace(last.id, last.records.back().line);
    }
    DatasetSubject s;
    s.id = id_;
    dataset_.subjects.push_back(std::move(s));
  }

  // Rules that combine columns, in the order of the conventions block.
  void check_rules(const DatasetRecord& r, bool mdv_given) const {
    if (r.is_dose()) {
      if (r.amt == 0.0 && r.ss == 0) {
        if (amt_col_ < 0)
          fail(file_, line_, evid_col_ + 1,
               "EVID is " + shown(text_of(evid_col_)) +
                   " (a dose), but the dataset has no AMT column; a dose must have AMT > 0" +
                   context());
        bad(amt_col_, "> 0 on a dose record (EVID " + std::to_string(r.evid) +
                          "); only a steady-state record (SS 1 or 2) may have no amount");
      }
      if (r.addl > 0 && r.ii == 0.0)
        bad(addl_col_, std::string("0 when II is 0 or missing: additional doses need the "
                                   "dosing interval II > 0") +
                           (ii_col_ < 0 ? " (the dataset has no II column)" : ""));
      if (r.ss > 0 && r.ii == 0.0 && !(r.ss == 1 && r.rate > 0.0 && r.amt == 0.0))
        bad(ss_col_, std::string("0 when II is 0 or missing: a steady-state dose needs the "
                                 "dosing interval II > 0 (only SS 1 with RATE > 0 and AMT 0, "
                                 "a constant infusion, needs no II)") +
                         (ii_col_ < 0 ? " (the dataset has no II column)" : ""));
    } else {
      const std::string not_dose = "on a record that is not a dose (" + evid_note(r) + ")";
      if (r.amt > 0.0) bad(amt_col_, "0 or '.' " + not_dose + "; give a dose EVID 1 or 4");
      if (r.rate != 0.0) bad(rate_col_, "0 or '.' " + not_dose + ": RATE without AMT");
      if (r.ii != 0.0) bad(ii_col_, "0 or '.' " + not_dose + ": II without a dose");
      if (r.addl != 0) bad(addl_col_, "0 or '.' " + not_dose + ": ADDL without a dose");
      if (r.ss != 0) bad(ss_col_, "0 or '.' " + not_dose + ": SS without a dose");
    }
    if (mdv_given && !r.mdv && r.evid != 0)
      bad(mdv_col_,
          "1 on a record that is not an observation (EVID " + std::to_string(r.evid) + ")");
  }

  const std::string& file_;
  const int compartments_;
  std::unordered_map<std::string, std::string> parameters_;  // lower-case name -> canonical
  Dataset dataset_;
  std::vector<Column> columns_;
  std::vector<Field> fields_;
  std::unordered_map<std::string, std::int64_t> ended_;  // finished ID -> its last line
  std::string id_;                                       // ID of the current record
  std::int64_t line_ = 0;                                // current line, 1-based
  std::int64_t header_line_ = 0;
  bool evid_given_ = false;
  int id_col_ = -1, time_col_ = -1, amt_col_ = -1, rate_col_ = -1, evid_col_ = -1;
  int cmt_col_ = -1, ii_col_ = -1, addl_col_ = -1, ss_col_ = -1, mdv_col_ = -1;
};

void check_model(const char* where, const ModelInfo& model) {
  if (model.compartments.empty())
    throw InvalidArgument(std::string(where) + ": model " + model.name +
                          " has no compartments, but must have at least 1 (a linear model comes "
                          "from make_linear_model)");
}

std::string size_text(std::int64_t bytes) {
  return std::to_string(bytes) + " bytes, but must be at most " + std::to_string(kMaxDatasetBytes) +
         " bytes (1 GiB)";
}

}  // namespace

Dataset parse_dataset(const std::string& text, const std::string& file, const ModelInfo& model) {
  check_model("parse_dataset", model);
  if (text.size() > static_cast<std::size_t>(kMaxDatasetBytes))
    fail(file, 0, 0, "the dataset is " + size_text(static_cast<std::int64_t>(text.size())));
  DatasetParser parser(file, model);
  return parser.parse(text);
}

Dataset read_dataset(const std::string& path, const ModelInfo& model) {
  namespace fs = std::filesystem;
  check_model("read_dataset", model);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found)
    fail(path, 0, 0, "cannot read the dataset: no such file");
  if (ec) fail(path, 0, 0, "cannot read the dataset: " + ec.message());
  if (fs::is_directory(st))
    fail(path, 0, 0, "the dataset path is a directory, but must be a CSV file");
  if (fs::is_regular_file(st)) {
    const std::uintmax_t size = fs::file_size(path, ec);
    if (ec) fail(path, 0, 0, "cannot read the dataset: " + ec.message());
    if (size > static_cast<std::uintmax_t>(kMaxDatasetBytes))
      fail(path, 0, 0, "the dataset is " + size_text(static_cast<std::int64_t>(size)));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) fail(path, 0, 0, "cannot open the dataset for reading");
  // Read in chunks with the size limit enforced as we go (pipes have no size up front).
  std::string text;
  std::string chunk(std::size_t{1} << 20, '\0');
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    if (text.size() + static_cast<std::size_t>(got) > static_cast<std::size_t>(kMaxDatasetBytes))
      fail(path, 0, 0,
           "the dataset is larger than " + std::to_string(kMaxDatasetBytes) +
               " bytes, but must be at most 1 GiB");
    text.append(chunk.data(), static_cast<std::size_t>(got));
  }
  if (in.bad()) fail(path, 0, 0, "cannot read the dataset: read error");
  DatasetParser parser(path, model);
  return parser.parse(text);
}

}  // namespace pkscan
