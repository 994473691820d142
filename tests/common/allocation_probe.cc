#include "tests/common/allocation_probe.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

std::atomic<bool> g_tracking{false};
std::atomic<size_t> g_largest{0};

}  // namespace

void* operator new(size_t size) {
  if (g_tracking.load(std::memory_order_relaxed)) {
    size_t seen = g_largest.load(std::memory_order_relaxed);
    while (size > seen && !g_largest.compare_exchange_weak(seen, size)) {
    }
  }
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace tagi::test {

AllocationProbe::AllocationProbe() {
  g_largest = 0;
  g_tracking = true;
}

AllocationProbe::~AllocationProbe() { g_tracking = false; }

size_t AllocationProbe::largest() const { return g_largest; }

}  // namespace tagi::test
