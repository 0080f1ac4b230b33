// The latency histogram (common/histogram.h), the mount's stats assembly (mount/stats.h) and
// its Prometheus export (mount/metrics.h), checked by a strict parser of the exposition format
// (tests/support/prometheus_parser.h), which is checked first on broken texts.
#include "mount/metrics.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/histogram.h"
#include "fs/filesystem.h"
#include "fs/stats.h"
#include "mount/stats.h"
#include "tests/support/prometheus_parser.h"
#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::ParseExposition;
using testing::PromExposition;

TEST(LatencyHistogramTest, BucketsAreFourFoldMicroseconds) {
  EXPECT_EQ(LatencyHistogram::BucketOf(0), 0);
  EXPECT_EQ(LatencyHistogram::BucketOf(1000), 0);  // 1 us: at most 1 us
  EXPECT_EQ(LatencyHistogram::BucketOf(1001), 1);
  EXPECT_EQ(LatencyHistogram::BucketOf(4000), 1);
  EXPECT_EQ(LatencyHistogram::BucketOf(4001), 2);
  EXPECT_EQ(LatencyHistogram::BucketOf(16000), 2);
  EXPECT_EQ(LatencyHistogram::BucketOf(1'000'000), 5);  // 1 ms: (256 us, 1024 us]
  for (int i = 0; i < LatencyHistogram::kBuckets; ++i) {
    const uint64_t bound_ns = LatencyHistogram::BoundUs(i) * 1000;
    EXPECT_EQ(LatencyHistogram::BucketOf(bound_ns), i) << i;
    EXPECT_EQ(LatencyHistogram::BucketOf(bound_ns + 1), i + 1) << i;
  }
  EXPECT_EQ(LatencyHistogram::BucketOf(UINT64_MAX), LatencyHistogram::kBuckets);
}

TEST(LatencyHistogramTest, ConcurrentRecordsAllCount) {
  LatencyHistogram h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (uint64_t i = 0; i < 10000; ++i) h.Record(i * 1000 * (t + 1));
    });
  }
  for (auto& t : threads) t.join();
  const LatencyHistogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.count, 40000u);
  uint64_t sum = 0, expect_sum = 0;
  for (uint64_t c : s.counts) sum += c;
  for (int t = 0; t < 4; ++t) expect_sum += 1000ull * (t + 1) * (9999ull * 10000 / 2);
  EXPECT_EQ(sum, s.count);
  EXPECT_EQ(s.sum_ns, expect_sum);
  EXPECT_EQ(s.counts[0], 5u);  // the four zeros and 1 us
  const nlohmann::ordered_json j = HistogramJson(h);
  EXPECT_EQ(j["count"], 40000u);
  EXPECT_EQ(j["buckets"].size(), static_cast<size_t>(LatencyHistogram::kBuckets + 1));
}

