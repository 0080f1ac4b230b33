// The metrics of a real classic mount: `dsfs stats --prometheus` and -o metrics_file, both
// read by the strict exposition-format parser (tests/support/prometheus_parser.h); the file
// is rewritten while the mount serves and removed at unmount; a bad path fails the mount
// before it mounts. (The -o kernel mount's: tests/kernel/kernel_mount_test.cc.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/support/mount_util.h"
#include "tests/support/prometheus_parser.h"

namespace dsfs::testing {
namespace {

TEST(MetricsMountTest, PrometheusTextAndMetricsFile) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  const std::string prom = s.dir / "dsfs.prom";
  // A bad path: one line, exit 1, nothing mounted.
  for (const std::string& bad : {s.dir / "no/such/dir/m.prom", s.dir.path()}) {
    MountGuard guard(s.mp);
    CommandResult r = guard.MountBackground(s.store, {"-o", "metrics_file=" + bad});
    EXPECT_EQ(r.exit_code, 1) << Describe(r);
    EXPECT_NE(r.err.find("metrics_file="), std::string::npos) << Describe(r);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << Describe(r);
    EXPECT_FALSE(IsMounted(s.mp));
  }
  {
    MountGuard guard(s.mp);
    CommandResult r =
        guard.MountBackground(s.store, {"-o", "metrics_file=" + prom + ",status_interval=0.1"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    std::string data, error;
    ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
    const std::string mp = std::filesystem::canonical(s.mp);
    // The file follows the counters: it shows the read once rewritten after it.
    PromExposition e;
    std::string text;
    double reads = 0;
    EXPECT_TRUE(WaitUntil(
        [&] {
          text.clear();
          return ReadAll(prom, &text, &error) && ParseExposition(text, &e, &error) &&
                 e.Find("dsfs_requests_total", {{"op", "read"}}, &reads) && reads >= 1;
        },
        milliseconds(30000)))
        << error << "\n"
        << text;
    ASSERT_TRUE(ParseExposition(text, &e, &error)) << error << "\n" << text;
    for (const auto& sample : e.samples) EXPECT_EQ(sample.labels.at("mountpoint"), mp);
    double v = 0;
    EXPECT_TRUE(e.Find("dsfs_request_duration_seconds_count", {{"op", "read"}}, &v)) << text;
    EXPECT_GE(v, 1);
    // `dsfs stats --prometheus`: the same families, from the stats file.
    r = Dsfs({"stats", "--prometheus", s.mp});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    PromExposition cli;
    ASSERT_TRUE(ParseExposition(r.out, &cli, &error)) << error << "\n" << r.out;
    EXPECT_EQ(cli.types, e.types);
    EXPECT_TRUE(cli.Find("dsfs_read_bytes_total", {{"mountpoint", mp}}, &v)) << r.out;
    EXPECT_GE(v, data.size());
    EXPECT_TRUE(cli.Find("dsfs_memory_limit_bytes", {}, &v)) << r.out;
    r = Dsfs({"stats", "--prometheus", "--json", s.mp});
    EXPECT_NE(r.exit_code, 0) << Describe(r);
    // No temporary left beside it.
    for (const auto& entry : std::filesystem::directory_iterator(s.dir.path())) {
      EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path();
    }
    r = Dsfs({"umount", s.mp});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    guard.Release();
  }
  EXPECT_FALSE(std::filesystem::exists(prom)) << "the metrics file outlived its mount";
}

}  // namespace
}  // namespace dsfs::testing
