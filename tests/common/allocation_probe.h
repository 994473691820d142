// AllocationProbe: records the largest single heap allocation made while it
// is alive, so a test can show that a decoder refuses a hostile length before
// allocating for it.
//
// It works through a replacement of the global operator new/delete for the
// whole common_test binary (allocation_probe.cc); outside a probe they only
// forward to malloc/free. Probes must not nest or overlap across threads.
#ifndef TAGI_TESTS_COMMON_ALLOCATION_PROBE_H_
#define TAGI_TESTS_COMMON_ALLOCATION_PROBE_H_

#include <cstddef>

namespace tagi::test {

class AllocationProbe {
 public:
  AllocationProbe();
  ~AllocationProbe();
  AllocationProbe(const AllocationProbe&) = delete;
  AllocationProbe& operator=(const AllocationProbe&) = delete;

  // Largest single request (bytes) since construction.
  size_t largest() const;
};

}  // namespace tagi::test

#endif  // TAGI_TESTS_COMMON_ALLOCATION_PROBE_H_
