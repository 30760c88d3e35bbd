// The element loops of wave.h's averaging, by dtype.
#include "cc/runtime/wave.h"

#include <algorithm>

namespace tensorbow {
namespace runtime {
namespace {

constexpr int kFloat = kTfFloat;
constexpr int kDouble = kTfDouble;

template <typename T>
void Add(const T* values, double weight, std::vector<double>* sum) {
  for (size_t i = 0; i < sum->size(); ++i) (*sum)[i] += weight * values[i];
}

}  // namespace

bool IsAveraged(int dtype) { return dtype == kFloat || dtype == kDouble; }

void AddWeighted(int dtype, const void* data, double weight,
                 std::vector<double>* sum) {
  if (dtype == kFloat) {
    Add(static_cast<const float*>(data), weight, sum);
  } else {
    Add(static_cast<const double*>(data), weight, sum);
  }
}

void StoreSum(int dtype, const std::vector<double>& sum, void* out) {
  if (dtype == kFloat) {
    std::copy(sum.begin(), sum.end(), static_cast<float*>(out));
  } else {
    std::copy(sum.begin(), sum.end(), static_cast<double*>(out));
  }
}

size_t AveragedElementSize(int dtype) {
  return dtype == kFloat ? sizeof(float) : sizeof(double);
}

}  // namespace runtime
}  // namespace tensorbow
