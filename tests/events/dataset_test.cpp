// The NONMEM-format dataset reader: the good path field by field, every rejection with its
// exact line and column, files (missing, directory, too large), and arbitrary input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <pkscan/dataset.hpp>
#include <pkscan/error.hpp>
#include <pkscan/models/model.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace pkscan {
namespace {

namespace fs = std::filesystem;

// The three-compartment model: parameters ka/k01, k12, k21, ke/u, volumes; 3 compartments.
const ModelInfo& three_cpt() { return model_info(ModelKind::ThreeCompartment); }

Dataset parse(const std::string& text) { return parse_dataset(text, "test.csv", three_cpt()); }

using TempDir = test::ScratchDir;
using test::write_text;

// ---- good path ----------------------------------------------------------------------------------

// Comments ('#', '@'), blank lines, CRLF, a byte-order mark, mixed-case headers in a non-standard
// order, spaces around fields, quoted fields, '.' for missing, an alias parameter column (K01)
// next to a canonical one, covariates as text, derived EVID and MDV, three subjects in order.
const char* const kGood =
    "\xEF\xBB\xBF# pkscan example dataset\r\n"                                            // 1
    "@ ignored as well\r\n"                                                               // 2
    "\r\n"                                                                                // 3
    " id , Time,amt,RATE,evid,Cmt,ii,addl,ss,dv,mdv,K01,v_central,WT,\"Sex, label\"\r\n"  // 4
    "101,0,100,.,1,1,12,2,0,.,.,1.2,10,70.5,\"F, adult\"\r\n"                             // 5
    "101, 0.5 ,.,.,0,2,.,.,.,3.25,0,1.2,10,70.5,F\r\n"                                    // 6
    "101,1,.,.,.,2,.,.,.,.,.,.,.,.,.\r\n"                                                 // 7
    "   # a comment between records\r\n"                                                  // 8
    "\"S2\",2,500,250,1,2,.,.,.,.,1,0.8,12,80,M\r\n"                                      // 9
    "\"S2\",2,0,.,2,.,.,.,.,.,.,0.8,12,80,M\r\n"                                          // 10
    "\"S2\",3,1000,50,4,1,24,0,1,.,.,.8,12,80,  \" M \"\r\n"                              // 11
    "\"S2\",4,,,0,,,,,-0.5,,+0.8,1.2E+01,80,M\r\n"                                        // 12
    "3,0,.,.,.,.,.,.,.,1e2,.,.,.,.,.";                                                    // 13

TEST(DatasetGood, EveryFieldOfEveryRecord) {
  const Dataset d = parse(kGood);
  EXPECT_EQ(d.file, "test.csv");
  EXPECT_EQ(d.columns,
            (std::vector<std::string>{"id", "Time", "amt", "RATE", "evid", "Cmt", "ii", "addl",
                                      "ss", "dv", "mdv", "K01", "v_central", "WT", "Sex, label"}));
  EXPECT_EQ(d.parameter_columns, (std::vector<std::string>{"ka", "v_central"}));
  EXPECT_EQ(d.covariate_columns, (std::vector<std::string>{"WT", "Sex, label"}));
  ASSERT_EQ(d.subjects.size(), 3u);
  EXPECT_EQ(d.subjects[0].id, "101");
  EXPECT_EQ(d.subjects[1].id, "S2");
  EXPECT_EQ(d.subjects[2].id, "3");
  ASSERT_EQ(d.subjects[0].records.size(), 3u);
  ASSERT_EQ(d.subjects[1].records.size(), 4u);
  ASSERT_EQ(d.subjects[2].records.size(), 1u);
  EXPECT_EQ(d.record_count(), 8);
  EXPECT_EQ(d.observation_count(), 4);  // lines 6, 7, 12, 13

  struct Expected {
    std::int64_t line;
    double time;
    int evid;
    double amt, rate;
    int cmt;
    double ii;
    std::int64_t addl;
    int ss;
    double dv;  // NaN = missing
    bool mdv;
    double ka, v_central;  // NaN = missing
    const char* wt;
    const char* sex;
  };
  const double nan = std::nan("");
  const Expected expected[] = {
      {5, 0.0, 1, 100.0, 0.0, 1, 12.0, 2, 0, nan, true, 1.2, 10.0, "70.5", "F, adult"},
      {6, 0.5, 0, 0.0, 0.0, 2, 0.0, 0, 0, 3.25, false, 1.2, 10.0, "70.5", "F"},
      {7, 1.0, 0, 0.0, 0.0, 2, 0.0, 0, 0, nan, true, nan, nan, ".", "."},
      {9, 2.0, 1, 500.0, 250.0, 2, 0.0, 0, 0, nan, true, 0.8, 12.0, "80", "M"},
      {10, 2.0, 2, 0.0, 0.0, 0, 0.0, 0, 0, nan, true, 0.8, 12.0, "80", "M"},
      {11, 3.0, 4, 1000.0, 50.0, 1, 24.0, 0, 1, nan, true, 0.8, 12.0, "80", " M "},
      {12, 4.0, 0, 0.0, 0.0, 0, 0.0, 0, 0, -0.5, false, 0.8, 12.0, "80", "M"},
      {13, 0.0, 0, 0.0, 0.0, 0, 0.0, 0, 0, 100.0, false, nan, nan, ".", "."},
  };
  std::size_t k = 0;
  for (const DatasetSubject& s : d.subjects) {
    for (const DatasetRecord& r : s.records) {
      ASSERT_LT(k, std::size(expected));
      const Expected& e = expected[k++];
      SCOPED_TRACE("line " + std::to_string(e.line));
      EXPECT_EQ(r.line, e.line);
      EXPECT_EQ(r.time, e.time);
      EXPECT_EQ(r.evid, e.evid);
      EXPECT_EQ(r.amt, e.amt);
      EXPECT_EQ(r.rate, e.rate);
      EXPECT_EQ(r.cmt, e.cmt);
      EXPECT_EQ(r.ii, e.ii);
      EXPECT_EQ(r.addl, e.addl);
      EXPECT_EQ(r.ss, e.ss);
      if (std::isnan(e.dv)) {
        EXPECT_TRUE(std::isnan(r.dv)) << r.dv;
      } else {
        EXPECT_EQ(r.dv, e.dv);
      }
      EXPECT_EQ(r.mdv, e.mdv);
      ASSERT_EQ(r.parameters.size(), 2u);
      for (int p = 0; p < 2; ++p) {
        const double want = p == 0 ? e.ka : e.v_central;
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(r.parameters[p])) << r.parameters[p];
        } else {
          EXPECT_EQ(r.parameters[p], want);
        }
      }
      EXPECT_EQ(r.covariates, (std::vector<std::string>{e.wt, e.sex}));
      EXPECT_EQ(r.is_dose(), e.evid == 1 || e.evid == 4);
    }
  }
  EXPECT_EQ(k, std::size(expected));
}

