// Every differentiable op, for callers that want them all.
#pragma once

#include "framework/ops/attention.h"
#include "framework/ops/cast.h"
#include "framework/ops/cross_entropy.h"
#include "framework/ops/dropout.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/gelu.h"
#include "framework/ops/layer_norm.h"
#include "framework/ops/linear.h"
#include "framework/ops/patch_embed.h"
#include "framework/ops/reduce.h"
#include "framework/ops/shape_ops.h"
#include "framework/ops/softmax.h"
