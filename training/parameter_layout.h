// The parameters of a model as named tensors laid out one after another in one flat fp32 buffer.
// The flat buffer is what optimizers, checkpoints and the reducer see; the tensor list is what the
// reducer buckets (in reverse order, the order backward produces gradients).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gradcomp {

struct ParameterTensor {
  std::string name;
  size_t offset = 0, size = 0;
  std::vector<size_t> shape;
  // Biases and norms: tiny, and compressing them costs more than it saves (the reducer's rule).
  bool oneDimensional() const { return shape.size() <= 1; }
};

class ParameterLayout {
 public:
  // Appends a tensor after the last one; returns its index.
  size_t add(std::string name, std::vector<size_t> shape) {
    size_t n = 1;
    for (size_t s : shape) n *= s;
    tensors_.push_back(ParameterTensor{std::move(name), total_, n, std::move(shape)});
    total_ += n;
    return tensors_.size() - 1;
  }
  const std::vector<ParameterTensor>& tensors() const { return tensors_; }
  const ParameterTensor& operator[](size_t i) const { return tensors_.at(i); }
  size_t size() const { return tensors_.size(); }
  size_t totalElements() const { return total_; }

 private:
  std::vector<ParameterTensor> tensors_;
  size_t total_ = 0;
};

}  // namespace gradcomp
