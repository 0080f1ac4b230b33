// The views, the page-cache push and the stats of a real mount, and the FUSE transport it is
// served over: large images decoded once or served as they are, listed files read without
// requests, io_uring where the kernel allows it and the classic loop where it does not.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/mount_util.h"

namespace dsfs::testing {
namespace {

// Large images in the views: one whose pixels cannot fit an entry of the RAM cache (a 16th of
// cache_size) is served as its original bytes and never decoded, so readers of several at once
// leave the daemon within its budget and decode nothing (an unrelated file read meanwhile is
// served: no timing is asserted, the count of decodes says it); one that fits is
// decoded once however many readers read it at the same time.
TEST(ViewsMountTest, LargeImagesAreDecodedOnceOrServedAsTheyAre) {
  SKIP_UNLESS_CAN_MOUNT();
  TempDir dir;
  std::string src = dir / "src", store = dir / "s.dsfs", mp = dir / "mnt";
  MakeDir(src);
  MakeDir(src + "/c");
  std::vector<std::string> pngs;
  for (int i = 0; i < 4; ++i) {
    pngs.push_back(GradientPng(3000, 3000, i));  // 27 MB of pixels each
    PutFile(src + "/c/big" + std::to_string(i) + ".png", pngs.back());
  }
  PutFile(src + "/other.txt", "unrelated\n");
  MakeDir(mp);
  CommandResult r = Dsfs({"pack", "-q", src, store});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  {
    MountGuard guard(mp);
    r = guard.MountBackground(store, {"-o", "cache_size=16M,push=0"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    ASSERT_EQ(guard.daemons().size(), 1u);
    pid_t pid = guard.daemons()[0];
    std::vector<std::string> got(pngs.size());
    std::vector<std::thread> readers;
    for (size_t i = 0; i < pngs.size(); ++i) {
      readers.emplace_back([&, i] {
        // At most 4 MB each: enough to show a decode per read without waiting for all of them.
        std::string path = mp + "/.dsfs/bmp/c/big" + std::to_string(i) + ".png";
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return;
        std::string buf(1 << 20, '\0');
        while (got[i].size() < (4u << 20)) {
          ssize_t n = ::read(fd, buf.data(), buf.size());
          if (n <= 0) break;
          got[i].append(buf.data(), static_cast<size_t>(n));
        }
        ::close(fd);
      });
    }
    std::this_thread::sleep_for(milliseconds(50));
    std::string data, error;
    EXPECT_TRUE(ReadAll(mp + "/other.txt", &data, &error)) << error;
    for (auto& t : readers) t.join();
    EXPECT_EQ(data, "unrelated\n");
    for (size_t i = 0; i < pngs.size(); ++i) {
      EXPECT_TRUE(got[i] == pngs[i])
          << "big" << i << ".png: not its original bytes (" << got[i].size() << " bytes read)";
    }
    EXPECT_EQ(StatsField(mp, "images_decoded"), 0u);
    uint64_t hwm_kb = ProcStatusKb(pid, "VmHWM");
    if (!kSanitized) {
      EXPECT_LT(hwm_kb, (16u + 48u) << 10) << "daemon peak RSS in kB";
    }
  }
  {
    // 1G: 64 MB per entry, the images fit: four readers of one image decode it once.
    MountGuard guard(mp);
    r = guard.MountBackground(store, {"-o", "cache_size=1G,push=0"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    std::vector<std::string> got(4);
    std::vector<std::thread> readers;
    for (size_t i = 0; i < got.size(); ++i) {
      readers.emplace_back([&, i] {
        std::string error;
        ReadAll(mp + "/.dsfs/bmp/c/big0.png", &got[i], &error);
      });
    }
    for (auto& t : readers) t.join();
    for (const std::string& g : got) {
      EXPECT_EQ(g.size(), 54u + 3000u * 3000u * 3u);
      EXPECT_TRUE(g == got[0]);
    }
    EXPECT_EQ(got[0].substr(0, 2), "BM");
    EXPECT_EQ(StatsField(mp, "images_decoded"), 1u);
    // Readers of the other three images, decoding on both request threads' worth of workers,
    // leave the request threads free: an unrelated file is served while they decode (its read
    // returns before the last of the three decodes is counted; no time is asserted).
    readers.clear();
    for (size_t i = 1; i < pngs.size(); ++i) {
      readers.emplace_back([&, i] {
        std::string data, error;
        ReadAll(mp + "/.dsfs/bmp/c/big" + std::to_string(i) + ".png", &data, &error);
      });
    }
    std::this_thread::sleep_for(milliseconds(30));
    std::string data, error;
    EXPECT_TRUE(ReadAll(mp + "/other.txt", &data, &error)) << error;
    const uint64_t decoded_when_served = StatsField(mp, "images_decoded");
    for (auto& t : readers) t.join();
    EXPECT_EQ(data, "unrelated\n");
    EXPECT_LT(decoded_when_served, 4u) << "an unrelated file waited behind the decodes";
    EXPECT_EQ(StatsField(mp, "images_decoded"), 4u);
  }
}

// The stats file is hidden from listings, live, and shows that after a directory listing the
// files were pushed into the page cache: reading them all then sends no READ to the daemon.
TEST(PushAndStatsTest, ListedFilesAreReadWithoutRequests) {
  SKIP_UNLESS_CAN_MOUNT();
  TempDir dir;
  std::string src = dir / "src", store = dir / "s.dsfs", mp = dir / "mnt";
  MakeDir(src);
  MakeDir(src + "/cls");
  for (int i = 0; i < 300; ++i) {
    PutFile(src + "/cls/" + std::to_string(i) + ".jpg", TextBytes(500 + i, i));
  }
  MakeDir(mp);
  CommandResult r = Dsfs({"pack", "-q", src, store});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  MountGuard guard(mp);
  r = guard.MountBackground(store, {"-o", "push=1G"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);

  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(mp)) {
    names.insert(e.path().filename().string());
  }
  EXPECT_EQ(names, std::set<std::string>{"cls"}) << "the .dsfs directory must stay hidden";
  ASSERT_TRUE(std::filesystem::is_regular_file(mp + "/.dsfs/stats"));

  auto stat_value = [&](const std::string& key) -> long {
    CommandResult s = Dsfs({"stats", mp});
    EXPECT_EQ(s.exit_code, 0) << Describe(s);
    std::istringstream in(s.out);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
    }
    ADD_FAILURE() << "no " << key << " in: " << s.out;
    return -1;
  };
  size_t listed = 0;
  for (const auto& e : std::filesystem::directory_iterator(mp + "/cls")) {
    (void)e;
    ++listed;
  }
  ASSERT_EQ(listed, 300u);
  for (int tries = 0; tries < 100 && stat_value("push.files") < 300; ++tries) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(stat_value("push.files"), 300);
  long reads_before = stat_value("requests.read");
  for (int i = 0; i < 300; ++i) {
    std::string data, error;
    ASSERT_TRUE(ReadAll(mp + "/cls/" + std::to_string(i) + ".jpg", &data, &error)) << error;
    EXPECT_EQ(data, TextBytes(500 + i, i));
  }
  // Only the stats file itself is read from the daemon (a READ or few per `dsfs stats`), not
  // the 300 files.
  EXPECT_LT(stat_value("requests.read") - reads_before, 10);
  CommandResult j = Dsfs({"stats", "--json", mp});
  EXPECT_EQ(j.out.front(), '{');
}

// ---------------------------------------------------------------------------------------------
// The FUSE transport (-o transport=, fuse/uring_transport.h): over io_uring where the kernel's
// enable_uring parameter allows it, else the classic /dev/fuse loop, said in one log line and
// in the stats.

// The log lines of `log` that contain `needle`.
std::vector<std::string> LogLines(const std::string& log, const std::string& needle) {
  return LinesWith(ReadFile(log), needle);
}

// Requests that must reach the daemon (negative lookups of new names).
void SendRequests(const std::string& mp, int n) {
  for (int i = 0; i < n; ++i) {
    struct stat st;
    EXPECT_NE(::stat((mp + "/missing-" + std::to_string(i)).c_str(), &st), 0);
  }
}

// Python's open() asks isatty() of every file: an ioctl the kernel always sends. dsfs has
// none; the transport answers it itself, as libfuse did (ENOTTY to the caller), on files and
// directories, and counts it.
void ExpectIoctlsAnsweredByTheTransport(const std::string& mp) {
  constexpr int kCalls = 10;
  for (const std::string& path : {mp + "/a.txt", mp}) {
    SCOPED_TRACE(path);
    int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    for (int i = 0; i < kCalls; ++i) {
      errno = 0;
      EXPECT_EQ(::isatty(fd), 0);
      EXPECT_EQ(errno, ENOTTY) << std::strerror(errno);
    }
    ::close(fd);
  }
  std::map<std::string, std::string> st = StatsOf(mp);
  EXPECT_EQ(st["transport.ioctls"], std::to_string(2 * kCalls));
}

TEST(TransportTest, UringServesOverTheRingWhenEnabled) {
  SKIP_UNLESS_CAN_MOUNT();
  ScopedEnableUring enable(true);
  if (!enable.exists()) {
    GTEST_SKIP() << "SKIPPED: this kernel has no FUSE over io_uring (no " << kEnableUringPath
                 << ")";
  }
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  std::string log = s.dir / "uring.log";
  MountGuard guard(s.mp);
  CommandResult r =
      guard.MountBackground(s.store, {"-o", "transport=uring,log_level=info,log_file=" + log});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::string data, error;
  ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
  EXPECT_EQ(data, "small store\n");
  SendRequests(s.mp, 100);
  std::map<std::string, std::string> st = StatsOf(s.mp);
  EXPECT_EQ(st["transport.serving"].rfind("uring (", 0), 0u) << st["transport.serving"];
  EXPECT_GE(std::stol(st["transport.ring_requests"]), 100) << st["transport.ring_requests"];
  EXPECT_TRUE(st.count("transport.queue_requests.0")) << "per-queue counts are missing";
  ExpectIoctlsAnsweredByTheTransport(s.mp);
  CommandResult j = Dsfs({"stats", "--json", s.mp});
  EXPECT_NE(j.out.find("\"serving\": \"uring ("), std::string::npos) << j.out;
  std::vector<std::string> lines = LogLines(log, "FUSE transport:");
  ASSERT_EQ(lines.size(), 1u) << ReadFile(log);
  EXPECT_NE(lines[0].find("io_uring"), std::string::npos) << lines[0];
}

TEST(TransportTest, FallsBackToClassicWhenTheKernelSaysNo) {
  SKIP_UNLESS_CAN_MOUNT();
  // N (or no such parameter, which says no as well): new mounts get no ring.
  ScopedEnableUring disable(false);
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  struct Case {
    std::string transport, level, reason;
  };
  for (const Case& c :
       {Case{"auto", "[info]", "enable_uring"}, Case{"uring", "[warning]", "enable_uring"},
        Case{"classic", "[info]", "transport=classic"}}) {
    SCOPED_TRACE("transport=" + c.transport);
    std::string log = s.dir / (c.transport + ".log");
    MountGuard guard(s.mp);
    CommandResult r = guard.MountBackground(
        s.store, {"-o", "transport=" + c.transport + ",log_level=info,log_file=" + log});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    std::string data, error;
    ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
    EXPECT_EQ(data, "small store\n");
    SendRequests(s.mp, 20);
    std::map<std::string, std::string> st = StatsOf(s.mp);
    const std::string& serving = st["transport.serving"];
    EXPECT_EQ(serving.rfind("classic (", 0), 0u) << serving;
    EXPECT_NE(serving.find(c.reason), std::string::npos) << serving;
    EXPECT_EQ(st["transport.ring_requests"], "0");
    EXPECT_GE(std::stol(st["transport.classic_requests"]), 20);
    ExpectIoctlsAnsweredByTheTransport(s.mp);
    // One line says which transport serves and why; a fallback from an explicit uring warns.
    std::vector<std::string> lines = LogLines(log, "FUSE transport:");
    ASSERT_EQ(lines.size(), 1u) << ReadFile(log);
    EXPECT_NE(lines[0].find("classic /dev/fuse loop: "), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find(c.level), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find(c.reason), std::string::npos) << lines[0];
  }
}

}  // namespace
}  // namespace dsfs::testing
