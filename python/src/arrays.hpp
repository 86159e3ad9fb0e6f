#pragma once
// Zero-copy result arrays of the pkscan Python module: NumPy arrays that view the engine's own
// result storage, kept alive by a capsule that owns the result. Not installed.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

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

}  // namespace pkscan::python
