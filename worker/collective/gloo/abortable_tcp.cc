#include "worker/collective/gloo/abortable_tcp.h"

#include <exception>
#include <utility>

#include "gloo/transport/pair.h"
#include "gloo/transport/unbound_buffer.h"

namespace tagi::gloo_internal {

AbortableContext::AbortableContext(std::shared_ptr<::gloo::transport::Context> inner)
    : ::gloo::transport::Context(inner->rank, inner->size), inner_(std::move(inner)) {}

std::unique_ptr<::gloo::transport::Pair>& AbortableContext::createPair(int rank) {
  absl::MutexLock lock(&mu_);
  return inner_->createPair(rank);
}

std::unique_ptr<::gloo::transport::Pair>& AbortableContext::getPair(int rank) {
  return inner_->getPair(rank);
}

std::unique_ptr<::gloo::transport::UnboundBuffer> AbortableContext::createUnboundBuffer(
    void* ptr, size_t size) {
  return inner_->createUnboundBuffer(ptr, size);
}

void AbortableContext::FailAllPairs() {
  absl::MutexLock lock(&mu_);
  for (int r = 0; r < size; ++r) {
    auto& pair = inner_->getPair(r);
    if (pair == nullptr) continue;
    // tcp::Pair::close(): SO_LINGER 0 and close(2) under the pair mutex;
    // the event loop forgets the socket, the peer gets a reset.
    pair->close();
    // tcp::Pair::setSync() on a closed pair: waitUntilConnected returns at
    // once (CLOSED > CONNECTED), then signalAndThrowException("Socket
    // unexpectedly closed") stores the exception and signals every buffer
    // pending on the pair. If the pair had already failed, it rethrows that
    // earlier exception instead. Either way it throws, by design.
    try {
      pair->setSync(true, false);
    } catch (const std::exception&) {
    }
  }
}

std::shared_ptr<AbortableTcpDevice> AbortableTcpDevice::Create(
    const ::gloo::transport::tcp::attr& attr, std::chrono::milliseconds pair_timeout) {
  return std::make_shared<AbortableTcpDevice>(::gloo::transport::tcp::CreateDeviceAttr(attr),
                                              pair_timeout);
}

std::shared_ptr<::gloo::transport::Context> AbortableTcpDevice::createContext(int rank, int size) {
  std::shared_ptr<::gloo::transport::Context> inner =
      ::gloo::transport::tcp::Device::createContext(rank, size);
  // Pairs copy the inner context's timeout when they are created.
  inner->setTimeout(pair_timeout_);
  auto context = std::make_shared<AbortableContext>(std::move(inner));
  absl::MutexLock lock(&mu_);
  std::erase_if(contexts_, [](const auto& weak) { return weak.expired(); });
  contexts_.push_back(context);
  return context;
}

void AbortableTcpDevice::FailAll() {
  std::vector<std::shared_ptr<AbortableContext>> live;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& weak : contexts_) {
      if (auto context = weak.lock()) live.push_back(std::move(context));
    }
  }
  for (const auto& context : live) context->FailAllPairs();
}

}  // namespace tagi::gloo_internal
