#include <tessel/core/cuda/Cuda.hpp>

#include "../impl/Progress.hpp"

#include <algorithm>

namespace tessel::cuda {

namespace Impl {
void throw_cuda_error(char const *file, int line, char const *call, cudaError_t code) {
  throw Exception(tessel::Impl::concat("CUDA failed: ", cudaGetErrorName(code), " (", cudaGetErrorString(code), ")"),
                  tessel::Impl::concat(call, " (", tessel::Impl::source_location(file, line, "cuda"), ")"));
}

void *device_allocate(std::size_t bytes, std::string const &label) {
  void *ptr = nullptr;
  if (bytes == 0)
    return nullptr;
  cudaError_t const rc = cudaMalloc(&ptr, bytes);
  if (rc != cudaSuccess) {
    cudaGetLastError(); // clear the sticky-free error state of a failed allocation
    throw Exception(tessel::Impl::concat("tessel::cuda::DeviceBuffer: allocation '", label, "' of ", bytes,
                                         " bytes failed: ", cudaGetErrorString(rc)));
  }
  return ptr;
}

void device_free(void *ptr) noexcept {
  if (ptr)
    cudaFree(ptr);
}

void copy(void *dst, void const *src, std::size_t bytes, cudaStream_t stream) {
  if (bytes > 0)
    TESSEL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}
} // namespace Impl

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  TESSEL_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return tessel::Impl::concat(prop.name, " (sm_", prop.major, prop.minor, ", ", prop.multiProcessorCount, " SMs)");
}

// Polls \p ready until it reports completion or the deadline passes; the CUDA error of a failed query is thrown.
template <class Query> static void wait_for(Query &&ready, Timeout timeout, char const *what) {
  auto const done = [&] {
    cudaError_t const rc = ready();
    if (rc == cudaErrorNotReady)
      return false;
    TESSEL_CUDA_CHECK(rc);
    return true;
  };
  if (!tessel::Impl::progress_until(tessel::Impl::deadline_after(timeout), done))
    throw TimeoutError(
        tessel::Impl::concat("tessel::cuda::", what, ": device work did not complete within ", timeout.count(), " ms"),
        -1);
}

Stream::Stream(int priority) {
  auto const [least, greatest] = priority_range();
  // CUDA priorities run from `least` (0) down to `greatest` (negative); clamp into that interval.
  _priority = std::min(least, std::max(greatest, priority));
  TESSEL_CUDA_CHECK(cudaStreamCreateWithPriority(&_stream, cudaStreamNonBlocking, _priority));
}

Stream::~Stream() {
  if (_stream)
    cudaStreamDestroy(_stream);
}

Stream &Stream::operator=(Stream &&other) noexcept {
  if (this != &other) {
    if (_stream)
      cudaStreamDestroy(_stream);
    _stream = std::exchange(other._stream, nullptr);
    _priority = other._priority;
  }
  return *this;
}

bool Stream::query() const {
  cudaError_t const rc = cudaStreamQuery(_stream);
  if (rc == cudaErrorNotReady)
    return false;
  TESSEL_CUDA_CHECK(rc);
  return true;
}

void Stream::synchronize(Timeout timeout) const {
  wait_for([this] { return cudaStreamQuery(_stream); }, timeout, "Stream::synchronize");
}

std::pair<int, int> Stream::priority_range() {
  int least = 0, greatest = 0;
  TESSEL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return {least, greatest};
}

Event::Event(bool timing) {
  TESSEL_CUDA_CHECK(cudaEventCreateWithFlags(&_event, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (_event)
    cudaEventDestroy(_event);
}

Event &Event::operator=(Event &&other) noexcept {
  if (this != &other) {
    if (_event)
      cudaEventDestroy(_event);
    _event = std::exchange(other._event, nullptr);
  }
  return *this;
}

void Event::record(cudaStream_t stream) { TESSEL_CUDA_CHECK(cudaEventRecord(_event, stream)); }

void Event::wait_on(cudaStream_t stream) const { TESSEL_CUDA_CHECK(cudaStreamWaitEvent(stream, _event, 0)); }

bool Event::query() const {
  cudaError_t const rc = cudaEventQuery(_event);
  if (rc == cudaErrorNotReady)
    return false;
  TESSEL_CUDA_CHECK(rc);
  return true;
}

void Event::synchronize(Timeout timeout) const {
  wait_for([this] { return cudaEventQuery(_event); }, timeout, "Event::synchronize");
}

float Event::elapsed_ms(Event const &start, Event const &stop) {
  float ms = 0.f;
  TESSEL_CUDA_CHECK(cudaEventElapsedTime(&ms, start._event, stop._event));
  return ms;
}

} // namespace tessel::cuda