// The parser itself: good texts pass, each kind of broken text fails.
TEST(PrometheusParserTest, RejectsBrokenTexts) {
  const std::string good =
      "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 3\na_total{x=\"2\"} 4\n"
      "# TYPE g gauge\ng 1.5e-3\n"
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.5\nh_count 2\n";
  PromExposition e;
  std::string error;
  ASSERT_TRUE(ParseExposition(good, &e, &error)) << error;
  double v = 0;
  EXPECT_TRUE(e.Find("a_total", {{"x", "2"}}, &v));
  EXPECT_EQ(v, 4);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"no final newline", "# TYPE g gauge\ng 1"},
      {"bad metric name", "# TYPE 1g gauge\n1g 1\n"},
      {"bad name in a sample", "# TYPE g gauge\ng-x 1\n"},
      {"missing TYPE", "g 1\n"},
      {"TYPE after samples", "# TYPE g gauge\ng 1\n# TYPE g gauge\n"},
      {"second TYPE", "# TYPE g gauge\n# TYPE g counter\n"},
      {"unknown type", "# TYPE g meter\ng 1\n"},
      {"counter without _total", "# TYPE c counter\nc 1\n"},
      {"negative counter", "# TYPE c_total counter\nc_total -1\n"},
      {"duplicate series", "# TYPE g gauge\ng{a=\"1\"} 1\ng{a=\"1\"} 2\n"},
      {"repeated label", "# TYPE g gauge\ng{a=\"1\",a=\"2\"} 1\n"},
      {"bad label escape", "# TYPE g gauge\ng{a=\"\\t\"} 1\n"},
      {"unterminated label", "# TYPE g gauge\ng{a=\"1} 1\n"},
      {"unquoted label", "# TYPE g gauge\ng{a=1} 1\n"},
      {"reserved label name", "# TYPE g gauge\ng{__a=\"1\"} 1\n"},
      {"non-numeric value", "# TYPE g gauge\ng 12abc\n"},
      {"empty value", "# TYPE g gauge\ng \n"},
      {"interleaved families", "# TYPE g gauge\n# TYPE f gauge\ng{a=\"1\"} 1\nf 1\ng{a=\"2\"} 1\n"},
      {"buckets not cumulative",
       "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n"},
      {"no +Inf bucket", "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 1\nh_count 2\n"},
      {"count mismatch",
       "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n"},
      {"no _sum", "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n"},
      {"bounds not rising",
       "# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\n"
       "h_sum 1\nh_count 1\n"},
      {"bucket without le", "# TYPE h histogram\nh_bucket 1\nh_sum 1\nh_count 1\n"},
  };
  for (const auto& [why, text] : bad) {
    EXPECT_FALSE(ParseExposition(text, &e, &error)) << why << ": accepted\n" << text;
  }
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFile(dir_ / "src/a/1.txt", std::string(5000, 'x'));
    testing::WriteFile(dir_ / "src/b.txt", "hello");
    std::shared_ptr<MemTable> table;
    std::unique_ptr<Store> store;
    ASSERT_TRUE(testing::PackToMemory(dir_ / "src", PackOptions{}, &table, &store).ok());
    fs_ = std::make_unique<Filesystem>(std::move(store), FsOptions{});
  }
  // Reads /b.txt (two requests: lookup, read).
  void ReadB() {
    struct stat st;
    ASSERT_TRUE(fs_->Lookup(1, "b.txt", &st).ok());
    ReadBuffer buf;
    std::string_view out;
    ASSERT_TRUE(fs_->Read(st.st_ino, 0, 100, &buf, &out).ok());
  }
  testing::TempDir dir_;
  std::unique_ptr<Filesystem> fs_;
};

// The mount's stats: the tree's own counters (with their latency), then the memory limit;
// the stats file shows them while the MountStats lives.
TEST_F(MetricsTest, MountStatsAssembleTheStatsFile) {
  ReadB();
  nlohmann::ordered_json tree = fs_->StatsObject();
  std::vector<std::string> keys;
  for (const auto& item : tree.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"uptime_s", "requests", "bytes_served", "read_errors",
                                            "cache", "decompress", "views", "store", "latency"}));
  EXPECT_EQ(tree["latency"]["read"]["count"], 1u);
  EXPECT_EQ(tree["latency"]["lookup"]["count"], 1u);
  EXPECT_EQ(fs_->StatsJson().find("memory_limit"), std::string::npos);
  {
    MountStats stats(fs_.get());
    const std::string j = fs_->StatsJson();
    // The same object both ways, but for the clock, which ticks between the two calls.
    auto parsed = nlohmann::ordered_json::parse(j);
    auto again = nlohmann::ordered_json::parse(stats.Json());
    parsed["uptime_s"] = again["uptime_s"] = 0;
    EXPECT_EQ(parsed, again);
    keys.clear();
    for (const auto& item : parsed.items()) keys.push_back(item.key());
    EXPECT_EQ(keys.front(), "uptime_s");
    EXPECT_EQ(keys.back(), "memory_limit");
    EXPECT_NE(j.find("\"bytes_served\": 5, \"read_errors\": 0, \"cache\": {}"), std::string::npos)
        << j;
    EXPECT_LT(j.size(), Filesystem::kStatsBytes);
  }
  EXPECT_EQ(fs_->StatsJson().find("memory_limit"), std::string::npos);
}

