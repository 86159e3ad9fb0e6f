#include <pkscan/error.hpp>
#include <pkscan/result.hpp>
#include <pkscan/types.hpp>

namespace pkscan {

std::shared_ptr<const ModelInfo> ParameterBatch::builtin(ModelKind kind) {
  // Non-owning: the built-in descriptions are static.
  return std::shared_ptr<const ModelInfo>(std::shared_ptr<const ModelInfo>(), &model_info(kind));
}

ParameterBatch::ParameterBatch(ModelKind model, std::int64_t subjects)
    : ParameterBatch(builtin(model), subjects) {}

ParameterBatch::ParameterBatch(std::shared_ptr<const ModelInfo> model, std::int64_t subjects)
    : model_(model->kind),
      info_(std::move(model)),
      subjects_(subjects < 0 ? 0 : subjects),
      columns_(static_cast<int>(info_->parameters.size())) {
  const ModelInfo& info = *info_;
  values_.resize(static_cast<std::size_t>(subjects_ * columns_));
  for (std::int64_t s = 0; s < subjects_; ++s)
    for (int c = 0; c < columns_; ++c)
      values_[static_cast<std::size_t>(s * columns_ + c)] =
          info.parameters[static_cast<std::size_t>(c)].default_value;
}

namespace {
int column_or_throw(const ModelInfo& model, const std::string& name) {
  const int c = parameter_index(model, name);
  if (c < 0)
    throw InvalidArgument("ParameterBatch: parameter \"" + name + "\" is not a parameter of " +
                          model.name);
  return c;
}
}  // namespace

void ParameterBatch::set(const std::string& name, std::int64_t subject, double value) {
  const int c = column_or_throw(*info_, name);
  if (subject < 0 || subject >= subjects_)
    throw InvalidArgument("ParameterBatch: subject index (0-based) is " + std::to_string(subject) +
                          ", but must be in [0, " + std::to_string(subjects_) + ")");
  values_[static_cast<std::size_t>(subject * columns_ + c)] = value;
}

void ParameterBatch::set_all(const std::string& name, double value) {
  const int c = column_or_throw(*info_, name);
  for (std::int64_t s = 0; s < subjects_; ++s)
    values_[static_cast<std::size_t>(s * columns_ + c)] = value;
}

double SimulationResult::amount(std::int64_t s, std::int64_t t, int c) const noexcept {
  const std::size_t i = static_cast<std::size_t>((s * times() + t) * compartments_ + c);
  return precision_ == Precision::Float64 ? amounts_f64_[i] : static_cast<double>(amounts_f32_[i]);
}

double SimulationResult::concentration(std::int64_t s, std::int64_t t, int c) const noexcept {
  const std::size_t i = static_cast<std::size_t>((s * times() + t) * compartments_ + c);
  if (precision_ == Precision::Float64) {
    if (!conc_f64_.empty()) return conc_f64_[i];
    return amounts_f64_[i] / volume(s, c);
  }
  if (!conc_f32_.empty()) return static_cast<double>(conc_f32_[i]);
  return static_cast<double>(amounts_f32_[i] / static_cast<float>(volume(s, c)));
}

namespace {

// a[s * per + k] = a[s * per + k] * f[s] (+ b[s * per + k] * f[s] when b is given).
template <class T>
void scale_rows(T* a, const T* b, std::int64_t subjects, std::size_t per, const double* f) {
  for (std::int64_t s = 0; s < subjects; ++s) {
    const T x = static_cast<T>(f[s]);
    T* row = a + static_cast<std::size_t>(s) * per;
    const T* other = b ? b + static_cast<std::size_t>(s) * per : nullptr;
    for (std::size_t k = 0; k < per; ++k) row[k] = other ? row[k] + other[k] * x : row[k] * x;
  }
}

}  // namespace

void SimulationResult::scale_subjects(const double* factors) noexcept {
  const std::size_t per =
      static_cast<std::size_t>(times()) * static_cast<std::size_t>(compartments_);
  scale_rows(amounts_f64_.data(), static_cast<const double*>(nullptr),
             amounts_f64_.empty() ? 0 : subjects_, per, factors);
  scale_rows(amounts_f32_.data(), static_cast<const float*>(nullptr),
             amounts_f32_.empty() ? 0 : subjects_, per, factors);
  scale_rows(conc_f64_.data(), static_cast<const double*>(nullptr),
             conc_f64_.empty() ? 0 : subjects_, per, factors);
  scale_rows(conc_f32_.data(), static_cast<const float*>(nullptr),
             conc_f32_.empty() ? 0 : subjects_, per, factors);
}

void SimulationResult::add_scaled(const SimulationResult& other, const double* factors) {
  if (other.subjects_ != subjects_ || other.output_times_ != output_times_ ||
      other.compartments_ != compartments_ || other.precision_ != precision_ ||
      other.amounts_f64_.size() != amounts_f64_.size() ||
      other.amounts_f32_.size() != amounts_f32_.size() ||
      other.conc_f64_.size() != conc_f64_.size() || other.conc_f32_.size() != conc_f32_.size())
    throw InvalidArgument(
        "SimulationResult::add_scaled: the results differ in subjects, times, compartments, "
        "precision or stored arrays");
  const std::size_t per =
      static_cast<std::size_t>(times()) * static_cast<std::size_t>(compartments_);
  auto add = [&](auto& mine, const auto& theirs) {
    if (!mine.empty()) scale_rows(mine.data(), theirs.data(), subjects_, per, factors);
  };
  // scale_rows with `b` computes a + b x: this result keeps its own factor (1).
  add(amounts_f64_, other.amounts_f64_);
  add(amounts_f32_, other.amounts_f32_);
  add(conc_f64_, other.conc_f64_);
  add(conc_f32_, other.conc_f32_);
  for (std::size_t s = 0; s < status_.size() && s < other.status_.size(); ++s)
    if (status_[s] == SubjectStatus::Ok) status_[s] = other.status_[s];
}

}  // namespace pkscan
