// gradient_bench: cost of the Predictor's exact gradients against plain predictions.
//
//   gradient_bench [--subjects 1000] [--doses 10] [--ii 12] [--obs 20] [--reps 7]
//                  [--threads 0] [--seed 2024]
//
// A realistic fitting workload: three_compartment in the clearance parameterization (ka, cl,
// v_central, q, v_peripheral; f_depot 1 and lag_depot 0 at their defaults but differentiated,
// as a fit would), each subject with --doses oral doses every --ii hours (one record with ADDL)
// and --obs observations at irregular (random, seeded) times over the dosing period and one
// interval after it, DV with 15% proportional noise, log-normal parameters per subject.
// Times, best of --reps repeats, for all subjects:
//   predict_s:  predict() of every subject (one workspace per thread)
//   gradient_s: predict_gradient() of every subject (predictions and the full Jacobian)
//   ratio:      gradient_s / predict_s
//   loglik_s / loglik_grad_s: log_likelihood_all (combined error) without / with gradients
// once on one thread (*_1t) and once on --threads threads (0 = all cores). Prints one JSON line.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <pkscan/dataset.hpp>
#include <pkscan/predictor.hpp>
#include <pkscan/threads.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Options {
  int subjects = 1000;
  int doses = 10;
  double ii = 12.0;
  int obs = 20;
  int reps = 7;
  int threads = 0;
  unsigned seed = 2024;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gradient_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--subjects")
      o.subjects = std::atoi(next());
    else if (a == "--doses")
      o.doses = std::atoi(next());
    else if (a == "--ii")
      o.ii = std::atof(next());
    else if (a == "--obs")
      o.obs = std::atoi(next());
    else if (a == "--reps")
      o.reps = std::atoi(next());
    else if (a == "--threads")
      o.threads = std::atoi(next());
    else if (a == "--seed")
      o.seed = static_cast<unsigned>(std::atoi(next()));
    else {
      std::fprintf(stderr,
                   "usage: gradient_bench [--subjects N] [--doses N] [--ii H] [--obs N] "
                   "[--reps N] [--threads N] [--seed N]\n");
      std::exit(2);
    }
  }
  if (o.subjects < 1 || o.doses < 1 || o.obs < 1 || o.reps < 1 || !(o.ii > 0)) {
    std::fprintf(stderr, "gradient_bench: sizes must be >= 1 and --ii > 0\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const pkscan::ModelInfo& m = pkscan::model_info(pkscan::ModelKind::ThreeCompartment);
  const int np = static_cast<int>(m.parameters.size());
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> z(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);

  // Parameters per subject (log-normal around typical values), clearances.
  std::vector<double> params(static_cast<std::size_t>(o.subjects) * static_cast<std::size_t>(np));
  auto col = [&](const char* name) { return pkscan::parameter_index(m, name); };
  for (int s = 0; s < o.subjects; ++s) {
    double* p = params.data() + static_cast<std::size_t>(s) * static_cast<std::size_t>(np);
    for (int c = 0; c < np; ++c) p[c] = m.parameters[static_cast<std::size_t>(c)].default_value;
    p[col("ka")] = 1.0 * std::exp(0.3 * z(rng));
    p[col("cl")] = 5.0 * std::exp(0.3 * z(rng));
    p[col("v_central")] = 20.0 * std::exp(0.2 * z(rng));
    p[col("q")] = 8.0 * std::exp(0.3 * z(rng));
    p[col("v_peripheral")] = 70.0 * std::exp(0.2 * z(rng));
  }

  // The dataset: a dose record with ADDL and irregular observation times (DV from a first
  // prediction with noise, filled in below).
  const double horizon = o.ii * o.doses;
  std::string csv = "ID,TIME,AMT,EVID,CMT,II,ADDL,DV\n";
  for (int s = 1; s <= o.subjects; ++s) {
    std::vector<double> t(static_cast<std::size_t>(o.obs));
    for (double& x : t) x = 0.05 + horizon * u(rng);
    std::sort(t.begin(), t.end());
    const std::string id = std::to_string(s);
    csv += id + ",0,100,1,1," + std::to_string(o.ii) + "," + std::to_string(o.doses - 1) + ",.\n";
    char buf[64];
    for (double x : t) {
      std::snprintf(buf, sizeof buf, "%.4f", x);
      csv += id + "," + buf + ",.,0,2,.,.,1\n";
    }
  }
  pkscan::Dataset data = pkscan::parse_dataset(csv, "bench.csv", m);
  {
    // DV = prediction * (1 + 0.15 eps) (+ a small floor), so the likelihood is realistic.
    const pkscan::Predictor first(data, pkscan::ModelKind::ThreeCompartment);
    std::vector<double> pred(static_cast<std::size_t>(first.observations()));
    first.predict_all(params.data(), pred.data(), o.threads);
    std::size_t i = 0;
    for (pkscan::DatasetSubject& sub : data.subjects)
      for (pkscan::DatasetRecord& r : sub.records)
        if (r.evid == 0) r.dv = std::max(1e-3, pred[i++] * (1.0 + 0.15 * z(rng)));
  }
  const pkscan::Predictor pr(std::move(data), pkscan::ModelKind::ThreeCompartment);
  const std::size_t nobs = static_cast<std::size_t>(pr.observations());
  const int threads = pkscan::resolve_threads(o.threads);

  std::vector<double> pred(nobs), jac(nobs * static_cast<std::size_t>(np));
  double checksum = 0.0;
  // One pass of predict (gradient = false) or predict_gradient over every subject.
  // Workspaces are made once per thread, as a fit would.
  std::vector<std::unique_ptr<pkscan::Predictor::Workspace>> workspaces;
  for (int t = 0; t < std::max(threads, 1); ++t) workspaces.push_back(pr.make_workspace());
  auto pass = [&](bool gradient, int nthreads) {
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(nthreads)
    {
      pkscan::Predictor::Workspace& ws =
          *workspaces[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 16)
      for (std::int64_t s = 0; s < pr.subjects(); ++s) {
        const double* p =
            params.data() + static_cast<std::size_t>(s) * static_cast<std::size_t>(np);
        const std::size_t off = static_cast<std::size_t>(pr.observation_offset(s));
        if (gradient)
          pr.predict_gradient(s, p, pred.data() + off,
                              jac.data() + off * static_cast<std::size_t>(np), ws);
        else
          pr.predict(s, p, pred.data() + off, ws);
      }
    }
    return seconds_since(t0);
  };
  const pkscan::ErrorModel err{pkscan::ErrorModelKind::Combined, false};
  const double sigma[2] = {0.05, 0.15};
  std::vector<double> grad(static_cast<std::size_t>(o.subjects) * static_cast<std::size_t>(np));
  double sgrad[2];
  auto loglik = [&](bool gradient, int nthreads) {
    const auto t0 = Clock::now();
    checksum +=
        pr.log_likelihood_all(params.data(), err, sigma, nullptr, gradient ? grad.data() : nullptr,
                              gradient ? sgrad : nullptr, nthreads);
    return seconds_since(t0);
  };
  auto best = [&](auto&& f) {
    double b = std::numeric_limits<double>::infinity();
    for (int r = 0; r < o.reps; ++r) b = std::min(b, f());
    return b;
  };
  const double p1 = best([&] { return pass(false, 1); });
  const double g1 = best([&] { return pass(true, 1); });
  const double l1 = best([&] { return loglik(false, 1); });
  const double lg1 = best([&] { return loglik(true, 1); });
  const double pn = best([&] { return pass(false, threads); });
  const double gn = best([&] { return pass(true, threads); });
  const double ln = best([&] { return loglik(false, threads); });
  const double lgn = best([&] { return loglik(true, threads); });
  for (double x : jac) checksum += x;

  std::printf(
      "{\"bench\":\"gradient\",\"model\":\"three_compartment\",\"parameterization\":\"clearance\","
      "\"subjects\":%d,\"doses\":%d,\"ii\":%g,\"observations_per_subject\":%d,\"parameters\":%d,"
      "\"reps\":%d,\"threads\":%d,"
      "\"predict_s_1t\":%.6g,\"gradient_s_1t\":%.6g,\"ratio_1t\":%.4g,"
      "\"loglik_s_1t\":%.6g,\"loglik_grad_s_1t\":%.6g,"
      "\"predict_s\":%.6g,\"gradient_s\":%.6g,\"ratio\":%.4g,"
      "\"loglik_s\":%.6g,\"loglik_grad_s\":%.6g,"
      "\"predict_us_per_subject_1t\":%.4g,\"gradient_us_per_subject_1t\":%.4g,"
      "\"checksum\":%.6g}\n",
      o.subjects, o.doses, o.ii, o.obs, np, o.reps, threads, p1, g1, g1 / p1, l1, lg1, pn, gn,
      gn / pn, ln, lgn, 1e6 * p1 / o.subjects, 1e6 * g1 / o.subjects, checksum);
  return 0;
}
