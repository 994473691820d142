// The model spec in and out of its proto form (tagi.v1.Layer / Network).
//
// Two forms of a layer are read: the per-kind oneof ({"linear": {...}})
// and the first format (`kind` with in_features / out_features /
// negative_slope beside it). The first format is migrated here and nowhere
// else, by one rule: LINEAR takes its two widths, LEAKY_RELU its slope
// (0.1 when unset), the other activations nothing; any other field it
// carries is an error, and so is a layer that mixes both forms. Only the
// oneof form is written.
//
// Pure functions; thread-safe.
#ifndef TAGI_SPEC_NETWORK_PROTO_H_
#define TAGI_SPEC_NETWORK_PROTO_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "spec/network.h"
#include "tagi/v1/job.pb.h"

namespace tagi::spec {

// The layers of a job or file; every problem of their form is appended to
// `problems` (the shapes are checked by CheckArchitecture afterwards).
std::vector<LayerSpec> LayersFromProto(
    const google::protobuf::RepeatedPtrField<tagi::v1::Layer>& layers,
    std::vector<std::string>* problems);

// InvalidArgument unless `head` names exactly one kind.
absl::StatusOr<HeadSpec> HeadFromProto(const tagi::v1::Head& head);

// A stored network (a model file's architecture): converted and validated.
absl::StatusOr<Architecture> ArchitectureFromProto(const tagi::v1::Network& network);
tagi::v1::Network ArchitectureToProto(const Architecture& arch);

}  // namespace tagi::spec

#endif  // TAGI_SPEC_NETWORK_PROTO_H_