TEST(DatasetGood, DerivedEvidAndMdvWithoutThoseColumns) {
  // No EVID, MDV, CMT: AMT > 0 is a dose; a steady-state constant infusion (SS 1, RATE > 0,
  // AMT 0) is a dose as well; DV missing gives MDV 1. Tabs around fields; LF without final LF.
  const Dataset d = parse(
      "ID,TIME,AMT,RATE,II,SS,DV\n"
      "7,0,100,.,.,.,.\n"
      "7,1,.,.,.,.,5\n"
      "7,2,0,.,.,.,.\n"
      "7,3,0,10,.,1,.\n"
      "7,4\t,\t.,.,.,.,\t2.5\n");
  ASSERT_EQ(d.subjects.size(), 1u);
  const auto& r = d.subjects[0].records;
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].evid, 1);
  EXPECT_TRUE(r[0].mdv);
  EXPECT_EQ(r[1].evid, 0);
  EXPECT_FALSE(r[1].mdv);
  EXPECT_EQ(r[1].dv, 5.0);
  EXPECT_EQ(r[2].evid, 0);
  EXPECT_TRUE(r[2].mdv);
  EXPECT_EQ(r[3].evid, 1);
  EXPECT_EQ(r[3].ss, 1);
  EXPECT_EQ(r[3].rate, 10.0);
  EXPECT_EQ(r[3].ii, 0.0);
  EXPECT_EQ(r[4].time, 4.0);
  EXPECT_EQ(r[4].dv, 2.5);
  EXPECT_EQ(r[4].cmt, 0);
  EXPECT_TRUE(d.parameter_columns.empty());
  EXPECT_TRUE(d.covariate_columns.empty());
  EXPECT_EQ(d.observation_count(), 3);
}

