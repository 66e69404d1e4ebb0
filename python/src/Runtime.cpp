#include "Runtime.hpp"

#include <tessel/core/ScopeGuard.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

namespace tessel::python {

namespace nb = nanobind;

namespace {

struct State {
  std::mutex mutex;
  std::unordered_set<Resource *> resources;
  std::unique_ptr<ScopeGuard> guard;
  bool finalized = false;
};

State &state() {
  // Never destroyed: Python may release objects after static destructors would have run.
  static auto *s = new State;
  return *s;
}

} // namespace

Resource::Resource() {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().resources.insert(this);
}

Resource::~Resource() {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().resources.erase(this);
}

void initialize() {
  auto &s = state();
  if (s.guard || s.finalized)
    return;
  static char name[] = "python";
  static char *argv_storage[] = {name, nullptr};
  int argc = 1;
  char **argv = argv_storage;
  s.guard = std::make_unique<ScopeGuard>(argc, argv);
}

void finalize() {
  auto &s = state();
  if (s.finalized)
    return;
  std::unordered_set<Resource *> live;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    live = s.resources;
  }
  for (auto *r : live)
    r->release();
  s.finalized = true;
  s.guard.reset();
}

void require_initialized(char const *where) {
  auto &s = state();
  if (s.finalized)
    throw std::runtime_error(std::string(where) + ": Tessel has been finalized (the interpreter is shutting down)");
  if (!s.guard)
    initialize();
}

void check_signals() {
  nb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0)
    throw nb::python_error();
}

} // namespace tessel::python
