// Internal to the Gloo backend: Gloo's tcp transport with a way for any
// thread to fail every connection of a group at once (Abort, the connect
// watchdog, and the teardown after an error).
//
// How (facts from gloo git 5b14351, the Debian 0.5 build; see the .cc for
// the code paths): for each pair, transport::Pair::close() (what
// gloo::Context::closeConnections does) resets the socket, so the peer
// fails at once, but it does not wake an operation of this process that
// waits on the pair. A following Pair::setSync(true, ...) on the closed
// pair takes the path "Socket unexpectedly closed": it stores an
// IoException in the pair and wakes every buffer with an operation pending
// on it, whose wait then throws. Both are public virtual functions that
// take the pair's own mutex and keep Gloo's lock order (pair, then buffer);
// the only caveat, that Gloo reads a context's pair table without a lock
// because the table is constant once the pairs exist, is handled here by
// creating the pairs and failing them under one mutex.
//
// (Gloo's own entry point for this, tcp::Context::signalException, is
// protected, and Debian's gloo/transport/tcp/context.h cannot be included:
// it needs gloo/common/memory.h, which the package does not ship. So the
// tcp context is wrapped, not subclassed.)
#ifndef TAGI_WORKER_COLLECTIVE_GLOO_ABORTABLE_TCP_H_
#define TAGI_WORKER_COLLECTIVE_GLOO_ABORTABLE_TCP_H_

#include <chrono>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gloo/transport/context.h"
#include "gloo/transport/tcp/device.h"

namespace tagi::gloo_internal {

// A transport context that forwards to Gloo's tcp context and adds
// FailAllPairs. Gloo's own objects (pairs, buffers) keep referring to the
// inner tcp context, which holds all the state.
class AbortableContext final : public ::gloo::transport::Context {
 public:
  explicit AbortableContext(std::shared_ptr<::gloo::transport::Context> inner);

  std::unique_ptr<::gloo::transport::Pair>& createPair(int rank) override;
  std::unique_ptr<::gloo::transport::Pair>& getPair(int rank) override;
  std::unique_ptr<::gloo::transport::UnboundBuffer> createUnboundBuffer(void* ptr,
                                                                        size_t size) override;

  // Thread-safe. Every pending and later operation on the pairs throws
  // gloo::IoException; the peers see their connections reset.
  void FailAllPairs();

 private:
  const std::shared_ptr<::gloo::transport::Context> inner_;
  absl::Mutex mu_;  // pair creation vs FailAllPairs
};

class AbortableTcpDevice final : public ::gloo::transport::tcp::Device {
 public:
  // Resolves `attr` (tcp::CreateDeviceAttr) and starts the device's event
  // loop thread. Pairs get `pair_timeout` for their TCP connect (Gloo waits
  // up to 5x that for a peer to connect). Throws what Gloo throws for an
  // unusable address.
  static std::shared_ptr<AbortableTcpDevice> Create(const ::gloo::transport::tcp::attr& attr,
                                                    std::chrono::milliseconds pair_timeout);

  AbortableTcpDevice(const ::gloo::transport::tcp::attr& resolved,
                     std::chrono::milliseconds pair_timeout)
      : ::gloo::transport::tcp::Device(resolved), pair_timeout_(pair_timeout) {}

  std::shared_ptr<::gloo::transport::Context> createContext(int rank, int size) override;

  // Thread-safe. FailAllPairs on every live context made by this device.
  void FailAll();

 private:
  const std::chrono::milliseconds pair_timeout_;
  absl::Mutex mu_;
  std::vector<std::weak_ptr<AbortableContext>> contexts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tagi::gloo_internal

#endif  // TAGI_WORKER_COLLECTIVE_GLOO_ABORTABLE_TCP_H_
