// The backward engine: runs the graph below `root` in reverse topological order. Each node runs
// once all gradients flowing into it have been summed; ties between ready nodes go to the node
// created last (highest sequence number), so gradients become ready in roughly the reverse
// order of the forward pass, which is the order DDP buckets are built in.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

// `grad_output` may be undefined only for a one-element root (it is then 1).
void run_backward(const Tensor& root, const Tensor& grad_output);

}  // namespace vitddp
