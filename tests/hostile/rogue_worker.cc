// A rogue rank for the hostile tests: the real worker runtime (it
// registers, joins the ring, passes the replica check like any worker),
// except that its contribution to every all-reduce carries a NaN, as a
// host with broken memory or a malicious one would send.
//   rogue_worker COORD_HOST:PORT
// Runs until killed (the test stops it).
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <utility>

#include "common/clock.h"
#include "worker/agent.h"
#include "worker/collective/collective.h"

namespace {

class PoisonedCollective final : public tagi::Collective {
 public:
  explicit PoisonedCollective(std::unique_ptr<tagi::Collective> inner)
      : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  absl::Status AllReduceSum(std::span<float> data, absl::Duration timeout) override {
    Poison(data);
    return inner_->AllReduceSum(data, timeout);
  }
  absl::Status AllReduceSumOnWire(std::span<float> data, tagi::WirePrecision wire,
                                  absl::Duration timeout) override {
    Poison(data);
    return inner_->AllReduceSumOnWire(data, wire, timeout);
  }
  absl::Status Broadcast(std::span<float> data, int root, absl::Duration timeout) override {
    return inner_->Broadcast(data, root, timeout);
  }
  absl::Status Barrier(absl::Duration timeout) override { return inner_->Barrier(timeout); }
  void Abort() override { inner_->Abort(); }

 private:
  static void Poison(std::span<float> data) {
    if (!data.empty()) data[0] = std::nanf("");
  }
  std::unique_ptr<tagi::Collective> inner_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: rogue_worker COORD_HOST:PORT\n");
    return 2;
  }
  tagi::AgentOptions opt;
  opt.coordinator = argv[1];
  opt.hostname = "rogue";
  opt.runner.host = "127.0.0.1";
  opt.runner.connect_timeout = absl::Seconds(20);
  opt.runner.collective_timeout = absl::Seconds(20);
  opt.runner.data_roots = {"/nonexistent"};  // it trains generated data only
  opt.runner.wrap_collective = [](std::unique_ptr<tagi::Collective> inner) {
    return std::unique_ptr<tagi::Collective>(new PoisonedCollective(std::move(inner)));
  };
  tagi::RealClock clock;
  tagi::Agent agent(opt, clock);
  return agent.Run();
}
