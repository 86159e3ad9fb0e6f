// Reading pkscan's own HDF5 result layout (docs/output.md; written by sink_h5.cpp) into Curves
// (read_result, read.hpp).
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <pkscan/error.hpp>
#include <string>
#include <utility>
#include <vector>

#include "hdf5_handle.hpp"
#include "read_parts.hpp"
#include "text.hpp"

namespace pkscan::output::detail {

namespace {

using hdf5::Id;
using hdf5::QuietHdf5;

[[noreturn]] void unreadable(const std::string& what) {
  throw InvalidArgument("not a readable pkscan HDF5 result: cannot read " + what);
}

// An identifier from an HDF5 call that must succeed; `what` names what could not be read.
Id readable(hid_t id, Id::Closer close, const std::string& what) {
  if (id < 0) unreadable(what);
  return Id(id, close);
}

std::vector<hsize_t> dims_of(hid_t dset, const std::string& name) {
  const Id space = readable(H5Dget_space(dset), H5Sclose, name);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) unreadable(name);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

// "3 x 25 x 3"; "()" for a scalar.
std::string shape_text(const std::vector<hsize_t>& dims) {
  std::string s;
  for (hsize_t x : dims) s += (s.empty() ? "" : " x ") + std::to_string(x);
  return s.empty() ? "()" : s;
}

// `why`: what the wanted shape is made of, appended in parentheses.
void expect_dims(const std::vector<hsize_t>& dims, const std::vector<hsize_t>& want,
                 const std::string& name, const std::string& why = "") {
  if (dims != want)
    throw InvalidArgument("HDF5 dataset " + name + " has shape " + shape_text(dims) +
                          ", but must have " + shape_text(want) +
                          (why.empty() ? "" : " (" + why + ")"));
}

// Reads a whole dataset as doubles (HDF5 converts float32); its shape into `dims` when given.
std::vector<double> read_doubles(hid_t file, const std::string& name,
                                 std::vector<hsize_t>* dims = nullptr) {
  const Id d = readable(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, name);
  const std::vector<hsize_t> shape = dims_of(d.get(), name);
  if (dims != nullptr) *dims = shape;
  std::size_t n = 1;
  for (hsize_t x : shape) n *= static_cast<std::size_t>(x);
  std::vector<double> v(n);
  if (n > 0 && H5Dread(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    unreadable(name);
  return v;
}

std::vector<std::string> read_strings_attribute(hid_t loc, const char* name) {
  const std::string what = std::string("attribute ") + name;
  const Id attr = readable(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose, what);
  const Id type = readable(H5Aget_type(attr.get()), H5Tclose, what);
  if (H5Tis_variable_str(type.get()) <= 0)
    throw InvalidArgument("HDF5 " + what + " is not a list of strings");
  const Id space = readable(H5Aget_space(attr.get()), H5Sclose, what);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) unreadable(what);
  const Id mem = readable(H5Tcopy(H5T_C_S1), H5Tclose, what);
  H5Tset_size(mem.get(), H5T_VARIABLE);
  H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
  std::vector<char*> buf(static_cast<std::size_t>(n), nullptr);
  if (n > 0 && H5Aread(attr.get(), mem.get(), buf.data()) < 0) unreadable(what);
  std::vector<std::string> out;
  out.reserve(buf.size());
  for (char* s : buf) out.emplace_back(s != nullptr ? s : "");
  if (n > 0) H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, buf.data());
  return out;
}

}  // namespace

Curves read_h5(const std::string& path, const std::string& asked, int max_subjects,
               int max_groups) {
  const QuietHdf5 quiet;
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    if (::access(path.c_str(), R_OK) != 0)
      throw InvalidArgument(std::string("cannot read the result file: ") + std::strerror(errno));
    throw InvalidArgument("not an HDF5 file");
  }
  const Id file =
      readable(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "the file");
  Curves d;
  d.compartments = read_strings_attribute(file.get(), "compartments");
  d.compartment = choose_compartment(d.compartments, asked);
  const hsize_t c =
      static_cast<hsize_t>(std::find(d.compartments.begin(), d.compartments.end(), d.compartment) -
                           d.compartments.begin());
  const hsize_t nc = d.compartments.size();
  const std::vector<double> time = read_doubles(file.get(), "time");
  const hsize_t nt = time.size();
  if (H5Lexists(file.get(), "summary", H5P_DEFAULT) > 0) {
    d.summary = true;
    d.t = time;
    std::vector<hsize_t> mean_dims, quant_dims, count_dims;
    const std::vector<double> pct = read_doubles(file.get(), "summary/percentiles");
    const std::vector<double> mean = read_doubles(file.get(), "summary/mean", &mean_dims);
    const std::vector<double> quant = read_doubles(file.get(), "summary/quantiles", &quant_dims);
    const std::vector<double> count = read_doubles(file.get(), "summary/count", &count_dims);
    const hsize_t nq = pct.size();
    // A summary by group: /summary/groups (G, K) holds each group's values of the K columns
    // named by its attribute, and every other dataset has a leading group axis.
    const bool grouped = H5Lexists(file.get(), "summary/groups", H5P_DEFAULT) > 0;
    hsize_t ng = 1;
    std::vector<double> values;
    if (grouped) {
      std::vector<hsize_t> dims;
      values = read_doubles(file.get(), "summary/groups", &dims);
      {
        const Id groups = readable(H5Dopen2(file.get(), "summary/groups", H5P_DEFAULT), H5Dclose,
                                   "/summary/groups");
        d.group_columns = read_strings_attribute(groups.get(), "columns");
      }
      const hsize_t k = d.group_columns.size();
      if (k == 0)
        throw InvalidArgument("HDF5 attribute columns of /summary/groups names no column");
      if (dims.size() != 2 || dims[0] == 0 || dims[1] != k)
        throw InvalidArgument("HDF5 dataset /summary/groups has shape " + shape_text(dims) +
                              ", but must have G x " + std::to_string(k) +
                              " (G >= 1 groups x the columns its attribute columns names)");
      ng = dims[0];
      const std::string why =
          "the " + std::to_string(ng) + " groups of /summary/groups x times x compartments";
      expect_dims(mean_dims, {ng, nt, nc}, "/summary/mean", why);
      expect_dims(quant_dims, {ng, nt, nc, nq}, "/summary/quantiles", why + " x percentiles");
      expect_dims(count_dims, {ng}, "/summary/count",
                  "the " + std::to_string(ng) + " groups of /summary/groups");
      d.count = 0;
      for (double n : count) d.count += static_cast<std::int64_t>(n);
    } else {
      if (mean.size() != nt * nc || quant.size() != nt * nc * nq)
        throw InvalidArgument("HDF5 /summary does not match /time and the compartments");
      if (count.size() == 1) d.count = static_cast<std::int64_t>(count[0]);
    }
    std::size_t center = nq, lo = nq, hi = nq;  // nq = none
    for (std::size_t q = 0; q < nq; ++q) {
      if (pct[q] == 50.0) center = q;
      if (lo == nq || pct[q] < pct[lo]) lo = q;
      if (hi == nq || pct[q] > pct[hi]) hi = q;
    }
    d.center_label = center < nq ? "median" : "mean";
    const bool band = nq >= 2 && pct[lo] < pct[hi];
    if (band) d.band_label = "percentiles " + number_text(pct[lo]) + "-" + number_text(pct[hi]);
    d.groups = static_cast<std::int64_t>(ng);
    const hsize_t kept = std::min<hsize_t>(ng, static_cast<hsize_t>(max_groups));
    const std::size_t k = d.group_columns.size();
    for (hsize_t g = 0; g < kept; ++g) {
      Band b;
      if (grouped) {
        b.values.assign(values.begin() + static_cast<std::ptrdiff_t>(g * k),
                        values.begin() + static_cast<std::ptrdiff_t>((g + 1) * k));
        b.label = group_label(d.group_columns, b.values);
      }
      for (hsize_t t = 0; t < nt; ++t) {
        const std::size_t at = static_cast<std::size_t>((g * nt + t) * nc + c);
        b.center.push_back(center < nq ? quant[at * nq + center] : mean[at]);
        if (band) {
          b.low.push_back(quant[at * nq + lo]);
          b.high.push_back(quant[at * nq + hi]);
        }
      }
      d.bands.push_back(std::move(b));
    }
    return d;
  }
  if (H5Lexists(file.get(), "concentration", H5P_DEFAULT) <= 0)
    throw InvalidArgument("the HDF5 result has neither /summary nor /concentration to draw");
  const Id conc =
      readable(H5Dopen2(file.get(), "concentration", H5P_DEFAULT), H5Dclose, "/concentration");
  const std::vector<hsize_t> dims = dims_of(conc.get(), "/concentration");
  if (dims.size() != 3) expect_dims(dims, {0, nt, nc}, "/concentration");
  expect_dims(dims, {dims[0], nt, nc}, "/concentration");
  d.total = static_cast<std::int64_t>(dims[0]);
  if (d.total == 0) throw InvalidArgument("the HDF5 result has no subjects");
  const hsize_t rows = std::min<hsize_t>(dims[0], static_cast<hsize_t>(max_subjects));
  std::vector<double> y(static_cast<std::size_t>(rows * nt));
  {
    const Id fspace = readable(H5Dget_space(conc.get()), H5Sclose, "/concentration");
    const hsize_t start[3] = {0, 0, c};
    const hsize_t count[3] = {rows, nt, 1};
    const Id mspace = readable(H5Screate_simple(3, count, nullptr), H5Sclose, "/concentration");
    if (H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
        H5Dread(conc.get(), H5T_NATIVE_DOUBLE, mspace.get(), fspace.get(), H5P_DEFAULT, y.data()) <
            0)
      unreadable("/concentration");
  }
  std::vector<double> ids;
  if (H5Lexists(file.get(), "id", H5P_DEFAULT) > 0) ids = read_doubles(file.get(), "id");
  for (hsize_t s = 0; s < rows; ++s) {
    Series series;
    series.label = "id " + (s < ids.size() ? number_text(ids[s]) : std::to_string(s + 1));
    series.t = time;
    series.y.assign(y.begin() + static_cast<std::ptrdiff_t>(s * nt),
                    y.begin() + static_cast<std::ptrdiff_t>((s + 1) * nt));
    d.subjects.push_back(std::move(series));
  }
  return d;
}

}  // namespace pkscan::output::detail
