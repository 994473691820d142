// Rng: a small, seedable, serialisable pseudo-random generator.
//
// xoshiro256** seeded through SplitMix64. It replaces the standard library
// engines and distributions because their outputs are implementation
// defined: the same seed must give the same model and the same data order
// on every rank, every build and every resumed run, and the whole state must
// fit in a snapshot (four 64-bit words).
//
// Not thread-safe: each owner (a model, a sampler) holds its own instance.
#ifndef TAGI_COMMON_RNG_H_
#define TAGI_COMMON_RNG_H_

#include <array>
#include <cstdint>

namespace tagi {

// SplitMix64 finaliser: a good 64-bit mixing function.
constexpr uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Derives an independent seed for a sub-stream, e.g. (job seed, epoch).
constexpr uint64_t DeriveSeed(uint64_t seed, uint64_t stream) {
  return Mix64(Mix64(seed) ^ Mix64(stream + 0x632be59bd9b4e019ULL));
}

class Rng {
 public:
  using State = std::array<uint64_t, 4>;

  explicit Rng(uint64_t seed) { Seed(seed); }

  void Seed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& word : s_) {
      x += 0x9e3779b97f4a7c15ULL;
      word = Mix64(x);
    }
  }

  uint64_t NextU64() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, n), n > 0, without modulo bias (Lemire's method).
  uint64_t Below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(NextU64()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(NextU64()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Standard normal draw (Box-Muller; one value per call, no cached second
  // value, so the state stays the four words above).
  double Normal();

  const State& state() const { return s_; }
  void set_state(const State& s) { s_ = s; }

 private:
  static constexpr uint64_t Rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
  }
  State s_{};
};

}  // namespace tagi

#endif  // TAGI_COMMON_RNG_H_
