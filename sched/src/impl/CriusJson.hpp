#ifndef TESSEL_SCHED_IMPL_CRIUSJSON_HPP
#define TESSEL_SCHED_IMPL_CRIUSJSON_HPP

// The Crius input files (dp_mem.json, sim_cluster_spec.json) hold one object, some wrapped in a one-element list.

#include <tessel/core/Error.hpp>
#include <tessel/core/Json.hpp>

#include <string>

namespace tessel::sched::Impl {

/// The object of a Crius JSON file \p doc read from \p path; \p shape describes the expected object in errors.
inline Json const &crius_object(Json const &doc, std::string const &path, char const *shape) {
  Json const *obj = &doc;
  if (doc.is_array()) {
    TESSEL_REQUIRE(doc.size() == 1, path, ": expected a one-element list holding an object");
    obj = &doc.front();
  }
  TESSEL_REQUIRE(obj->is_object(), path, ": expected ", shape);
  return *obj;
}

} // namespace tessel::sched::Impl

#endif
