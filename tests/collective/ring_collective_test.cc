// The ring backend with its ranks as threads of this process, on
// 127.0.0.1, rendezvousing through one InMemoryStore scoped per test.
#include "worker/collective/tcp/ring_collective.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/collective/rank_threads.h"
#include "worker/collective/tcp/socket.h"
#include "worker/collective/tcp/wire.h"

namespace tagi {
namespace {

using ring_internal::Fd;
using testing::RunRanks;
using testing::Timed;

constexpr absl::Duration kLong = absl::Seconds(20);
// A failure that is not a timeout must be reported well before kLong.
constexpr absl::Duration kPrompt = absl::Seconds(10);

using Members = std::vector<std::unique_ptr<Collective>>;

class RingTest : public ::testing::Test {
 protected:
  RingTest()
      : store_(std::string("test/") +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/",
               base_) {}

  // Connects `world` ranks (each on its own thread) under `scope`; fails
  // the test unless all of them connect.
  Members Connect(int world, const std::string& scope = "") {
    PrefixStore store(scope, store_);
    std::vector<absl::StatusOr<std::unique_ptr<Collective>>> made(static_cast<size_t>(world));
    RingOptions options;
    options.connect_timeout = absl::Seconds(10);
    RunRanks(world, [&](int r) { made[r] = CreateRingCollective(store, r, world, options); });
    Members members;
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(made[r].ok()) << made[r].status();
      if (made[r].ok()) members.push_back(std::move(*made[r]));
    }
    return members;
  }

  InMemoryStore base_;
  PrefixStore store_;
};

// Integer-valued inputs: every summation order gives exact results.
float Input(int rank, size_t i) { return static_cast<float>(i % 97) + 1000.0f * rank; }

void ExpectAllReduceSums(Members& members, size_t n) {
  const int world = static_cast<int>(members.size());
  std::vector<std::vector<float>> data(members.size(), std::vector<float>(n));
  std::vector<absl::Status> status(members.size());
  RunRanks(world, [&](int r) {
    for (size_t i = 0; i < n; ++i) data[r][i] = Input(r, i);
    status[r] = members[r]->AllReduceSum(data[r], kLong);
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(status[r].ok()) << "n=" << n << ": " << status[r];
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) {
      float want = 0.0f;
      for (int q = 0; q < world; ++q) want += Input(q, i);
      if (data[r][i] != want) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << "rank " << r << " of " << world << ", n=" << n;
    EXPECT_EQ(data[r], data[0]) << "ranks disagree, n=" << n;
  }
}

TEST_F(RingTest, AllReduceSumsTwoThreeAndFourRanksSmallOddAndLargeBuffers) {
  for (int world : {2, 3, 4}) {
    Members members = Connect(world, absl::StrCat("world", world, "/"));
    ASSERT_EQ(members.size(), static_cast<size_t>(world));
    EXPECT_EQ(members[world - 1]->rank(), world - 1);
    EXPECT_EQ(members[0]->world(), world);
    for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{1001}, size_t{179423},
                     size_t{1} << 20 /* 4 MiB */}) {
      ExpectAllReduceSums(members, n);
    }
  }
}

// Inexact sums: the order of additions matters, yet every rank must end
// with the same bits (and, with two ranks, exactly a + b).
TEST_F(RingTest, RanksAgreeBitForBitOnInexactSums) {
  for (int world : {2, 3, 4}) {
    Members members = Connect(world, absl::StrCat("world", world, "/"));
    ASSERT_EQ(members.size(), static_cast<size_t>(world));
    const size_t n = 100003;
    auto value = [](int r, size_t i) { return std::sin(0.37f * i + r) / (1.0f + r * 3.0f); };
    std::vector<std::vector<float>> data(members.size(), std::vector<float>(n));
    std::vector<absl::Status> status(members.size());
    RunRanks(world, [&](int r) {
      for (size_t i = 0; i < n; ++i) data[r][i] = value(r, i);
      status[r] = members[r]->AllReduceSum(data[r], kLong);
    });
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(status[r].ok()) << status[r];
      EXPECT_EQ(0, std::memcmp(data[r].data(), data[0].data(), n * sizeof(float)))
          << "rank " << r << " of " << world;
    }
    if (world == 2) {
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += data[0][i] != value(0, i) + value(1, i);
      EXPECT_EQ(wrong, 0u);
    }
  }
}

