// Eigen::Map aliases over contiguous row-major buffers, for the CPU kernels' matrix products.
#pragma once

#include <Eigen/Core>
#include <cstdint>

namespace vitddp::cpu {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MatMap = Eigen::Map<RowMat<T>>;
template <typename T>
using ConstMatMap = Eigen::Map<const RowMat<T>>;
template <typename T>
using VecMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstVecMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;

}  // namespace vitddp::cpu
