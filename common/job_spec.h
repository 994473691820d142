// JobSpec parsing, defaults and validation: the one place that decides
// whether a job is well formed.
//
// ParseJobSpecJson accepts the proto3 JSON mapping of tagi.v1.JobSpec and
// refuses unknown fields. ValidateJobSpec checks the structure (layer kinds
// and sizes, head, batch, epochs, noise, init, device, data kind and
// augmentation) and
// returns ONE InvalidArgument status naming every wrong field and what was
// expected, joined by "; ". It does not touch the filesystem: the
// coordinator validates jobs whose data lives on other hosts. Workers check
// their data files with data::CheckDataFiles.
//
// The accessors below apply the documented defaults of unset fields.
// Everything here is a pure function; thread-safe.
#ifndef TAGI_COMMON_JOB_SPEC_H_
#define TAGI_COMMON_JOB_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "spec/network.h"
#include "tagi/v1/job.pb.h"

namespace tagi {

// Largest job file accepted (bytes).
inline constexpr size_t kMaxJobSpecBytes = 1 << 20;
// Limits that keep a hostile spec from asking for absurd allocations.
// (The network's own limits are the model spec's: spec/network.h.)
inline constexpr int kMaxLayers = spec::kMaxLayers;
inline constexpr uint32_t kMaxLayerWidth = spec::kMaxLayerWidth;
inline constexpr uint64_t kMaxParameters = spec::kMaxParameters;
inline constexpr uint32_t kMaxBatchSize = 1 << 16;
inline constexpr uint32_t kMaxWorldSize = 4096;
// The most memory one rank's model may take (parameters, deltas, state,
// derived buffers and the batch arena of its plan, as floats), so that a
// hostile or mistaken job is refused at submission instead of failing an
// allocation on every worker it reaches.
inline constexpr uint64_t kMaxModelBytes = uint64_t{64} << 30;
// Free text in a job, which every API client is shown: the name at most
// kMaxJobNameBytes, each data path at most kMaxDataPathBytes, both valid
// UTF-8 without control characters (C0, DEL, C1) or bidirectional
// overrides, so that a listing stays small and a terminal shows it as
// written.
inline constexpr size_t kMaxJobNameBytes = 256;
inline constexpr size_t kMaxDataPathBytes = 1024;
// Epochs of one job: each finished epoch adds a metrics record to the job.
inline constexpr uint32_t kMaxEpochs = 100000;
// Per-epoch metrics a job keeps and a progress report carries: the newest
// this many (JobProgress.epochs). Every report and every saved record
// would otherwise grow with the epochs: at 25,000 two-step epochs a
// coordinator spent a core merging and rewriting megabytes per epoch.
inline constexpr int kMaxEpochHistory = 1000;
// Samples of a generated (TOY_CUBIC) split: 10 M, 80 MB of floats per worker.
inline constexpr uint32_t kMaxToySamples = 10'000'000;
// The largest model file or snapshot the coordinator accepts by default
// (CoordinatorOptions::max_model_bytes, max_snapshot_bytes): a network
// whose parameters (mean and variance, 8 bytes each) and state would not
// fit is refused at validation, since it could never deliver its model.
inline constexpr uint64_t kMaxUploadBytes = uint64_t{1} << 31;
// Room kept in an upload for everything but the parameter and state
// arrays (headers, architecture, standardiser, checksums).
inline constexpr uint64_t kUploadOverheadBytes = uint64_t{2} << 20;
// The most zero padding a random crop may add on each side
// (data.augment.random_crop_padding; also at most the image's height and
// width).
inline constexpr uint32_t kMaxCropPadding = 16;

absl::StatusOr<tagi::v1::JobSpec> ParseJobSpecJson(const std::string& json);
absl::StatusOr<tagi::v1::JobSpec> LoadJobSpecFile(const std::string& path);
std::string JobSpecToJson(const tagi::v1::JobSpec& spec);

absl::Status ValidateJobSpec(const tagi::v1::JobSpec& spec);

// `text` with the job file's field names as the file writes them (its JSON
// names: "layers[2].in_features" -> "layers[2].inFeatures"); a word that is
// part of a path ("/data/train_images.gz") is left alone. ValidateJobSpec's
// messages are written so; the workers' messages about a job go through it.
std::string JobFileFieldNames(absl::string_view text);

// The all-reduce bucket of a job (JobSpec.bucket_kib): this many KiB when
// it sets none (measured on the multi-host test bed; docs/overlap.md).
inline constexpr uint32_t kDefaultBucketKib = 4096;
uint64_t BucketBytes(const tagi::v1::JobSpec& spec);
// KiB of deltas (mu and var, fp32) a step of `num_parameters` reduces,
// rounded up: the largest bucket_kib a job may set.
uint64_t DeltaArenaKib(uint64_t num_parameters);

// OK when the job's model file and snapshots, at 8 bytes per parameter and
// 4 per state value plus kUploadOverheadBytes, fit in max_upload_bytes;
// InvalidArgument naming the parameter count, the size needed, the limit
// and the largest parameter count that fits otherwise. (ValidateJobSpec
// applies it with kMaxUploadBytes; a coordinator with smaller upload limits
// applies its own.) OK for a network that does not build: ValidateJobSpec
// reports that.
absl::Status CheckModelUploadable(const tagi::v1::JobSpec& spec, uint64_t max_upload_bytes);

// OK for text users may give a job (see kMaxJobNameBytes); otherwise
// InvalidArgument naming `field`, the problem and its byte offset.
absl::Status CheckJobText(const std::string& field, const std::string& text, size_t max_bytes);

// The network a job describes: its layers (either layer form, migrated by
// spec/network_proto.h), its input shape (`input`, or 3x32x32 for CIFAR10
// data, or flat and as wide as the data, or, when only the files know the
// width, the first LINEAR's in_features) and its head, checked by the model spec's rules (the same
// code the engines and model files use). InvalidArgument naming every
// problem of the network.
absl::StatusOr<spec::Architecture> JobArchitecture(const tagi::v1::JobSpec& spec);

// Width the data feeds into the first layer, when the data kind fixes it
// (784 for the IDX image sets, 3072 for CIFAR10, 1 for the toy); 0 when
// only the files know.
int ExpectedInputWidth(const tagi::v1::DataSpec& data);
// Width the head needs from the last layer (0 when the head is
// missing or does not fit the data kind, or when its class or target count
// is out of range).
int ExpectedOutputWidth(const tagi::v1::JobSpec& spec);

// sigma_v at a 0-based epoch: max(sigma_v * decay^epoch, sigma_v_min).
float SigmaVAtEpoch(const tagi::v1::NoiseSchedule& noise, uint64_t epoch);

bool IsSumReduction(const tagi::v1::JobSpec& spec);
// An elastic job: min_world_size or max_world_size set (see job.proto).
bool IsElastic(const tagi::v1::JobSpec& spec);
float InitGainWeight(const tagi::v1::Init& init);   // default 1
float InitGainBias(const tagi::v1::Init& init);     // default 1
bool StandardizeData(const tagi::v1::DataSpec& data);  // default true
uint32_t TargetColumns(const tagi::v1::DataSpec& data);  // default 1

// Parses "cpu" (or "") and "cuda:N". Returns the CUDA ordinal, or -1 for cpu.
absl::StatusOr<int> ParseDevice(const std::string& device);

}  // namespace tagi

#endif  // TAGI_COMMON_JOB_SPEC_H_
