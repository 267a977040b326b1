#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tracer/lazyjit.h"

TEST(Device, RoundTrip) {
  auto x = torch::randn({3, 4});
  auto y = x.to(lazyjit::device());
  EXPECT_EQ(y.device().type(), c10::DeviceType::PrivateUse1);
  EXPECT_TRUE(torch::equal(y.cpu(), x));
}
