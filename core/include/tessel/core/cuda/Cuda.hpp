#ifndef TESSEL_CORE_CUDA_CUDA_HPP
#define TESSEL_CORE_CUDA_CUDA_HPP

/// \file cuda/Cuda.hpp
/// \brief Tessel's CUDA layer: RAII streams (with priorities), events and device buffers. It needs only the CUDA
/// runtime, not a CUDA-enabled Kokkos; where Kokkos has CUDA, a Stream converts to a Kokkos::Cuda instance.

#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>

#ifndef TESSEL_ENABLE_CUDA
#error "tessel/core/cuda/Cuda.hpp needs a Tessel built with Tessel_ENABLE_CUDA=ON"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#if defined(KOKKOS_ENABLE_CUDA)
#include <Kokkos_Core.hpp>
#endif

namespace tessel::cuda {

namespace Impl {
[[noreturn]] void throw_cuda_error(char const *file, int line, char const *call, cudaError_t code);
}

/// \brief Number of visible CUDA devices; 0 when there is no device or no driver (never throws).
int device_count();

/// \brief "NVIDIA H200 (sm_90, 132 SMs)" for device \p device.
std::string device_name(int device);

/// \brief An owned CUDA stream. Move-only; destroyed with the object.
class Stream {
public:
  /// Creates a non-blocking stream on the current device. \p priority follows CUDA: lower is more urgent;
  /// it is clamped to the device's range (see priority_range()).
  explicit Stream(int priority = 0);
  ~Stream();
  /// \name Move-only: the moved-from object owns nothing
  //@{
  /// Move-only: the moved-from object owns nothing.
  Stream(Stream &&other) noexcept : _stream(std::exchange(other._stream, nullptr)), _priority(other._priority) {}
  Stream &operator=(Stream &&other) noexcept;
  Stream(Stream const &) = delete;
  Stream &operator=(Stream const &) = delete;
  //@}

  /// The CUDA stream.
  cudaStream_t get() const noexcept { return _stream; }
  /// The priority it was created with (after clamping).
  int priority() const noexcept { return _priority; }
  /// True when all work enqueued so far has completed.
  bool query() const;
  /// Waits for the enqueued work; throws TimeoutError after \p timeout (never hangs).
  void synchronize(Timeout timeout) const;
  /// {least urgent, most urgent} priorities of the current device.
  static std::pair<int, int> priority_range();

#if defined(KOKKOS_ENABLE_CUDA)
  /// A Kokkos::Cuda instance on this stream (the stream must outlive it).
  Kokkos::Cuda kokkos_instance() const { return Kokkos::Cuda(_stream); }
#endif

private:
  cudaStream_t _stream = nullptr;
  int _priority = 0;
};

/// \brief An owned CUDA event, to order and time work across streams. Move-only.
class Event {
public:
  /// \p timing enables elapsed_ms (timing events are slightly more expensive to record).
  explicit Event(bool timing = false);
  ~Event();
  /// \name Move-only: the moved-from object owns nothing
  //@{
  /// Move-only: the moved-from object owns nothing.
  Event(Event &&other) noexcept : _event(std::exchange(other._event, nullptr)) {}
  Event &operator=(Event &&other) noexcept;
  Event(Event const &) = delete;
  Event &operator=(Event const &) = delete;
  //@}

  /// The CUDA event.
  cudaEvent_t get() const noexcept { return _event; }
  /// Captures the work enqueued on \p stream so far.
  void record(cudaStream_t stream);
  /// Makes \p stream wait (on the device) for the captured work.
  void wait_on(cudaStream_t stream) const;
  /// True when the captured work has completed.
  bool query() const;
  /// Waits on the host; throws TimeoutError after \p timeout.
  void synchronize(Timeout timeout) const;
  /// Milliseconds between two recorded timing events.
  static float elapsed_ms(Event const &start, Event const &stop);

private:
  cudaEvent_t _event = nullptr;
};

namespace Impl {
void *device_allocate(std::size_t bytes, std::string const &label);
void device_free(void *ptr) noexcept;
void copy(void *dst, void const *src, std::size_t bytes, cudaStream_t stream);
} // namespace Impl

/// \brief An owned device allocation of \p n elements of T. Move-only; freed with the object.
template <class T> class DeviceBuffer {
public:
  /// An empty buffer.
  DeviceBuffer() = default;
  /// \p label names the allocation in out-of-memory errors ("Tessel::moe::dispatch").
  explicit DeviceBuffer(std::size_t n, std::string const &label = "Tessel::DeviceBuffer")
      : _data(static_cast<T *>(Impl::device_allocate(n * sizeof(T), label))), _size(n) {}
  ~DeviceBuffer() { Impl::device_free(_data); }
  /// \name Move-only: the moved-from object owns nothing
  //@{
  /// Move-only: the moved-from object owns nothing.
  DeviceBuffer(DeviceBuffer &&other) noexcept
      : _data(std::exchange(other._data, nullptr)), _size(std::exchange(other._size, 0)) {}
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept {
    if (this != &other) {
      Impl::device_free(_data);
      _data = std::exchange(other._data, nullptr);
      _size = std::exchange(other._size, 0);
    }
    return *this;
  }
  DeviceBuffer(DeviceBuffer const &) = delete;
  DeviceBuffer &operator=(DeviceBuffer const &) = delete;
  //@}

  /// Device pointer to the first element.
  T *data() const noexcept { return _data; }
  /// Number of elements.
  std::size_t size() const noexcept { return _size; }
  /// Size in bytes.
  std::size_t bytes() const noexcept { return _size * sizeof(T); }

  /// Stream-ordered copy of \p n host elements into the buffer (n <= size()).
  void copy_from_host(T const *host, std::size_t n, cudaStream_t stream) {
    TESSEL_REQUIRE(n <= _size, "copy of ", n, " elements into a buffer of ", _size);
    Impl::copy(_data, host, n * sizeof(T), stream);
  }
  /// Stream-ordered copy of the first \p n elements to host memory.
  void copy_to_host(T *host, std::size_t n, cudaStream_t stream) const {
    TESSEL_REQUIRE(n <= _size, "copy of ", n, " elements out of a buffer of ", _size);
    Impl::copy(host, _data, n * sizeof(T), stream);
  }

private:
  T *_data = nullptr;
  std::size_t _size = 0;
};

} // namespace tessel::cuda

/// \brief Checks a CUDA runtime call; on failure throws tessel::Exception with the CUDA error name and text.
#define TESSEL_CUDA_CHECK(call)                                                                                        \
  do {                                                                                                                 \
    cudaError_t const tessel_cuda_rc_ = (call);                                                                        \
    if (tessel_cuda_rc_ != cudaSuccess)                                                                                \
      ::tessel::cuda::Impl::throw_cuda_error(__FILE__, __LINE__, #call, tessel_cuda_rc_);                              \
  } while (false)

#endif