// 16-bit wires: every rank ends with the same bits, within the format's
// rounding of the exact sum (each element is rounded once per hop and once
// at the end, and added in float); a NaN reaches every rank's sum; a rank
// on another wire format is refused from the call header.
TEST_F(RingTest, SixteenBitWiresAgreeBitForBitWithinTheirRounding) {
  for (const auto wire : {WirePrecision::kBf16, WirePrecision::kFp16}) {
    for (int world : {2, 3, 4}) {
      SCOPED_TRACE(absl::StrCat(WirePrecisionName(wire), " world ", world));
      Members members =
          Connect(world, absl::StrCat(WirePrecisionName(wire), "/world", world, "/"));
      ASSERT_EQ(members.size(), static_cast<size_t>(world));
      const size_t n = 100003;
      // Magnitudes over six decades, both signs.
      auto value = [](int r, size_t i) {
        return std::sin(0.37f * i + r) * std::pow(10.0f, static_cast<float>(i % 7) - 6.0f);
      };
      std::vector<std::vector<float>> data(members.size(), std::vector<float>(n));
      std::vector<absl::Status> status(members.size());
      RunRanks(world, [&](int r) {
        for (size_t i = 0; i < n; ++i) data[r][i] = value(r, i);
        status[r] = members[r]->AllReduceSumOnWire(data[r], wire, kLong);
      });
      // Relative error of one rounding, and world of them in a row.
      const double unit = wire == WirePrecision::kBf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      size_t outside = 0;
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(status[r].ok()) << status[r];
        EXPECT_EQ(0, std::memcmp(data[r].data(), data[0].data(), n * sizeof(float))) << r;
      }
      for (size_t i = 0; i < n; ++i) {
        double exact = 0.0, magnitude = 0.0;
        for (int r = 0; r < world; ++r) {
          exact += value(r, i);
          magnitude += std::abs(value(r, i));
        }
        // FP16's scale follows the largest value (1e0), so values of 1e-6
        // sit near its subnormals: allow their absolute floor as well.
        const double floor = wire == WirePrecision::kFp16 ? world * std::ldexp(1.0, -24) : 0.0;
        if (std::abs(data[0][i] - exact) > world * unit * magnitude + floor) ++outside;
      }
      EXPECT_EQ(outside, 0u);
    }
  }
}

TEST_F(RingTest, SixteenBitWiresCarryANaNAndRefuseAnotherFormat) {
  Members members = Connect(3);
  ASSERT_EQ(members.size(), 3u);
  for (const auto wire : {WirePrecision::kBf16, WirePrecision::kFp16}) {
    std::vector<std::vector<float>> data(3, std::vector<float>(100, 1.0f));
    data[1][42] = std::nanf("");
    std::vector<absl::Status> status(3);
    RunRanks(3, [&](int r) { status[r] = members[r]->AllReduceSumOnWire(data[r], wire, kLong); });
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(status[r].ok()) << status[r];
      EXPECT_TRUE(std::isnan(data[r][42])) << r;
      EXPECT_EQ(data[r][0], 3.0f);
    }
  }
  Members mixed = Connect(2, "mixed/");
  ASSERT_EQ(mixed.size(), 2u);
  std::vector<std::vector<float>> data(2, std::vector<float>(64, 1.0f));
  std::vector<absl::Status> status(2);
  const absl::Time start = absl::Now();
  RunRanks(2, [&](int r) {
    status[r] = mixed[r]->AllReduceSumOnWire(
        data[r], r == 0 ? WirePrecision::kBf16 : WirePrecision::kFp32, kLong);
  });
  EXPECT_LT(absl::Now() - start, kPrompt);
  EXPECT_FALSE(status[0].ok() || status[1].ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(status[0]) || absl::IsFailedPrecondition(status[1]))
      << status[0] << " / " << status[1];
  const std::string why = std::string(status[0].message()) + std::string(status[1].message());
  EXPECT_NE(why.find("wire format"), std::string::npos) << why;
}

