// The state between the two phases of an atomic wave, and synchronous
// SGD's averaging of it.
//
// An atomic wave first computes every replica's update, writing nothing,
// then commits the replicas it chose or discards the wave. Between the
// phases the runtime keeps, per replica, the wave's feeds and the tensors
// the commit is fed (the last fetches of each replica's call); synchronous
// SGD replaces those tensors by their mean over the replicas first.
//
// Plain C++: no TensorFlow, no Python. KeptWave is a template over the
// feed and tensor types; the wave runner uses host_tensor.h's HostTensor
// and the session's tensors (tf_adapter.h's FetchedTensor), the tests
// types of their own.
#ifndef TENSORBOW_CC_RUNTIME_WAVE_H_
#define TENSORBOW_CC_RUNTIME_WAVE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "cc/runtime/status.h"

namespace tensorbow {
namespace runtime {

// The TF_DataType values of the averaged dtypes.
constexpr int kTfFloat = 1;   // TF_FLOAT
constexpr int kTfDouble = 2;  // TF_DOUBLE

// Whether KeptWave::Average averages tensors of TF_DataType `dtype`
// (float32 and float64); tensors of any other dtype must be equal across
// the replicas.
bool IsAveraged(int dtype);

// sum[i] += weight * data[i] for i < sum->size(); `data` holds that many
// elements of an averaged dtype.
void AddWeighted(int dtype, const void* data, double weight,
                 std::vector<double>* sum);

// out[i] = sum[i], rounded to `dtype` (an averaged dtype).
void StoreSum(int dtype, const std::vector<double>& sum, void* out);

// Bytes of one element of an averaged dtype.
size_t AveragedElementSize(int dtype);

// What a computed wave keeps for its commit. Tensor needs dtype(), dims(),
// data(), nbytes(), move assignment and a static Allocate(dtype, dims).
template <typename Feed, typename Tensor>
class KeptWave {
 public:
  // Replicas of the kept wave; 0 if none is kept.
  size_t replicas() const { return tensors_.size(); }

  // Keeps `feeds` (per replica) and the last `internal` of each replica's
  // `outputs`, which leave `outputs`; forgets what was kept before.
  void Keep(std::vector<std::vector<Feed>> feeds,
            std::vector<std::vector<Tensor>>* outputs, size_t internal) {
    Discard();
    feeds_ = std::move(feeds);
    tensors_.resize(outputs->size());
    for (size_t r = 0; r < outputs->size(); ++r) {
      std::vector<Tensor>& out = (*outputs)[r];
      const size_t first = out.size() - internal;
      for (size_t i = first; i < out.size(); ++i) {
        tensors_[r].push_back(std::move(out[i]));
      }
      out.resize(first);
    }
  }

  // OK if a commit with `commit_flags` flags (one per replica) and, unless
  // `by_group`, `calls` calls (one per replica) fits the kept wave.
  Status CheckCommit(size_t commit_flags, bool by_group, size_t calls) const {
    if (tensors_.empty() || commit_flags != tensors_.size() || calls == 0 ||
        (!by_group && calls != tensors_.size())) {
      return Status(kInvalidArgument,
                    "TensorBow: Commit needs a computed wave");
    }
    return Status::Ok();
  }

  // Hands the kept feeds to the commit; the tensors stay until Discard.
  std::vector<std::vector<Feed>> TakeFeeds() { return std::move(feeds_); }

  // Per replica, its kept tensors, in the order its call fetched them.
  std::vector<std::vector<const Tensor*>> Tensors() const {
    std::vector<std::vector<const Tensor*>> out(tensors_.size());
    for (size_t r = 0; r < tensors_.size(); ++r) {
      for (const Tensor& t : tensors_[r]) out[r].push_back(&t);
    }
    return out;
  }

  // Synchronous SGD: every float32 or float64 tensor kept becomes, for
  // every replica, the mean over the replicas weighted by `weights` (one
  // per replica, summing to 1), summed in double and stored in a tensor of
  // its own. Tensors of other dtypes must be equal across the replicas.
  Status Average(const std::vector<double>& weights) {
    std::vector<std::vector<double>> sums;
    Status s = Sums(weights, &sums);
    if (!s.ok()) return s;
    return Replace(sums);
  }

