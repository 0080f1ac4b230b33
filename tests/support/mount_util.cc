#include "tests/support/mount_util.h"

#include <fcntl.h>
#include <png.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernel/kernel_mount.h"
#include "mount/mount.h"

namespace dsfs::testing {

bool ReadAll(const std::string& path, std::string* data, std::string* error, size_t chunk_bytes) {
  data->clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = "open " + Printable(path) + ": " + ErrnoName(errno);
    return false;
  }
  std::string buf(chunk_bytes, '\0');
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = "read " + Printable(path) + ": " + ErrnoName(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    data->append(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

std::string GradientPng(uint32_t w, uint32_t h, int seed) {
  std::string rgb = RgbPixels(w, h, [&](uint32_t x, uint32_t y, char* p) {
    p[0] = static_cast<char>(x / 16 + seed);
    p[1] = static_cast<char>(y / 16);
    p[2] = static_cast<char>(seed * 40);
  });
  return EncodePng(w, h, PNG_FORMAT_RGB, std::move(rgb));
}

std::vector<MountEntry> AllMounts() {
  std::vector<MountEntry> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string id, parent, dev, root;
    MountEntry e;
    if (!(ls >> id >> parent >> dev >> root >> e.mountpoint >> e.mount_options)) continue;
    std::string field;
    while (ls >> field && field != "-") {
    }
    ls >> e.fstype >> e.source;
    e.mountpoint = UnescapeMountinfo(e.mountpoint);
    e.source = UnescapeMountinfo(e.source);
    out.push_back(e);
  }
  return out;
}

std::vector<MountEntry> MountsAt(const std::string& path) {
  std::vector<MountEntry> found;
  for (MountEntry& e : AllMounts()) {
    if (e.mountpoint == path) found.push_back(std::move(e));
  }
  return found;
}

bool IsMounted(const std::string& path) { return IsMountpoint(path); }

namespace {
std::vector<std::string> ProcCmdline(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find('\0', pos);
    if (end == std::string::npos) end = all.size();
    argv.push_back(all.substr(pos, end - pos));
    pos = end + 1;
  }
  return argv;
}
}  // namespace

bool ProcStat(pid_t pid, pid_t* ppid, char* state) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t paren = s.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return false;
  std::istringstream ls(s.substr(paren + 1));
  long parent = 0;
  if (!(ls >> *state >> parent)) return false;
  *ppid = static_cast<pid_t>(parent);
  return true;
}

std::vector<pid_t> DaemonChildren(const std::string& mountpoint) {
  std::vector<pid_t> pids;
  pid_t self = ::getpid();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    pid_t pid = static_cast<pid_t>(std::stol(name));
    pid_t ppid;
    char state;
    if (!ProcStat(pid, &ppid, &state) || ppid != self || state == 'Z') continue;
    std::vector<std::string> argv = ProcCmdline(pid);
    if (argv.empty()) continue;
    // `dsfs mount ...`, or the mount helper (the same binary run as mount.fuse.dsfs).
    bool helper = std::filesystem::path(argv[0]).filename() == "mount.fuse.dsfs";
    if (!helper && argv[0] != DsfsBinary()) continue;
    if (!helper && std::find(argv.begin(), argv.end(), "mount") == argv.end()) continue;
    if (std::find(argv.begin(), argv.end(), mountpoint) == argv.end()) continue;
    pids.push_back(pid);
  }
  return pids;
}

uint64_t ProcStatusKb(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0)
      return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
  }
  return 0;
}

MountGuard::MountGuard(std::string mountpoint) : mp_(std::move(mountpoint)) { BecomeSubreaper(); }

CommandResult MountGuard::MountBackground(const std::string& store,
                                          const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"mount", store, mp_};
  args.insert(args.end(), extra.begin(), extra.end());
  CommandResult r = Dsfs(args, 60);
  Adopt();
  if (r.exit_code == 0) ExpectTheTransportUnderTest();
  return r;
}

