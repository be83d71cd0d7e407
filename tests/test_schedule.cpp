// Learning-rate schedules against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "tandem/core/error.h"
#include "tandem/train/schedule.h"

using tandem::ScheduleOptions;

TEST(Schedule, WarmupThenCosine) {
  ScheduleOptions s;
  s.kind = "cosine";
  s.lr = 1.0;
  s.warmup_steps = 4;
  s.total_steps = 14;
  EXPECT_DOUBLE_EQ(tandem::learning_rate(s, 0), 0.25);
  EXPECT_DOUBLE_EQ(tandem::learning_rate(s, 3), 1.0);
  EXPECT_DOUBLE_EQ(tandem::learning_rate(s, 4), 1.0);    // decay starts at cos(0)
  EXPECT_NEAR(tandem::learning_rate(s, 9), 0.5, 1e-12);  // half way: (1 + cos(pi/2)) / 2
  EXPECT_NEAR(tandem::learning_rate(s, 14), 0.0, 1e-12);
  s.min_lr_ratio = 0.1;
  EXPECT_NEAR(tandem::learning_rate(s, 9), 0.1 + 0.9 * 0.5, 1e-12);
}

TEST(Schedule, WarmupRatioAndConstant) {
  ScheduleOptions s;
  s.kind = "constant";
  s.lr = 2.0;
  s.warmup_ratio = 0.1;
  s.total_steps = 100;
  EXPECT_EQ(tandem::warmup_steps(s), 10);
  EXPECT_DOUBLE_EQ(tandem::learning_rate(s, 4), 1.0);
  EXPECT_DOUBLE_EQ(tandem::learning_rate(s, 50), 2.0);
}

TEST(Schedule, Validation) {
  ScheduleOptions s;
  s.kind = "linear-ish";
  EXPECT_THROW(tandem::validate(s, "run.yaml"), tandem::Error);
  s.kind = "cosine";
  s.total_steps = 0;
  EXPECT_THROW(tandem::validate(s, "run.yaml"), tandem::Error);
  s.total_steps = 10;
  s.warmup_steps = 20;
  EXPECT_THROW(tandem::validate(s, "run.yaml"), tandem::Error);
}
