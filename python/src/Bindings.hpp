#ifndef TESSEL_PYTHON_BINDINGS_HPP
#define TESSEL_PYTHON_BINDINGS_HPP
/// \file Bindings.hpp
/// \brief One function per package that fills its submodule of tessel._tessel.
#include <nanobind/nanobind.h>

namespace tessel::python {

namespace nb = nanobind;

void bind_gnn(nanobind::module_ &m);
void bind_moe(nanobind::module_ &m);
void bind_sched(nanobind::module_ &m);

} // namespace tessel::python

#endif