TEST_F(RingTest, BroadcastCopiesEachRootToEveryRank) {
  for (int world : {2, 3, 4}) {
    Members members = Connect(world, absl::StrCat("world", world, "/"));
    ASSERT_EQ(members.size(), static_cast<size_t>(world));
    for (size_t n : {size_t{1}, size_t{1001}, size_t{1} << 20}) {
      for (int root = 0; root < world; ++root) {
        std::vector<std::vector<float>> data(members.size(), std::vector<float>(n));
        std::vector<absl::Status> status(members.size());
        RunRanks(world, [&](int r) {
          for (size_t i = 0; i < n; ++i) data[r][i] = Input(r, i);
          status[r] = members[r]->Broadcast(data[r], root, kLong);
        });
        for (int r = 0; r < world; ++r) {
          ASSERT_TRUE(status[r].ok()) << status[r];
          EXPECT_EQ(data[r], data[root]) << "rank " << r << " of " << world << ", root " << root;
          EXPECT_EQ(data[r][n - 1], Input(root, n - 1));
        }
      }
    }
  }
}

TEST_F(RingTest, BarrierAndEmptyBuffersComplete) {
  Members members = Connect(3);
  ASSERT_EQ(members.size(), 3u);
  std::vector<absl::Status> status(9);
  RunRanks(3, [&](int r) {
    status[3 * r] = members[r]->Barrier(kLong);
    status[3 * r + 1] = members[r]->AllReduceSum({}, kLong);
    status[3 * r + 2] = members[r]->Broadcast({}, 0, kLong);
  });
  for (const auto& st : status) EXPECT_TRUE(st.ok()) << st;
  ExpectAllReduceSums(members, 3);  // still in step after the empty calls
}

// Rank 1's neighbours (0 and 2) may both be there, but the barrier must
// still wait for everyone: without rank 2 nobody passes.
TEST_F(RingTest, BarrierDoesNotPassWhileARankIsMissing) {
  Members members = Connect(3);
  ASSERT_EQ(members.size(), 3u);
  std::vector<absl::Status> status(2);
  RunRanks(2, [&](int r) { status[r] = members[r]->Barrier(absl::Milliseconds(300)); });
  for (int r = 0; r < 2; ++r) EXPECT_FALSE(status[r].ok()) << "rank " << r;
}

TEST_F(RingTest, PeerThatNeverCallsGivesDeadlineExceededThenStickyAborted) {
  Members members = Connect(2);
  ASSERT_EQ(members.size(), 2u);
  std::vector<float> v(16, 1.0f);
  absl::Status st;
  const absl::Duration took =
      Timed([&] { st = members[0]->AllReduceSum(v, absl::Milliseconds(300)); });
  EXPECT_TRUE(absl::IsDeadlineExceeded(st)) << st;
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_TRUE(absl::IsAborted(members[0]->AllReduceSum(v, kLong)));
  EXPECT_TRUE(absl::IsAborted(members[0]->Broadcast(v, 0, kLong)));
  EXPECT_TRUE(absl::IsAborted(members[0]->Barrier(kLong)));
  // The rank that timed out shut its links down: the late peer fails at
  // once instead of waiting for its own timeout.
  absl::Status late;
  EXPECT_LT(Timed([&] { late = members[1]->AllReduceSum(v, kLong); }), kPrompt);
  EXPECT_TRUE(absl::IsAborted(late)) << late;
  EXPECT_TRUE(absl::IsAborted(members[1]->Barrier(kLong)));
}

