// run_units (pkscan/population_run.hpp): work of whole units split over the processes of a
// RunExchange, ended as every split run ends (detail::run_split).
#include <cstdint>
#include <functional>
#include <pkscan/population_run.hpp>
#include <vector>

#include "population/exchange.hpp"

namespace pkscan {

void run_units(RunExchange& exchange, std::int64_t units,
               const std::function<void(std::int64_t, std::vector<char>&)>& make,
               const std::function<void(std::int64_t, const std::vector<char>&)>& take,
               const std::function<void()>& commit) {
  const int size = exchange.size();
  const int rank = exchange.rank();
  std::vector<char> bytes;
  std::vector<char> message;
  const auto body = [&] {
    for (std::int64_t u = 0; u < units; ++u) {
      const int owner = static_cast<int>(u % size);
      if (owner == rank) {
        exchange.before_unit(u);
        bytes.clear();
        make(u, bytes);
        if (rank != 0) {
          detail::pack_bytes(bytes, message);
          exchange.send(message);
          continue;
        }
      } else if (rank == 0) {
        exchange.receive(owner, message);
        detail::unpack_bytes(message, owner, bytes);
      } else {
        continue;
      }
      take(u, bytes);
    }
    return 0;
  };
  detail::run_split(exchange, body, commit);  // with one process: body(), then commit()
}

}  // namespace pkscan
