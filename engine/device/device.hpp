#pragma once
// The device backends (engine/device/) as the rest of the library sees them.
#include <cstdint>
#include <memory>
#include <pkscan/backend.hpp>
#include <pkscan/events.hpp>
#include <vector>

#include "grid/backend.hpp"

namespace pkscan::device {
class Runtime;
}

namespace pkscan::detail {

// The backend of `method` (batched, power or auto) over a system's runtime.
std::unique_ptr<Backend> make_device_backend(Method method,
                                             std::unique_ptr<device::Runtime> runtime);

// The runtime that device 'cuda' uses. By default the CUDA runtime (null in a build without
// CUDA); tests set a factory that returns another system's runtime (the host system's:
// engine/device/runtime_host.cpp), so that device 'cuda' runs the same device code on the host.
// Not thread-safe: set it before any simulation starts.
using RuntimeFactory = std::unique_ptr<device::Runtime> (*)();
void set_device_runtime_factory(RuntimeFactory factory) noexcept;
std::unique_ptr<device::Runtime> make_device_runtime();  // null when device 'cuda' has none

struct DatasetSetup;

// simulate_dataset_into's path for device 'cuda' (engine/device/device_dataset.cpp): the rows
// and statuses of `res` (sized by the caller; subject s's rows start at first_row[s]), its
// device seconds and the subjects it left to the host, with `threads` host threads preparing
// the subjects' plans and parameter rows.
// @throws BackendUnavailable when device 'cuda' has no usable device
// @throws DeviceError from the runtime, DomainError as the CPU path (naming the record)
void simulate_dataset_on_device(const DatasetSetup& setup, const ParameterBatch& parameters,
                                const std::vector<std::int64_t>& first_row, int threads,
                                DatasetResult& res);

}  // namespace pkscan::detail