TEST_F(RingTest, DestroyedPeerFailsTheOthersBeforeTheirTimeout) {
  for (int world : {2, 3}) {
    Members members = Connect(world, absl::StrCat("world", world, "/"));
    ASSERT_EQ(members.size(), static_cast<size_t>(world));
    ExpectAllReduceSums(members, 100);
    std::vector<absl::Status> status(world - 1);
    std::vector<absl::Duration> took(world - 1);
    std::thread survivors([&] {
      RunRanks(world - 1, [&](int r) {
        std::vector<float> v(1 << 20, 1.0f);
        took[r] = Timed([&] { status[r] = members[r]->AllReduceSum(v, kLong); });
      });
    });
    members[world - 1].reset();  // mid-way: before or while the others wait
    survivors.join();
    int named = 0;
    for (int r = 0; r + 1 < world; ++r) {
      EXPECT_TRUE(absl::IsAborted(status[r]) || absl::IsUnavailable(status[r])) << status[r];
      EXPECT_LT(took[r], kPrompt);
      // A survivor that saw the link close names the rank that closed it.
      if (const auto peer = PeerRankOf(status[r]); peer.has_value()) {
        EXPECT_EQ(*peer, world - 1) << status[r];
        ++named;
      }
    }
    EXPECT_GT(named, 0) << "no survivor named the destroyed rank";
  }
}

TEST_F(RingTest, AbortFromAnotherThreadEndsTheCallAndReachesThePeer) {
  Members members = Connect(2);
  ASSERT_EQ(members.size(), 2u);
  absl::Notification calling;
  absl::Status st;
  absl::Duration took;
  std::thread blocked([&] {
    std::vector<float> v(1000, 1.0f);
    calling.Notify();
    took = Timed([&] { st = members[0]->AllReduceSum(v, kLong); });
  });
  calling.WaitForNotification();
  members[0]->Abort();
  blocked.join();
  EXPECT_TRUE(absl::IsAborted(st)) << st;
  EXPECT_LT(took, kPrompt);
  EXPECT_TRUE(absl::IsAborted(members[0]->Barrier(kLong)));
  // The peer's matching call gets whatever rank 0 sent before the abort,
  // then the end of the link.
  absl::Status peer;
  std::vector<float> v(1000, 1.0f);
  EXPECT_LT(Timed([&] { peer = members[1]->AllReduceSum(v, kLong); }), kPrompt);
  EXPECT_TRUE(absl::IsAborted(peer)) << peer;
}

TEST_F(RingTest, AbortOfAnIdleRankUnblocksThePeersWaitingForIt) {
  Members members = Connect(3);
  ASSERT_EQ(members.size(), 3u);
  std::vector<absl::Status> status(2);
  std::vector<absl::Duration> took(2);
  absl::Notification started;
  std::thread waiting([&] {
    started.Notify();
    RunRanks(2, [&](int r) {
      std::vector<float> v(64, 1.0f);
      took[r] = Timed([&] { status[r] = members[r]->AllReduceSum(v, kLong); });
    });
  });
  started.WaitForNotification();
  members[2]->Abort();
  waiting.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(absl::IsAborted(status[r])) << "rank " << r << ": " << status[r];
    EXPECT_LT(took[r], kPrompt);
  }
}

// Hostile input: a predecessor whose call differs (size, kind or root) is
// refused from the call header, never read as payload.
TEST_F(RingTest, MismatchedCallsFailInsteadOfMixingData) {
  Members members = Connect(2);
  ASSERT_EQ(members.size(), 2u);
  std::vector<absl::Status> status(2);
  std::vector<std::vector<float>> data = {std::vector<float>(10), std::vector<float>(20)};
  RunRanks(2, [&](int r) { status[r] = members[r]->AllReduceSum(data[r], kLong); });
  EXPECT_TRUE(absl::IsFailedPrecondition(status[0]) || absl::IsFailedPrecondition(status[1]))
      << status[0] << " / " << status[1];
  EXPECT_FALSE(status[0].ok() || status[1].ok());
  for (int r = 0; r < 2; ++r) {  // out of step: the predecessor is named
    if (absl::IsFailedPrecondition(status[r])) EXPECT_EQ(PeerRankOf(status[r]), 1 - r);
  }

  Members again = Connect(2, "again/");
  ASSERT_EQ(again.size(), 2u);
  RunRanks(2, [&](int r) {
    status[r] =
        r == 0 ? again[r]->AllReduceSum(data[0], kLong) : again[r]->Broadcast(data[0], 0, kLong);
  });
  EXPECT_FALSE(status[0].ok() || status[1].ok());
}

