#include "tests/support/kernel_mount_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernel/kernel_mount.h"
#include "mount/mount.h"

namespace dsfs::testing {

std::string CannotKernelMountReason() {
  if (::geteuid() != 0) return "not running as root (-o kernel needs root)";
  for (const char* dev : {"/dev/fuse", "/dev/loop-control"}) {
    int fd = ::open(dev, O_RDWR | O_CLOEXEC);
    if (fd < 0) return std::string(dev) + " is not usable: " + std::strerror(errno);
    ::close(fd);
  }
  auto has_erofs = [] {
    return ReadFile("/proc/filesystems").find("\terofs\n") != std::string::npos;
  };
  if (!has_erofs()) RunCommand({"modprobe", "erofs"}, 30);
  if (!has_erofs()) return "the kernel has no EROFS (not in /proc/filesystems)";
  return "";
}

bool LoopBackingUnderTest() {
  const char* b = std::getenv("DSFS_TEST_KERNEL_BACKING");
  return b != nullptr && std::string(b) == "loop";
}

std::string KernelOption() { return LoopBackingUnderTest() ? "kernel=loop" : "kernel"; }

namespace {
std::string Findmnt(const std::string& column, const std::string& mp) {
  CommandResult r = RunCommand({"findmnt", "-n", "-o", column, "--mountpoint", mp}, 30);
  std::string t = r.out;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t;
}

}  // namespace

std::string FsType(const std::string& mp) { return Findmnt("FSTYPE", mp); }
std::string MountSource(const std::string& mp) { return Findmnt("SOURCE", mp); }

std::string PrivatePrefixOf(const std::string& mp) {
  struct stat st;
  EXPECT_EQ(::stat(mp.c_str(), &st), 0);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%llx-%llu-", static_cast<unsigned long long>(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  return std::string(kKernelRunDir) + "/" + buf;
}

std::vector<std::string> PrivateDirs(const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(kKernelRunDir, ec)) {
    if (e.path().string().rfind(prefix, 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

std::vector<std::string> LoopsBackedUnder(const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/block", ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("loop", 0) != 0) continue;
    std::ifstream f(e.path() / "loop" / "backing_file");
    std::string b;
    if (std::getline(f, b) && b.rfind(prefix, 0) == 0) out.push_back(name + " -> " + b);
  }
  return out;
}

std::vector<std::string> ErofsMountsOver(const std::string& prefix) {
  std::vector<std::string> out;
  for (const MountEntry& e : AllMounts()) {
    if (e.fstype == "erofs" && e.source.rfind(prefix, 0) == 0) {
      out.push_back(e.mountpoint + " <- " + e.source);
    }
  }
  return out;
}

bool MountedUnder(const std::string& prefix) {
  for (const MountEntry& e : AllMounts()) {
    if (e.mountpoint.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

::testing::AssertionResult LayersGone(const std::string& mp, const std::string& prefix) {
  if (!FsType(mp).empty()) return ::testing::AssertionFailure() << mp << " still mounted";
  auto loops = LoopsBackedUnder(prefix);
  if (!loops.empty()) return ::testing::AssertionFailure() << "loop device left: " << loops[0];
  auto erofs = ErofsMountsOver(prefix);
  if (!erofs.empty()) return ::testing::AssertionFailure() << "EROFS mount left: " << erofs[0];
  if (MountedUnder(prefix)) return ::testing::AssertionFailure() << "private mount left";
  auto dirs = PrivateDirs(prefix);
  if (!dirs.empty()) return ::testing::AssertionFailure() << "private dir left: " << dirs[0];
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult HasTheBackingUnderTest(const std::string& mp,
                                                  const std::string& private_dir) {
  const std::string image = private_dir + "/image";
  std::vector<MountEntry> at = MountsAt(mp);
  if (at.size() != 1 || at[0].fstype != "erofs") {
    return ::testing::AssertionFailure() << mp << " is not one EROFS mount";
  }
  if (at[0].mount_options.rfind("ro", 0) != 0) {
    return ::testing::AssertionFailure() << "EROFS mounted " << at[0].mount_options;
  }
  const std::string source = MountSource(mp);
  auto loops = LoopsBackedUnder(private_dir + "/");
  std::map<std::string, std::string> stats = StatsOf(mp);
  const std::string backing = stats["kernel.backing"];
  if (!LoopBackingUnderTest()) {
    if (source != image) {
      return ::testing::AssertionFailure() << "EROFS reads " << source << ", not " << image;
    }
    if (!loops.empty()) return ::testing::AssertionFailure() << "a loop device: " << loops[0];
    if (backing != "file") return ::testing::AssertionFailure() << "kernel.backing " << backing;
    return ::testing::AssertionSuccess();
  }
  if (loops.size() != 1) {
    return ::testing::AssertionFailure() << loops.size() << " loop devices read " << image;
  }
  const std::string loop = loops[0].substr(0, loops[0].find(' '));
  if (loops[0] != loop + " -> " + image) {
    return ::testing::AssertionFailure() << "the loop device reads " << loops[0];
  }
  if (source != "/dev/" + loop) {
    return ::testing::AssertionFailure() << "EROFS reads " << source << ", not /dev/" << loop;
  }
  if (ReadFile("/sys/block/" + loop + "/loop/dio") != "1\n") {
    return ::testing::AssertionFailure() << loop << " without direct I/O";
  }
  if (ReadFile("/sys/block/" + loop + "/ro") != "1\n") {
    return ::testing::AssertionFailure() << loop << " is not read-only";
  }
  if (backing != loop) return ::testing::AssertionFailure() << "kernel.backing " << backing;
  return ::testing::AssertionSuccess();
}

KernelMount::KernelMount(std::string mp) : mp_(std::move(mp)) {
  BecomeSubreaper();
  prefix_ = PrivatePrefixOf(mp_);
}

KernelMount::~KernelMount() {
  if (!FsType(mp_).empty() || !PrivateDirs(prefix_).empty()) {
    CommandResult r = Dsfs({"umount", mp_});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
  }
  WaitDaemon();
  EXPECT_TRUE(LayersGone(mp_, prefix_));
  if (!FsType(mp_).empty()) RunCommand({"umount", "-l", mp_});
}

CommandResult KernelMount::Mount(const std::string& store, const std::string& options) {
  return MountWith(store, KernelOption(), options);
}

CommandResult KernelMount::MountWith(const std::string& store, const std::string& kernel_option,
                                     const std::string& options) {
  std::vector<std::string> args = {"mount", store, mp_, "-o",
                                   kernel_option + (options.empty() ? "" : "," + options)};
  CommandResult r = Dsfs(args);
  auto dirs = PrivateDirs(prefix_);
  if (dirs.size() == 1) pid_ = static_cast<pid_t>(std::atol(dirs[0].c_str() + prefix_.size()));
  return r;
}

void KernelMount::WaitDaemon() {
  if (pid_ <= 0) return;
  ExpectDaemonExits(pid_);
  pid_ = -1;
}

uint64_t KernelStat(const std::string& mp, const std::string& key) {
  std::map<std::string, std::string> stats = StatsOf(mp);
  auto it = stats.find(key);
  if (it == stats.end() || it->second.empty()) return UINT64_MAX;
  char* end = nullptr;
  uint64_t v = std::strtoull(it->second.c_str(), &end, 10);
  return *end == '\0' ? v : UINT64_MAX;
}

void Put(const std::string& path, std::string_view data, mode_t mode) {
  WriteFile(path, data, mode);
  ::chmod(path.c_str(), mode);
}

void BuildTree(const std::string& src) {
  std::filesystem::create_directories(src + "/empty");
  size_t sizes[] = {0, 1, 100, 4095, 4096, 4097, 8191, 65536, 300000, 2500000};
  int i = 0;
  for (size_t n : sizes) Put(src + "/sizes/f" + std::to_string(n), RandomBytes(n, ++i));
  Put(src + "/text.txt", TextBytes(50000, 3));
  Put(src + "/modes/private", "secret\n", 0600);
  Put(src + "/modes/exec", "#!/bin/sh\n", 0755);
  Put(src + "/modes/readonly", "ro\n", 0444);
  Put(src + "/odd names/with space and \xc3\xa9", "utf8\n");
  Put(src + "/odd names/new\nline", "nl\n");
  for (int k = 0; k < 3000; ++k) {
    Put(src + "/many/e" + std::to_string(k * 7919 % 3000), TextBytes(k % 300, k));
  }
  std::string deep = src + "/deep";
  for (int d = 0; d < 20; ++d) deep += "/d" + std::to_string(d);
  Put(deep + "/leaf", "deep\n");
  ::symlink("text.txt", (src + "/link").c_str());
  ::symlink("../sizes/f4096", (src + "/modes/rel-link").c_str());
  ::symlink("/nonexistent/target", (src + "/dangling").c_str());
  ::chmod((src + "/modes").c_str(), 0750);
  // Distinct mtimes with nanoseconds.
  int64_t t = 1600000000;
  for (auto it = std::filesystem::recursive_directory_iterator(src);
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    struct timespec ts[2] = {{t, 0}, {t, (t * 7) % 1000000000}};
    ::utimensat(AT_FDCWD, it->path().c_str(), ts, AT_SYMLINK_NOFOLLOW);
    t += 13;
  }
}

std::string Show(const Entry& e) {
  std::ostringstream s;
  s << std::oct << e.mode << std::dec << " " << e.uid << ":" << e.gid << " size " << e.size
    << " mtime " << e.mtime_s << "." << e.mtime_ns << " content " << e.content.size() << " bytes";
  return s.str();
}

std::map<std::string, Entry> Walk(const std::string& root, bool with_dir_mtimes) {
  std::map<std::string, Entry> out;
  WalkTree(root, [&](const std::string& rel, const struct stat& st, const std::string& path) {
    if (rel.empty()) return;
    Entry e{st.st_mode,        st.st_uid,          st.st_gid, S_ISDIR(st.st_mode) ? 0 : st.st_size,
            st.st_mtim.tv_sec, st.st_mtim.tv_nsec, ""};
    if (S_ISDIR(st.st_mode)) {
      if (!with_dir_mtimes) e.mtime_s = e.mtime_ns = 0;
    } else if (S_ISLNK(st.st_mode)) {
      e.content = std::filesystem::read_symlink(path).string();
    } else {
      e.content = ReadFile(path);
    }
    out[rel] = e;
  });
  return out;
}

void ExpectSameTree(const std::map<std::string, Entry>& want,
                    const std::map<std::string, Entry>& got) {
  EXPECT_EQ(want.size(), got.size());
  int shown = 0;
  for (const auto& [path, e] : want) {
    auto it = got.find(path);
    if (it == got.end()) {
      if (shown++ < 10) ADD_FAILURE() << "missing: " << path;
      continue;
    }
    if (!(it->second == e) && shown++ < 10) {
      ADD_FAILURE() << path << ": want " << Show(e) << ", got " << Show(it->second);
    }
  }
  for (const auto& [path, e] : got) {
    if (!want.count(path) && shown++ < 10) ADD_FAILURE() << "extra: " << path;
  }
}

std::map<std::string, Entry> Expected(const std::string& src, uid_t uid, gid_t gid, mode_t umask) {
  auto tree = Walk(src);
  for (auto& [path, e] : tree) {
    e.uid = uid;
    e.gid = gid;
    if (!S_ISLNK(e.mode)) e.mode &= ~umask;
  }
  return tree;
}

void KernelMountTest::SetUp() {
  std::string why = CannotKernelMountReason();
  if (!why.empty()) GTEST_SKIP() << "SKIPPED: -o kernel mount test not run because " << why;
  ::chmod(dir_.path().c_str(), 0755);
  src_ = dir_ / "src";
  store_ = dir_ / "store.dsfs";
  mp_ = dir_ / "mnt";
  std::filesystem::create_directories(mp_);
}

void KernelMountTest::Pack(const std::vector<std::string>& extra) {
  std::vector<std::string> argv{"pack", "-q"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(src_);
  argv.push_back(store_);
  CommandResult r = Dsfs(argv);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
}

}  // namespace dsfs::testing