TEST(DatasetGood, NumbersAndIntegralReals) {
  // Real-valued whole numbers in integer columns, exponents, a leading '+', "-0" for TIME.
  const Dataset d = parse(
      "ID,TIME,AMT,EVID,CMT,II,ADDL,SS,MDV,U,KE_TV\n"
      "1,-0,1.5e2,1.0,3.0,2.4E1,4.0,2.0,1.0,0.25,typical\n");
  const DatasetRecord& r = d.subjects.at(0).records.at(0);
  EXPECT_EQ(r.time, 0.0);
  EXPECT_FALSE(std::signbit(r.time));
  EXPECT_EQ(r.amt, 150.0);
  EXPECT_EQ(r.evid, 1);
  EXPECT_EQ(r.cmt, 3);
  EXPECT_EQ(r.ii, 24.0);
  EXPECT_EQ(r.addl, 4);
  EXPECT_EQ(r.ss, 2);
  EXPECT_TRUE(r.mdv);
  EXPECT_EQ(d.parameter_columns, (std::vector<std::string>{"ke"}));  // U is the alias of ke
  EXPECT_EQ(r.parameters, (std::vector<double>{0.25}));
  EXPECT_EQ(d.covariate_columns, (std::vector<std::string>{"KE_TV"}));
  EXPECT_EQ(r.covariates, (std::vector<std::string>{"typical"}));
}

TEST(DatasetGood, ParameterValuesAreNotRangeChecked) {
  // Negative or zero parameter values are the engine's business, not the reader's.
  const Dataset d = parse("ID,TIME,KA,V_CENTRAL\n1,0,-1,0\n");
  EXPECT_EQ(d.subjects[0].records[0].parameters, (std::vector<double>{-1.0, 0.0}));
}

// Columns match names ignoring case; the stored name is the model's own spelling (a linear
// model's rate "CL" must be found again by parameter_index), for an alias too ("K01" is "ka").
TEST(DatasetGood, CanonicalNamesKeepTheModelsSpelling) {
  const auto m = make_linear_model({"central"}, {{"central", "", "CL"}});
  const Dataset d = parse_dataset("ID,TIME,cl\n1,0,5\n", "x.csv", *m);
  EXPECT_EQ(d.parameter_columns, (std::vector<std::string>{"CL"}));
  EXPECT_EQ(d.subjects[0].records[0].parameters, (std::vector<double>{5.0}));
  const Dataset alias = parse("ID,TIME,K01,U\n1,0,5,6\n");
  EXPECT_EQ(alias.parameter_columns, (std::vector<std::string>{"ka", "ke"}));
}

TEST(DatasetGood, ReadsTheExampleFile) {
  const std::string path = std::string(PKSCAN_SOURCE_DIR) + "/tests/data/datasets/two_subjects.csv";
  const Dataset d = read_dataset(path, three_cpt());
  EXPECT_EQ(d.file, path);
  EXPECT_EQ(d.parameter_columns, (std::vector<std::string>{"ka"}));
  EXPECT_EQ(d.covariate_columns, (std::vector<std::string>{"WT", "SEX"}));
  ASSERT_EQ(d.subjects.size(), 2u);
  ASSERT_EQ(d.subjects[0].records.size(), 3u);
  ASSERT_EQ(d.subjects[1].records.size(), 3u);
  const DatasetRecord& dose = d.subjects[0].records[0];
  EXPECT_EQ(dose.line, 5);
  EXPECT_EQ(dose.evid, 1);
  EXPECT_EQ(dose.amt, 100.0);
  EXPECT_EQ(dose.ii, 12.0);
  EXPECT_EQ(dose.addl, 2);
  EXPECT_EQ(dose.cmt, 1);
  const DatasetRecord& infusion = d.subjects[1].records[0];
  EXPECT_EQ(infusion.line, 8);
  EXPECT_EQ(infusion.rate, 200.0);
  EXPECT_EQ(infusion.cmt, 2);
  EXPECT_TRUE(infusion.mdv);
  const DatasetRecord& last = d.subjects[1].records[2];
  EXPECT_EQ(last.line, 10);
  EXPECT_EQ(last.time, 24.0);
  EXPECT_EQ(last.evid, 0);
  EXPECT_TRUE(last.mdv);  // DV missing
  EXPECT_EQ(last.covariates, (std::vector<std::string>{"82.5", "M"}));
  EXPECT_EQ(d.observation_count(), 4);
}