TEST_F(RingTest, RendezvousWithAMissingRankFailsWithinConnectTimeout) {
  RingOptions options;
  options.connect_timeout = absl::Milliseconds(500);
  std::vector<absl::Status> status(2);
  std::vector<absl::Duration> took(2);
  RunRanks(2, [&](int r) {  // rank 2 of 3 never comes
    took[r] = Timed([&] { status[r] = CreateRingCollective(store_, r, 3, options).status(); });
  });
  // Rank 1 waits for rank 2's address. Rank 0 waits for rank 2's
  // connection, but rank 1, giving up at the same moment, may drop rank
  // 0's pending hello first: then rank 0 reports the lost successor.
  EXPECT_TRUE(absl::IsDeadlineExceeded(status[1])) << status[1];
  EXPECT_TRUE(absl::IsDeadlineExceeded(status[0]) || absl::IsUnavailable(status[0])) << status[0];
  for (int r = 0; r < 2; ++r) {
    EXPECT_GE(took[r], absl::Milliseconds(450));
    EXPECT_LT(took[r], absl::Seconds(5));
  }
}

TEST_F(RingTest, RendezvousWithAMissingFirstRankFailsWithinConnectTimeout) {
  RingOptions options;
  options.connect_timeout = absl::Milliseconds(300);
  absl::Status st;
  const absl::Duration took =
      Timed([&] { st = CreateRingCollective(store_, 1, 2, options).status(); });
  EXPECT_TRUE(absl::IsDeadlineExceeded(st)) << st;  // waiting for rank 0's group id
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(5));
}

// A raw TCP connection to 127.0.0.1:port (blocking); invalid on failure.
Fd RawConnect(const std::string& address) {
  std::string host;
  uint16_t port = 0;
  if (!ring_internal::ParseHostPort(address, &host, &port).ok()) return Fd();
  Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return Fd();
  return fd;
}

// Whether the peer closes `fd` within `timeout` (EOF or reset).
bool ClosedByPeer(int fd, absl::Duration timeout) {
  pollfd p = {fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) return false;
  char c;
  return ::recv(fd, &c, 1, 0) <= 0;
}

TEST_F(RingTest, StrayConnectionsDoNotBreakTheGroup) {
  // Rank 1 listens first; the strays reach its listener before rank 0
  // (its predecessor) has even started.
  absl::StatusOr<std::unique_ptr<Collective>> one;
  std::thread rank1([&] { one = CreateRingCollective(store_, 1, 2, {}); });
  auto address = store_.Get("ring/addr/1", kLong);
  ASSERT_TRUE(address.ok()) << address.status();
  Fd garbage = RawConnect(*address);
  Fd silent = RawConnect(*address);
  Fd impostor = RawConnect(*address);
  ASSERT_TRUE(garbage.valid() && silent.valid() && impostor.valid());
  const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n and some more bytes";
  ASSERT_GT(::send(garbage.get(), junk.data(), junk.size(), MSG_NOSIGNAL), 0);
  // Well-formed, but for another group.
  const auto hello = ring_internal::Hello{ring_internal::Hello::kConnect, 0, 2, 12345}.Encode();
  ASSERT_GT(::send(impostor.get(), hello.data(), hello.size(), MSG_NOSIGNAL), 0);

  absl::StatusOr<std::unique_ptr<Collective>> zero = CreateRingCollective(store_, 0, 2, {});
  rank1.join();
  ASSERT_TRUE(zero.ok()) << zero.status();
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(ClosedByPeer(garbage.get(), kPrompt));
  EXPECT_TRUE(ClosedByPeer(impostor.get(), kPrompt));
  EXPECT_TRUE(ClosedByPeer(silent.get(), kPrompt));
  EXPECT_FALSE(RawConnect(*address).valid()) << "the listener should be closed";
  Members members;
  members.push_back(std::move(*zero));
  members.push_back(std::move(*one));
  ExpectAllReduceSums(members, 1001);
}