TEST_F(MetricsTest, ExportParsesAndCarriesTheCounters) {
  ReadB();
  MountStats stats(fs_.get());
  // A mountpoint that needs every escape of a label value.
  const std::string mp = "/mnt/a \"b\"\\c\nd";
  const std::string text = PrometheusText(stats.Object(), mp);
  PromExposition e;
  std::string error;
  ASSERT_TRUE(ParseExposition(text, &e, &error)) << error << "\n" << text;
  for (const auto& [name, type] : e.types) {
    EXPECT_EQ(name.rfind("dsfs_", 0), 0u) << name;
    EXPECT_FALSE(e.help[name].empty()) << name;
  }
  for (const auto& s : e.samples) EXPECT_EQ(s.labels.at("mountpoint"), mp) << s.name;
  double v = 0;
  EXPECT_TRUE(e.Find("dsfs_requests_total", {{"op", "read"}}, &v));
  EXPECT_EQ(v, 1);
  EXPECT_TRUE(e.Find("dsfs_read_bytes_total", {}, &v));
  EXPECT_EQ(v, 5);
  EXPECT_TRUE(e.Find("dsfs_request_duration_seconds_count", {{"op", "lookup"}}, &v));
  EXPECT_EQ(v, 1);
  EXPECT_TRUE(e.Find("dsfs_request_duration_seconds_bucket", {{"op", "read"}, {"le", "+Inf"}}, &v));
  EXPECT_EQ(v, 1);
  EXPECT_TRUE(
      e.Find("dsfs_request_duration_seconds_bucket", {{"op", "read"}, {"le", "1e-06"}}, &v));
  EXPECT_TRUE(e.Find("dsfs_memory_limit_bytes", {}, &v));
  EXPECT_GT(v, 0);
  EXPECT_EQ(e.types["dsfs_uptime_seconds"], "gauge");
  // A mountpoint is any bytes, a label UTF-8: a byte that is no character becomes U+FFFD.
  const std::string odd = PrometheusText(stats.Object(), "/mnt/bad\xff\xfe\xc3\xa9");
  EXPECT_EQ(odd.find('\xff'), std::string::npos);
  EXPECT_NE(odd.find("mountpoint=\"/mnt/bad\xEF\xBF\xBD\xEF\xBF\xBD\xc3\xa9\""), std::string::npos);
  // No store in object storage, no kernel path: none of their series.
  EXPECT_EQ(text.find("dsfs_s3_"), std::string::npos);
  EXPECT_EQ(text.find("dsfs_kernel_"), std::string::npos);
}

// The S3 and kernel rows of the table, from a stats object that has those members.
TEST(MetricsTableTest, RemoteAndKernelMembers) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(R"({
    "kernel": {"image_bytes": 4096, "image_reads": 3, "image_bytes_read": 8192,
               "image_read_errors": 1,
               "image_read_latency": {"count": 3, "sum_us": 30,
                                      "buckets": [0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]}},
    "cache": {"hits": 7, "misses": 2},
    "backend": {"name": "s3", "remote_gets": 2, "remote_get_bytes": 100, "disk_cache_hits": 1,
                "disk_cache_misses": 2, "recent_value_hits": 0},
    "decompress": {"chunks": 2, "seconds": 0.25}})");
  const std::string text = PrometheusText(j, "/m");
  PromExposition e;
  std::string error;
  ASSERT_TRUE(ParseExposition(text, &e, &error)) << error << "\n" << text;
  double v = 0;
  EXPECT_TRUE(e.Find("dsfs_cache_hits_total", {{"tier", "ram"}}, &v));
  EXPECT_EQ(v, 7);
  EXPECT_TRUE(e.Find("dsfs_cache_hits_total", {{"tier", "disk"}}, &v));
  EXPECT_EQ(v, 1);
  EXPECT_TRUE(e.Find("dsfs_cache_misses_total", {{"tier", "disk"}}, &v));
  EXPECT_EQ(v, 2);
  EXPECT_TRUE(e.Find("dsfs_s3_get_requests_total", {}, &v));
  EXPECT_EQ(v, 2);
  EXPECT_TRUE(e.Find("dsfs_s3_get_bytes_total", {}, &v));
  EXPECT_EQ(v, 100);
  EXPECT_TRUE(e.Find("dsfs_decompress_seconds_total", {}, &v));
  EXPECT_EQ(v, 0.25);
  EXPECT_TRUE(e.Find("dsfs_kernel_image_read_errors_total", {}, &v));
  EXPECT_EQ(v, 1);
  EXPECT_TRUE(e.Find("dsfs_kernel_image_read_duration_seconds_bucket", {{"le", "4e-06"}}, &v));
  EXPECT_EQ(v, 1);
  EXPECT_TRUE(e.Find("dsfs_kernel_image_read_duration_seconds_bucket", {{"le", "1.6e-05"}}, &v));
  EXPECT_EQ(v, 3);
  EXPECT_TRUE(e.Find("dsfs_kernel_image_read_duration_seconds_sum", {}, &v));
  EXPECT_DOUBLE_EQ(v, 30e-6);
  // A member of the wrong kind gives no series, never a broken text.
  j["cache"]["hits"] = "many";
  j["kernel"]["image_read_latency"]["buckets"] = "none";
  ASSERT_TRUE(ParseExposition(PrometheusText(j, "/m"), &e, &error)) << error;
  EXPECT_FALSE(e.Find("dsfs_cache_hits_total", {{"tier", "ram"}}, &v));
}