TEST(DatasetGood, ReadDatasetMatchesParseDataset) {
  TempDir dir;
  const std::string path = dir.file("good.csv");
  write_text(path, kGood);
  const Dataset from_file = read_dataset(path, three_cpt());
  const Dataset from_text = parse_dataset(kGood, path, three_cpt());
  EXPECT_EQ(from_file.file, path);
  ASSERT_EQ(from_file.subjects.size(), from_text.subjects.size());
  for (std::size_t s = 0; s < from_file.subjects.size(); ++s) {
    ASSERT_EQ(from_file.subjects[s].records.size(), from_text.subjects[s].records.size());
    for (std::size_t i = 0; i < from_file.subjects[s].records.size(); ++i) {
      EXPECT_EQ(from_file.subjects[s].records[i].line, from_text.subjects[s].records[i].line);
      EXPECT_EQ(from_file.subjects[s].records[i].covariates,
                from_text.subjects[s].records[i].covariates);
    }
  }
}

// ---- files --------------------------------------------------------------------------------------

template <class F>
ConfigError config_error_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception: " << e.what();
    return ConfigError("", -1, -1, "wrong exception");
  }
  ADD_FAILURE() << "no exception";
  return ConfigError("", -1, -1, "no exception");
}

TEST(DatasetFile, MissingFileDirectoryAndBadRowInFile) {
  TempDir dir;
  const ConfigError missing =
      config_error_of([&] { read_dataset(dir.file("none.csv"), three_cpt()); });
  EXPECT_EQ(missing.file(), dir.file("none.csv"));
  EXPECT_EQ(missing.line(), 0);
  EXPECT_NE(missing.message().find("no such file"), std::string::npos) << missing.what();

  const ConfigError directory = config_error_of([&] { read_dataset(dir.file(""), three_cpt()); });
  EXPECT_NE(directory.message().find("directory"), std::string::npos) << directory.what();

  const std::string bad = dir.file("bad.csv");
  write_text(bad, "ID,TIME\r\n1,0\r\n1,-2\r\n");
  const ConfigError e = config_error_of([&] { read_dataset(bad, three_cpt()); });
  EXPECT_EQ(e.file(), bad);
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.column(), 2);
  EXPECT_EQ(std::string(e.what()),
            bad + ":3:2: TIME is \"-2\", but must be a number >= 0 (ID \"1\")");
}