  // Per float32 or float64 tensor kept (in the order of Tensors()), the
  // sum over the replicas weighted by `weights` (one per replica), in
  // double: synchronous SGD's share of a worker, to be summed with the
  // other workers'. Tensors of other dtypes must be equal across the
  // replicas.
  Status Sums(const std::vector<double>& weights,
              std::vector<std::vector<double>>* sums) const {
    if (tensors_.empty() || weights.size() != tensors_.size()) {
      return Status(kInvalidArgument,
                    "TensorBow: AverageKept needs a computed wave");
    }
    sums->clear();
    for (size_t k = 0; k < tensors_[0].size(); ++k) {
      Status s = CheckSame(k);
      if (!s.ok()) return s;
      const Tensor& first = tensors_[0][k];
      if (!IsAveraged(first.dtype())) continue;
      std::vector<double> sum(
          first.nbytes() / AveragedElementSize(first.dtype()), 0.0);
      for (size_t r = 0; r < tensors_.size(); ++r) {
        AddWeighted(first.dtype(), tensors_[r][k].data(), weights[r], &sum);
      }
      sums->push_back(std::move(sum));
    }
    return Status::Ok();
  }

  // Every replica's float32 or float64 tensors kept become `values` (one
  // per such tensor, as Sums gives them), each stored in a tensor of its
  // own.
  Status Replace(const std::vector<std::vector<double>>& values) {
    if (tensors_.empty()) {
      return Status(kInvalidArgument,
                    "TensorBow: ReplaceKept needs a computed wave");
    }
    std::vector<size_t> averaged;  // positions of the averaged tensors
    for (size_t k = 0; k < tensors_[0].size(); ++k) {
      const Tensor& t = tensors_[0][k];
      if (!IsAveraged(t.dtype())) continue;
      const size_t i = averaged.size();
      if (i == values.size() ||
          values[i].size() != t.nbytes() / AveragedElementSize(t.dtype())) {
        return ReplaceRefused();
      }
      averaged.push_back(k);
    }
    if (averaged.size() != values.size()) return ReplaceRefused();
    for (size_t i = 0; i < averaged.size(); ++i) {
      const size_t k = averaged[i];
      const int dtype = tensors_[0][k].dtype();
      const std::vector<int64_t> dims = tensors_[0][k].dims();
      for (size_t r = 0; r < tensors_.size(); ++r) {
        // A fresh tensor: the kept one may share a feed's buffer.
        Tensor mean = Tensor::Allocate(dtype, dims);
        StoreSum(dtype, values[i], mean.data());
        tensors_[r][k] = std::move(mean);
      }
    }
    return Status::Ok();
  }

  // Forgets the kept wave.
  void Discard() {
    tensors_.clear();
    feeds_.clear();
  }

 private:
  static Status ReplaceRefused() {
    return Status(kInvalidArgument,
                  "TensorBow: ReplaceKept needs one value of each averaged "
                  "tensor's size");
  }

  // OK if the k-th tensor of every replica has one dtype and shape and,
  // unless averaged, the same bytes.
  Status CheckSame(size_t k) const {
    const size_t n = tensors_.size();
    const Tensor& first = tensors_[0][k];
    const int dtype = first.dtype();
    const std::vector<int64_t> dims = first.dims();
    for (size_t r = 1; r < n; ++r) {
      if (tensors_[r][k].dtype() != dtype || tensors_[r][k].dims() != dims) {
        return Status(kInvalidArgument,
                      "TensorBow: the replicas computed tensors of different "
                      "shapes for their update (a sparse gradient?); they "
                      "cannot be averaged");
      }
    }
    if (!IsAveraged(dtype)) {
      for (size_t r = 1; r < n; ++r) {
        if (tensors_[r][k].nbytes() != first.nbytes() ||
            std::memcmp(tensors_[r][k].data(), first.data(),
                        first.nbytes()) != 0) {
          return Status(kInvalidArgument,
                        "TensorBow: the replicas computed different "
                        "non-floating tensors for their update; they cannot "
                        "be averaged");
        }
      }
    }
    return Status::Ok();
  }

  // Per replica, the tensors its commit is fed.
  std::vector<std::vector<Tensor>> tensors_;
  // Per replica, the computed wave's feeds, for its commit.
  std::vector<std::vector<Feed>> feeds_;
};

}  // namespace runtime
}  // namespace tensorbow

#endif  // TENSORBOW_CC_RUNTIME_WAVE_H_