TEST_F(MetricsTest, MetricsFileIsWrittenAtomicallyAndRemovedIfStillOurs) {
  const std::string mp = dir_ / "mp";
  ASSERT_TRUE(std::filesystem::create_directory(mp));
  EXPECT_FALSE(MetricsFile::Check("relative.prom", mp).ok());
  EXPECT_FALSE(MetricsFile::Check(dir_.path(), mp).ok());
  EXPECT_FALSE(MetricsFile::Check(dir_ / "no/such/dir/m.prom", mp).ok());
  const Status s = MetricsFile::Check(dir_ / "no/such/dir/m.prom", mp);
  EXPECT_NE(s.message().find("metrics_file="), std::string::npos) << s.message();
  // Below the mountpoint: nothing there can be written once it is mounted.
  EXPECT_FALSE(MetricsFile::Check(mp + "/m.prom", mp).ok());
  EXPECT_FALSE(MetricsFile::Check(mp + "/sub/../m.prom", mp).ok());
  // What is there already is replaced and removed at unmount: only a file of dsfs's metrics or
  // an empty one; never another file, what a link points to, a device or a FIFO.
  testing::WriteFile(dir_ / "conf.txt", "important\n");
  ASSERT_EQ(::symlink((dir_ / "conf.txt").c_str(), (dir_ / "link.prom").c_str()), 0);
  ASSERT_EQ(::mkfifo((dir_ / "fifo.prom").c_str(), 0644), 0);
  for (const char* bad : {"conf.txt", "link.prom", "fifo.prom"}) {
    const Status st = MetricsFile::Check(dir_ / bad, mp);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  }
  EXPECT_FALSE(MetricsFile::Check("/dev/null", mp).ok());
  testing::WriteFile(dir_ / "empty.prom", "");
  EXPECT_TRUE(MetricsFile::Check(dir_ / "empty.prom", mp).ok());
  testing::WriteFile(dir_ / "old.prom", "# HELP dsfs_uptime_seconds Seconds.\n");
  EXPECT_TRUE(MetricsFile::Check(dir_ / "old.prom", mp).ok());
  EXPECT_EQ(testing::ReadFile(dir_ / "conf.txt"), "important\n");
  for (const char* f : {"conf.txt", "link.prom", "fifo.prom", "empty.prom", "old.prom"}) {
    std::filesystem::remove(dir_ / f);
  }
  const std::string path = dir_ / "m.prom";
  ASSERT_TRUE(MetricsFile::Check(path, mp).ok());
  EXPECT_FALSE(std::filesystem::exists(path));  // the probe leaves nothing
  MountStats stats(fs_.get());
  {
    MetricsFile f(path, "/m", [&stats] { return stats.Object(); });
    f.Write();
    ReadB();
    f.Write();
    const std::string text = testing::ReadFile(path);
    PromExposition e;
    std::string error;
    ASSERT_TRUE(ParseExposition(text, &e, &error)) << error;
    double v = 0;
    EXPECT_TRUE(e.Find("dsfs_requests_total", {{"op", "read"}}, &v));
    EXPECT_EQ(v, 1);
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
      names.push_back(entry.path().filename());
    }
    EXPECT_EQ(std::count(names.begin(), names.end(), "m.prom"), 1);
    EXPECT_EQ(names.size(), 3u);  // m.prom, mp and src: no temporary left
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  // A file someone else put there since is not this writer's to remove.
  {
    MetricsFile f(path, "/m", [&stats] { return stats.Object(); });
    f.Write();
    ::unlink(path.c_str());
    testing::WriteFile(path, "theirs\n");
  }
  EXPECT_EQ(testing::ReadFile(path), "theirs\n");
  // A link put at PATH is replaced, never written through.
  std::filesystem::remove(path);
  testing::WriteFile(dir_ / "target", "kept\n");
  ASSERT_EQ(::symlink((dir_ / "target").c_str(), path.c_str()), 0);
  {
    MetricsFile f(path, "/m", [&stats] { return stats.Object(); });
    f.Write();
  }
  EXPECT_EQ(testing::ReadFile(dir_ / "target"), "kept\n");
}

}  // namespace
}  // namespace dsfs