TEST(DatasetFile, TooLargeIsRejectedBeforeReading) {
  TempDir dir;
  const std::string path = dir.file("huge.csv");
  write_text(path, "ID,TIME\n");
  std::error_code ec;
  fs::resize_file(path, static_cast<std::uintmax_t>(kMaxDatasetBytes) + 1, ec);  // sparse
  if (ec) GTEST_SKIP() << "cannot make a sparse file: " << ec.message();
  const ConfigError e = config_error_of([&] { read_dataset(path, three_cpt()); });
  EXPECT_EQ(e.line(), 0);
  EXPECT_EQ(e.column(), 0);
  EXPECT_NE(e.message().find("1073741825 bytes"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("1 GiB"), std::string::npos) << e.what();
}

// model_info(ModelKind::Linear) is the empty description: no dataset can be read for it.
TEST(DatasetFile, TheModelMustHaveCompartments) {
  const ModelInfo& empty = model_info(ModelKind::Linear);
  EXPECT_THROW(parse_dataset("ID,TIME\n1,0\n", "x", empty), InvalidArgument);
  EXPECT_THROW(read_dataset("/nonexistent", empty), InvalidArgument);
}

// ---- bad input: one table, exact line and column ------------------------------------------------

struct BadCase {
  const char* name;
  std::string text;
  int line;
  int column;
  std::vector<std::string> words;  // must all appear in the message
};

std::ostream& operator<<(std::ostream& os, const BadCase& c) { return os << c.name; }

const std::string kH = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,DV,MDV,KA,WT\n";
// columns:             1  2    3   4    5    6   7  8    9  10 11  12 13

const BadCase kBadCases[] = {
    {"FieldCountShort", "ID,TIME,DV\n1,0,1\n1,1\n", 3, 3, {"2 fields", "must have 3", "line 1"}},
    {"FieldCountLong", "ID,TIME,DV\n1,0,1,9\n", 2, 4, {"4 fields", "must have 3"}},
    {"TimeNotANumber", "ID,TIME\n1,abc\n", 2, 2, {"TIME is \"abc\"", "a number >= 0", "ID \"1\""}},
    {"TimeTrailingJunk", "ID,TIME\n1,1.5h\n", 2, 2, {"TIME is \"1.5h\"", "a number"}},
    {"TimeNaNText", "ID,TIME\n1,nan\n", 2, 2, {"TIME is \"nan\"", "a number"}},
    {"TimeInfText", "ID,TIME\n1,0\n1,inf\n", 3, 2, {"TIME is \"inf\""}},
    {"TimeOverflow", "ID,TIME\n1,1e999\n", 2, 2, {"TIME is \"1e999\""}},
    {"TimeHex", "ID,TIME\n1,0x10\n", 2, 2, {"TIME is \"0x10\""}},
    {"TimeNegative", "ID,TIME\n1,-0.5\n", 2, 2, {"TIME is \"-0.5\"", ">= 0"}},
    {"TimeMissing", "ID,TIME\n1,.\n", 2, 2, {"TIME is missing", ">= 0"}},
    {"TimeDecreasing",
     "ID,TIME\n1,0\n1,2\n1,1.5\n",
     4,
     2,
     {"TIME is \"1.5\"", ">= 2", "line 3", "sorted by time"}},
    {"TimeBackAtReset",
     "ID,TIME,EVID\n1,5,0\n1,0,3\n",
     3,
     2,
     {"TIME is \"0\"", "sorted by time", "reset", "new ID"}},
    {"IdMissing", "ID,TIME\n1,0\n ,1\n", 3, 1, {"ID is missing", "every record"}},
    {"IdNotConsecutive",
     "ID,TIME\n1,0\n1,1\n2,0\n1,2\n",
     5,
     1,
     {"ID \"1\" appears again at line 5", "after other IDs", "line 3", "must be consecutive"}},
    {"EvidFive",
     kH + "1,0,.,.,5,.,.,.,.,.,.,.,.\n",
     2,
     5,
     {"EVID is \"5\"", "one of 0", "4 (reset and dose)"}},
    {"EvidFraction", kH + "1,0,.,.,0.5,.,.,.,.,.,.,.,.\n", 2, 5, {"EVID is \"0.5\""}},
    {"CmtOutOfRange",
     kH + "1,0,100,.,1,4,.,.,.,.,.,.,.\n",
     2,
     6,
     {"CMT is \"4\"", "1..3", "the model has 3 compartments"}},
    {"CmtNegative", kH + "1,0,100,.,1,-1,.,.,.,.,.,.,.\n", 2, 6, {"CMT is \"-1\"", "1..3"}},
    {"CmtNotInteger", kH + "1,0,100,.,1,1.5,.,.,.,.,.,.,.\n", 2, 6, {"CMT is \"1.5\"", "integer"}},
    {"AmtNegative", kH + "1,0,-100,.,1,1,.,.,.,.,.,.,.\n", 2, 3, {"AMT is \"-100\"", ">= 0"}},
    {"DoseWithoutAmt",
     kH + "1,0,.,.,1,1,.,.,.,.,.,.,.\n",
     2,
     3,
     {"AMT is missing", "> 0 on a dose record (EVID 1)", "SS 1 or 2"}},
    {"DoseZeroAmtEvid4", kH + "1,0,0,.,4,1,.,.,.,.,.,.,.\n", 2, 3, {"AMT is \"0\"", "(EVID 4)"}},
    {"DoseWithoutAmtColumn", "ID,TIME,EVID\n1,0,1\n", 2, 3, {"EVID is \"1\"", "no AMT column"}},
    {"RateWithoutAmt",
     "ID,TIME,AMT,RATE\n1,0,.,10\n",
     2,
     4,
     {"RATE is \"10\"", "RATE without AMT", "EVID 0, derived"}},
    {"RateOnObservation",
     kH + "1,0,.,5,0,.,.,.,.,.,.,.,.\n",
     2,
     4,
     {"RATE is \"5\"", "not a dose (EVID 0)", "RATE without AMT"}},
    {"RateMinusOne",
     kH + "1,0,100,-1,1,1,.,.,.,.,.,.,.\n",
     2,
     4,
     {"RATE is \"-1\"", "not supported", "modeled"}},
    {"RateMinusTwo",
     kH + "1,0,100,-2,1,1,.,.,.,.,.,.,.\n",
     2,
     4,
     {"RATE is \"-2\"", "not supported", "duration"}},
    {"RateNegative", kH + "1,0,100,-3,1,1,.,.,.,.,.,.,.\n", 2, 4, {"RATE is \"-3\"", ">= 0"}},
    {"IiNegative", kH + "1,0,100,.,1,1,-12,.,.,.,.,.,.\n", 2, 7, {"II is \"-12\"", ">= 0"}},
    {"AddlNegative",
     kH + "1,0,100,.,1,1,12,-1,.,.,.,.,.\n",
     2,
     8,
     {"ADDL is \"-1\"", "whole number"}},
    {"AddlFraction",
     kH + "1,0,100,.,1,1,12,2.5,.,.,.,.,.\n",
     2,
     8,
     {"ADDL is \"2.5\"", "whole number"}},
    {"AddlWithoutIi", kH + "1,0,100,.,1,1,0,3,.,.,.,.,.\n", 2, 8, {"ADDL is \"3\"", "II > 0"}},
    {"AddlWithoutIiColumn",
     "ID,TIME,AMT,ADDL\n1,0,100,3\n",
     2,
     4,
     {"ADDL is \"3\"", "no II column"}},
    {"SsThree", kH + "1,0,100,.,1,1,12,.,3,.,.,.,.\n", 2, 9, {"SS is \"3\"", "0, 1 or 2"}},
    {"SsWithoutIi",
     kH + "1,0,100,.,1,1,.,.,1,.,.,.,.\n",
     2,
     9,
     {"SS is \"1\"", "steady-state dose needs", "II > 0", "constant infusion"}},
    {"SsTwoInfusionWithoutIi",
     kH + "1,0,0,10,1,1,.,.,2,.,.,.,.\n",
     2,
     9,
     {"SS is \"2\"", "II > 0"}},
    {"AmtOnObservation",
     kH + "1,0,100,.,0,1,.,.,.,.,.,.,.\n",
     2,
     3,
     {"AMT is \"100\"", "not a dose (EVID 0)", "EVID 1 or 4"}},
    {"IiOnOtherEvent", kH + "1,0,.,.,2,.,12,.,.,.,.,.,.\n", 2, 7, {"II is \"12\"", "(EVID 2)"}},
    {"DosingInfoOnReset", kH + "1,0,.,.,3,.,12,.,1,.,.,.,.\n", 2, 7, {"II is \"12\"", "(EVID 3)"}},
    {"MdvTwo", kH + "1,0,.,.,0,.,.,.,.,1,2,.,.\n", 2, 11, {"MDV is \"2\"", "0 or 1"}},
    {"MdvZeroOnDose",
     kH + "1,0,100,.,1,1,.,.,.,.,0,.,.\n",
     2,
     11,
     {"MDV is \"0\"", "1 on a record that is not an observation (EVID 1)"}},
    {"DvNotANumber", kH + "1,0,.,.,0,.,.,.,.,BLQ,.,.,.\n", 2, 10, {"DV is \"BLQ\"", "a number"}},
    {"ParameterNotANumber",
     kH + "1,0,.,.,0,.,.,.,.,.,.,fast,70\n",
     2,
     12,
     {"KA is \"fast\"", "model parameter ka"}},
    {"UnterminatedQuote", "ID,TIME,SEX\n1,0,\"M\n", 2, 3, {"field 3 (SEX)", "closing quote"}},
    {"TextAfterQuote",
     "ID,TIME,SEX\n1,0,\"M\"x\n",
     2,
     3,
     {"field 3 (SEX)", "after its closing quote"}},
    {"HeaderQuoteBroken", "ID,TIME,\"SEX\n", 1, 3, {"header field 3", "closing quote"}},
    {"EmptyText", "", 0, 0, {"empty", "header line"}},
    {"OnlyComments", "# nothing\r\n\r\n@ here\n", 0, 0, {"empty"}},
    {"HeaderOnly", "# c\nID,TIME\n\n", 2, 0, {"no records", "at least one record"}},
    {"DuplicateColumn",
     "ID,TIME,DV,time\n1,0,1,1\n",
     1,
     4,
     {"column time (column 4) repeats column TIME (column 2)", "unique"}},
    {"SameParameterTwice",
     "ID,TIME,KA,K01\n1,0,1,1\n",
     1,
     4,
     {"K01 (column 4)", "KA (column 3)", "model parameter ka"}},
    {"EmptyColumnName", "ID,,TIME\n1,0,0\n", 1, 2, {"column 2 has an empty name"}},
    {"NoTimeColumn", "ID,DV\n1,0\n", 1, 0, {"no TIME column", "ID, DV", "'#'"}},
    {"NoIdColumn", "Time,DV\n1,0\n", 1, 0, {"no ID column", "Time, DV"}},
    {"NoHeader", "1,0,100\n1,1,.\n", 1, 0, {"no ID column", "1, 0, 100"}},
    {"LinesCountedThroughCommentsAndCrlf",
     "# c\r\n\r\nID,TIME\r\n1,0\r\n  \r\n@x\r\n1,-1\r\n",
     7,
     2,
     {"TIME is \"-1\""}},
};

class DatasetBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(DatasetBadInput, IsRejectedAtItsLineAndColumn) {
  const BadCase& c = GetParam();
  const ConfigError e = config_error_of([&] { parse(c.text); });
  EXPECT_EQ(e.file(), "test.csv");
  EXPECT_EQ(e.line(), c.line) << e.what();
  EXPECT_EQ(e.column(), c.column) << e.what();
  for (const std::string& w : c.words)
    EXPECT_NE(e.message().find(w), std::string::npos) << "missing \"" << w << "\" in: " << e.what();
  // The full text carries the location prefix.
  std::string prefix = "test.csv";
  if (c.line > 0) prefix += ":" + std::to_string(c.line);
  if (c.column > 0) prefix += ":" + std::to_string(c.column);
  EXPECT_EQ(std::string(e.what()).rfind(prefix + ": ", 0), 0u) << e.what();
}

INSTANTIATE_TEST_SUITE_P(Dataset, DatasetBadInput, ::testing::ValuesIn(kBadCases),
                         [](const ::testing::TestParamInfo<BadCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(DatasetBadInputTable, NamesAreDistinctAndThereAreEnough) {
  std::vector<std::string> names;
  for (const BadCase& c : kBadCases) names.emplace_back(c.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  EXPECT_GE(names.size(), 18u);
}

// ---- arbitrary input never crashes
// ---------------------------------------------------------------

TEST(DatasetRobustness, MutatedInputEitherParsesOrThrowsConfigError) {
  // Byte-level mutations of the good dataset (seeded, reproducible): every outcome must be a
  // Dataset or a ConfigError; anything else (another exception, a crash) fails.
  const std::string base = kGood;
  const char alphabet[] = {',', '.', '"', '\r', '\n', '#', '-', '+', 'e', '0', '9', ' ', '\0', 'x'};
  std::mt19937 rng(20240611u);
  int parsed = 0, rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      const std::size_t at = rng() % (text.size() + 1);
      switch (rng() % 3) {
        case 0:
          if (at < text.size()) text.erase(at, 1);
          break;
        case 1:
          text.insert(at, 1, alphabet[rng() % sizeof alphabet]);
          break;
        default:
          if (at < text.size()) text[at] = alphabet[rng() % sizeof alphabet];
          break;
      }
    }
    try {
      const Dataset d = parse(text);
      EXPECT_GE(d.record_count(), 1);
      ++parsed;
    } catch (const ConfigError& e) {
      EXPECT_FALSE(e.message().empty());
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "trial " << trial << ": unexpected exception " << e.what();
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace pkscan
