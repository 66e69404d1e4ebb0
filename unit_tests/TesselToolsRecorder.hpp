#ifndef TESSEL_UNIT_TESTS_TOOLS_RECORDER_HPP
#define TESSEL_UNIT_TESTS_TOOLS_RECORDER_HPP

// Records what Kokkos Tools sees (regions, allocation labels, kernel names and the device id of the instance each
// kernel and fence ran on) while it is alive, so tests can check that Tessel's regions are visible, that every
// allocation and kernel is labelled Tessel::, and that work runs on the execution space instance it was given.
#include <Kokkos_Core.hpp>

#include <string>
#include <vector>

namespace tessel::test {

class ToolsRecorder {
public:
  ToolsRecorder() {
    instance() = this;
    namespace T = Kokkos::Tools::Experimental;
    T::set_push_region_callback([](char const *name) { instance()->regions.emplace_back(name); });
    T::set_allocate_data_callback([](Kokkos::Profiling::SpaceHandle, char const *label, void const *, uint64_t) {
      instance()->allocations.emplace_back(label);
    });
    T::set_begin_parallel_for_callback([](char const *name, uint32_t device, uint64_t *) { record(name, device); });
    T::set_begin_parallel_reduce_callback([](char const *name, uint32_t device, uint64_t *) { record(name, device); });
    T::set_begin_parallel_scan_callback([](char const *name, uint32_t device, uint64_t *) { record(name, device); });
    T::set_begin_fence_callback([](char const *name, uint32_t device, uint64_t *) {
      instance()->fences.emplace_back(name);
      instance()->fence_devices.push_back(device);
    });
  }
  ~ToolsRecorder() {
    namespace T = Kokkos::Tools::Experimental;
    T::set_push_region_callback(nullptr);
    T::set_allocate_data_callback(nullptr);
    T::set_begin_parallel_for_callback(nullptr);
    T::set_begin_parallel_reduce_callback(nullptr);
    T::set_begin_parallel_scan_callback(nullptr);
    T::set_begin_fence_callback(nullptr);
    instance() = nullptr;
  }
  ToolsRecorder(ToolsRecorder const &) = delete;
  ToolsRecorder &operator=(ToolsRecorder const &) = delete;

  std::vector<std::string> regions, allocations, kernels, fences;
  /// Kokkos Tools device id (backend, device, instance) of each entry of kernels / fences.
  std::vector<uint32_t> kernel_devices, fence_devices;

private:
  static void record(char const *name, uint32_t device) {
    instance()->kernels.emplace_back(name);
    instance()->kernel_devices.push_back(device);
  }
  static ToolsRecorder *&instance() {
    static ToolsRecorder *current = nullptr;
    return current;
  }
};

/// True when \p name starts with "Tessel::".
inline bool tessel_labelled(std::string const &name) { return name.rfind("Tessel::", 0) == 0; }

} // namespace tessel::test

#endif
