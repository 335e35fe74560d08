// Device and pinned host memory, copies, streams and events behind plain pointers, so that code
// compiled without CUDA's headers can drive the kernels. Streams are opaque `void*` (a
// cudaStream_t); nullptr is the legacy default stream. Every call works on the calling thread's
// current device.
#ifndef PS_CUDA_KERNELS_MEMORY_H_
#define PS_CUDA_KERNELS_MEMORY_H_

#include <cstddef>
#include <utility>

#include "cuda_kernels/error.h"

namespace ps {
namespace cuda {

// Allocates `bytes` of device memory into *ptr (nullptr for 0 bytes). kOutOfMemory when the device
// is full; kRuntime (cudaErrorNoDevice...) without a GPU. *ptr is untouched on failure.
Error DeviceAlloc(size_t bytes, void** ptr);
// Frees what DeviceAlloc returned; nullptr is ignored.
Error DeviceFree(void* ptr);

// Allocates `bytes` of page-locked (pinned) host memory into *ptr (nullptr for 0 bytes): copies
// from and to it are truly asynchronous and run at the link's full speed. kOutOfMemory when the
// host cannot lock that much; kRuntime without a GPU. *ptr is untouched on failure.
Error HostAlloc(size_t bytes, void** ptr);
// Frees what HostAlloc returned; nullptr is ignored.
Error HostFree(void* ptr);

// Copies `bytes` between any two of host and device memory (unified addressing tells which), in
// stream order. From pageable host memory the call returns once the source may be reused; into
// pageable host memory it returns once the data is there.
Error Copy(void* dst, const void* src, size_t bytes, void* stream);
// Copies `height` rows of `width_bytes` each, rows `dst_pitch` / `src_pitch` bytes apart.
Error Copy2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width_bytes,
             size_t height, void* stream);
// Sets `bytes` of device memory to zero, in stream order.
Error Zero(void* ptr, size_t bytes, void* stream);

// A new stream into *stream, or the error (kRuntime without a GPU).
Error StreamCreate(void** stream);
Error StreamDestroy(void* stream);
// Waits for all work queued on the stream; reports faults of kernels that ran on it.
Error StreamSynchronize(void* stream);

// A new event into *event (timing disabled), or the error (kRuntime without a GPU).
Error EventCreate(void** event);
Error EventDestroy(void* event);
// Marks the point of `stream` reached by the work queued on it so far.
Error EventRecord(void* event, void* stream);
// Makes later work queued on `stream` wait until the work before the event's last record is done
// (the host does not wait).
Error StreamWaitEvent(void* stream, void* event);

// An owned array of T that grows on demand, in the memory `Memory` allocates: Memory::Alloc(bytes,
// void**) returns an Error and Memory::Free(void*) frees (null included). Movable, not copyable.
// Thread-compatible.
template <typename T, typename Memory>
class GrowingArray {
 public:
  GrowingArray() = default;
  ~GrowingArray() { Memory::Free(data_); }
  GrowingArray(const GrowingArray&) = delete;
  GrowingArray& operator=(const GrowingArray&) = delete;
  GrowingArray(GrowingArray&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  GrowingArray& operator=(GrowingArray&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
    return *this;
  }

  // Makes room for n elements. Reallocates (without keeping the contents) only when n exceeds
  // every earlier size. On failure the array is empty.
  Error Resize(size_t n) {
    if (n > capacity_) {
      Memory::Free(data_);
      data_ = nullptr;
      size_ = capacity_ = 0;
      void* p = nullptr;
      Error e = Memory::Alloc(n * sizeof(T), &p);
      if (!e.ok()) return e;
      data_ = static_cast<T*>(p);
      capacity_ = n;
    }
    size_ = n;
    return Error();
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// Device memory (DeviceAlloc) and pinned host memory (HostAlloc), for GrowingArray.
struct DeviceMemory {
  static Error Alloc(size_t bytes, void** p) { return DeviceAlloc(bytes, p); }
  static void Free(void* p) { DeviceFree(p); }
};
struct PinnedMemory {
  static Error Alloc(size_t bytes, void** p) { return HostAlloc(bytes, p); }
  static void Free(void* p) { HostFree(p); }
};

// An owned device array of T that grows on demand.
template <typename T>
using DeviceArray = GrowingArray<T, DeviceMemory>;

// An owned array of T in pinned host memory (faster copies to and from the device, and
// asynchronous ones) that grows on demand.
template <typename T>
using PinnedArray = GrowingArray<T, PinnedMemory>;

}  // namespace cuda
}  // namespace ps

#endif  // PS_CUDA_KERNELS_MEMORY_H_
