#pragma once
// The subject block: summaries add their subjects in fixed blocks of kSubjectBlock subjects, each
// block's sums in a fixed order and the blocks in subject order, so that a summary has the same
// bits for any thread count, chunking or device; runs that summarize chunk their subjects in
// whole blocks.
#include <cstdint>

namespace pkscan::detail {

inline constexpr std::int64_t kSubjectBlock = 1024;

}  // namespace pkscan::detail
