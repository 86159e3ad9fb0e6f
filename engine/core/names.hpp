#pragma once
// Enumerations and their names, written once as a table: to_string and the parse with its error
// message both read the same entries (Method, Device, Precision, Discretization, ErrorModelKind).
#include <cstddef>
#include <pkscan/error.hpp>
#include <string>
#include <string_view>

namespace pkscan::detail {

template <class E>
struct Named {
  E value;
  const char* name;
};

// The name of `value` (the first entry's when the value is not in the table).
template <class E, std::size_t K>
std::string name_of(const Named<E> (&table)[K], E value) {
  for (const Named<E>& n : table)
    if (n.value == value) return n.name;
  return table[0].name;
}

// The value called `name`; otherwise InvalidArgument "<what> is "x", but must be a or b" (two
// names) or "..., but must be one of a, b, c" (more).
template <class E, std::size_t K>
E value_named(const Named<E> (&table)[K], std::string_view name, const char* what) {
  std::string all = K == 2 ? "" : "one of ";
  for (std::size_t i = 0; i < K; ++i) {
    if (name == table[i].name) return table[i].value;
    all += i == 0 ? "" : K == 2 ? " or " : ", ";
    all += table[i].name;
  }
  throw InvalidArgument(std::string(what) + " is \"" + std::string(name) + "\", but must be " +
                        all);
}

}  // namespace pkscan::detail