void MountGuard::ExpectTheTransportUnderTest() {
  std::ifstream param(kEnableUringPath);
  std::string on;
  if (TestTransport() != "uring" || !std::getline(param, on) || on != "Y") return;
  std::string stats = ReadFile(mp_ + "/.dsfs/stats");
  if (stats.find("requested with -o transport=") != std::string::npos) return;
  EXPECT_NE(stats.find("\"serving\": \"uring ("), std::string::npos)
      << "DSFS_TEST_TRANSPORT=uring but " << mp_ << " is not served over io_uring: " << stats;
}

::testing::AssertionResult MountGuard::MountForeground(const std::string& store,
                                                       const std::string& log_path) {
  // Everything the child needs is prepared before fork: only exec follows it.
  std::vector<std::string> argv = {DsfsBinary(), "mount", "-f", store, mp_};
  AddTestTransport(&argv);
  AddTestMount(&argv);
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) return ::testing::AssertionFailure() << "cannot create " << log_path;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execv(cargv[0], cargv.data());
    _exit(127);
  }
  ::close(log);
  if (pid < 0) return ::testing::AssertionFailure() << "fork: " << ErrnoName(errno);
  pids_.push_back(pid);
  bool exited = false;
  bool up = WaitUntil(
      [&] {
        int st;
        if (::waitpid(pid, &st, WNOHANG) == pid) {
          exited = true;
          return true;
        }
        struct stat sb;
        return IsMounted(mp_) && ::stat(mp_.c_str(), &sb) == 0;
      },
      milliseconds(15000));
  if (exited) {
    Forget(pid);
    std::string out = ReadFile(log_path);
    return ::testing::AssertionFailure() << "dsfs mount -f exited early: " << Printable(out);
  }
  if (!up) return ::testing::AssertionFailure() << "dsfs mount -f did not mount within 15 s";
  return ::testing::AssertionSuccess();
}

void MountGuard::Adopt() {
  for (pid_t pid : DaemonChildren(mp_)) {
    if (std::find(pids_.begin(), pids_.end(), pid) == pids_.end()) pids_.push_back(pid);
  }
}

void MountGuard::Forget(pid_t pid) {
  pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
}

void MountGuard::Release() {
  Adopt();
  if (IsMounted(mp_)) {
    CommandResult r = Dsfs({"umount", mp_}, 30);
    if (IsMounted(mp_)) {
      ADD_FAILURE() << "dsfs umount " << mp_ << " left it mounted (" << Describe(r)
                    << "); falling back to umount -l";
      RunCommand({"umount", "-l", mp_}, 30);
    }
  }
  for (pid_t pid : pids_) ExpectDaemonExits(pid);
  pids_.clear();
}

TmpfsGuard::TmpfsGuard(const std::string& dir, const std::string& size) : dir_(dir) {
  CommandResult r = RunCommand({"mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", dir});
  mounted_ = r.exit_code == 0;
  error_ = Describe(r);
}

TmpfsGuard::~TmpfsGuard() {
  if (mounted_ && RunCommand({"umount", dir_}).exit_code != 0) {
    RunCommand({"umount", "-l", dir_});
  }
}

SmallStore::SmallStore() {
  src = dir / "src";
  store = dir / "s.dsfs";
  mp = dir / "mnt";
  MakeDir(src);
  PutFile(src + "/a.txt", "small store\n");
  PutFile(src + "/private.txt", "root only\n", 0600);
  MakeDir(src + "/closed", 0700);
  PutFile(src + "/closed/inside.txt", "inside\n");
  MakeDir(mp);
  pack = Dsfs({"pack", "-q", src, store});
}

std::map<std::string, std::string> StatsOf(const std::string& mp) {
  CommandResult r = Dsfs({"stats", mp});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  std::map<std::string, std::string> out;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t v = line.find_first_not_of(' ', colon + 1);
    out[line.substr(0, colon)] = v == std::string::npos ? "" : line.substr(v);
  }
  return out;
}

uint64_t StatsField(const std::string& mp, const std::string& key) {
  // A -o kernel mount has no MP/.dsfs: the same JSON is its private mount's stats file.
  std::string path = mp + "/.dsfs/stats";
  KernelStatsPath(mp, &path);
  std::string stats = ReadFile(path);
  size_t at = stats.find("\"" + key + "\": ");
  return at == std::string::npos ? UINT64_MAX : std::stoull(stats.substr(at + key.size() + 4));
}

}  // namespace dsfs::testing