// Rank 0 of 3: its successor (played here) accepts its hello, then gives
// up and closes the link, while its predecessor (rank 2) never comes.
// Rank 0 learns at once instead of waiting out its connect timeout.
TEST_F(RingTest, ASuccessorThatGivesUpAfterItsAcceptEndsTheWaitForThePredecessor) {
  Fd listener(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener.get(), 4), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ASSERT_TRUE(store_.Set("ring/addr/1", absl::StrCat("127.0.0.1:", ntohs(addr.sin_port))).ok());
  std::thread successor([&] {
    Fd link(::accept(listener.get(), nullptr, nullptr));
    ring_internal::Hello::Bytes hello{};
    if (::recv(link.get(), hello.data(), hello.size(), MSG_WAITALL) != 32) return;
    auto group = store_.Get("ring/group", kLong);
    uint64_t id = 0;
    if (!group.ok() || !absl::SimpleAtoi(*group, &id)) return;
    const auto accept = ring_internal::Hello{ring_internal::Hello::kAccept, 1, 3, id}.Encode();
    ::send(link.get(), accept.data(), accept.size(), MSG_NOSIGNAL);
    absl::SleepFor(absl::Milliseconds(200));  // rank 0 now waits for rank 2
  });  // the link closes here
  RingOptions options;
  options.connect_timeout = absl::Seconds(20);
  absl::Status st;
  const absl::Duration took =
      Timed([&] { st = CreateRingCollective(store_, 0, 3, options).status(); });
  successor.join();
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("closed its link"));
  EXPECT_LT(took, absl::Seconds(5));
}

// What a worker advertises when not told (--host unset): the address of
// the interface that routes to the coordinator; bad addresses are refused
// with the reason.
TEST(LocalAddressTowards, FindsTheRoutingInterfaceAndRefusesBadAddresses) {
  auto loop = ring_internal::LocalAddressTowards("127.0.0.1:7070");
  ASSERT_TRUE(loop.ok()) << loop.status();
  EXPECT_EQ(*loop, "127.0.0.1");
  auto other = ring_internal::LocalAddressTowards("127.0.0.5:1");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->rfind("127.", 0), 0u) << *other;
  for (const char* bad : {"nohostport", "127.0.0.1:0", "127.0.0.1:99999", "no-such-host.invalid:7"}) {
    EXPECT_EQ(ring_internal::LocalAddressTowards(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST_F(RingTest, BadArgumentsAreInvalidArgument) {
  EXPECT_TRUE(absl::IsInvalidArgument(CreateRingCollective(store_, 2, 2, {}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(CreateRingCollective(store_, 0, 0, {}).status()));
  RingOptions no_host;
  no_host.hostname = "";
  EXPECT_TRUE(absl::IsInvalidArgument(CreateRingCollective(store_, 0, 1, no_host).status()));
  RingOptions bad_host;
  bad_host.hostname = "256.1.1.1";
  EXPECT_TRUE(absl::IsInvalidArgument(CreateRingCollective(store_, 0, 2, bad_host).status()));
  RingOptions no_time;
  no_time.connect_timeout = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(CreateRingCollective(store_, 0, 1, no_time).status()));
}

TEST_F(RingTest, SingleRankAndBadBroadcastRoot) {
  Members members = Connect(1);
  ASSERT_EQ(members.size(), 1u);
  std::vector<float> v = {3.0f, 4.0f};
  ASSERT_TRUE(members[0]->AllReduceSum(v, kLong).ok());
  EXPECT_EQ(v, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_TRUE(members[0]->Broadcast(v, 0, kLong).ok());
  EXPECT_TRUE(members[0]->Barrier(kLong).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(members[0]->Broadcast(v, 1, kLong)));
  EXPECT_TRUE(absl::IsAborted(members[0]->AllReduceSum(v, kLong)));
}

}  // namespace
}  // namespace tagi
