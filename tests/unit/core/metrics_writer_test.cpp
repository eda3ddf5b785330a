#include "ratekeeper/core/metrics_writer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ratekeeper {
namespace {

TEST(MetricsWriter, AFamilyIsDeclaredOnceBeforeItsFirstSample) {
  MetricsWriter out;
  out.counter("x_total", "Things.", std::uint64_t{3}, {{"kind", "a"}});
  out.gauge("y", "A level.", std::int64_t{-2});
  out.counter("x_total", "Things.", std::uint64_t{4}, {{"kind", "b"}});
  EXPECT_EQ(out.text(),
            "# HELP x_total Things.\n# TYPE x_total counter\nx_total{kind=\"a\"} 3\n"
            "# HELP y A level.\n# TYPE y gauge\ny -2\n"
            "x_total{kind=\"b\"} 4\n");
}

TEST(MetricsWriter, LabelValuesAreEscaped) {
  MetricsWriter out;
  out.sample("m", std::uint64_t{1}, {{"rule", "a\"b\\c\nd"}, {"le", "0.5"}});
  EXPECT_EQ(out.text(), "m{rule=\"a\\\"b\\\\c\\nd\",le=\"0.5\"} 1\n");
}

TEST(MetricsWriter, SpecialValuesUseTheFormatsSpelling) {
  MetricsWriter out;
  out.sample("a", std::numeric_limits<double>::infinity());
  out.sample("b", -std::numeric_limits<double>::infinity());
  out.sample("c", std::nan(""));
  out.sample("d", 0.25);
  out.sample("e", std::uint64_t{18446744073709551615ULL});
  EXPECT_EQ(out.take(), "a +Inf\nb -Inf\nc NaN\nd 0.25\ne 18446744073709551615\n");
}

}  // namespace
}  // namespace ratekeeper
