// The CPU engine's layer factories (layer_registry.h): one registration
// function per layer file, and the registry they make.
#ifndef TAGI_WORKER_ENGINE_CPU_LAYERS_H_
#define TAGI_WORKER_ENGINE_CPU_LAYERS_H_

#include "worker/engine/layer.h"
#include "worker/engine/layer_registry.h"

namespace tagi::engine {

using CpuLayerRegistry = LayerRegistry<Layer>;

void RegisterLinearLayers(CpuLayerRegistry& r);      // linear.cc: LINEAR
void RegisterActivationLayers(CpuLayerRegistry& r);  // activation.cc: RELU ... MIXTURE_RELU
void RegisterHeadLayers(CpuLayerRegistry& r);        // head_layers.cc: REMAX, CLOSED_FORM_SOFTMAX, EVEN_EXP
void RegisterConv2dLayers(CpuLayerRegistry& r);      // conv2d.cc: CONV2D
void RegisterPoolLayers(CpuLayerRegistry& r);        // pool.cc: AVG_POOL2D, MAX_POOL2D
void RegisterNormLayers(CpuLayerRegistry& r);        // norm.cc: BATCH_NORM, LAYER_NORM

// Every CPU layer kind, registered once (model.cc); immutable.
const CpuLayerRegistry& CpuLayers();

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_CPU_LAYERS_H_
