#pragma once
// Zero-copy result arrays of the pkscan Python module: NumPy arrays that view the engine's own
// result storage, kept alive by a capsule that owns the result. Not installed.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

namespace pkscan::python {

namespace py = pybind11;

// A NumPy array viewing `data` (owned by the object behind `owner`).
template <class T>
py::array view(const T* data, std::vector<py::ssize_t> shape, const py::capsule& owner) {
  return py::array_t<T>(std::move(shape), data, owner);
}

template <class T>
py::capsule owning_capsule(std::unique_ptr<T> p) {
  return py::capsule(p.release(), [](void* q) { delete static_cast<T*>(q); });
}

// A new NumPy array holding a copy of `v`'s values.
template <class T>
py::array_t<T> array(const std::vector<T>& v, std::vector<py::ssize_t> shape) {
  py::array_t<T> a(shape);
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

// The array viewing `v`'s values, which it takes over (no copy: a table of every row is held
// once).
template <class T>
py::array_t<T> take(std::vector<T>& v, std::vector<py::ssize_t> shape) {
  if (v.empty()) return array(v, std::move(shape));
  auto owned = std::make_unique<std::vector<T>>(std::move(v));
  const T* data = owned->data();
  return view(data, std::move(shape), owning_capsule(std::move(owned)));
}

}  // namespace pkscan::python
