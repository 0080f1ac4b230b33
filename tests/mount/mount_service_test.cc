// Running as a service: sd_notify readiness, status and stopping; SIGHUP and the log file;
// repeated errors logged with a count; the unit's stop commands; the mount helper that mount(8)
// and fstab use.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/mount_util.h"

namespace dsfs::testing {
namespace {

// Starts `argv` as a child with `env_add` on top of this environment, stdout and stderr to
// `log_path`. Everything the child needs is prepared before fork: only exec follows it.
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env_add,
            const std::string& log_path) {
  std::vector<std::string> env = env_add;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    bool replaced = std::any_of(env_add.begin(), env_add.end(),
                                [&](const std::string& a) { return a.rfind(key + "=", 0) == 0; });
    if (!replaced) env.push_back(kv);
  }
  std::vector<std::string> args = argv;
  std::vector<char*> cargv, cenv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  ::close(log);
  return pid;
}

// The mount answers a request of its own daemon (statfs is never answered from a cache).
bool MountAnswers(const std::string& mp) {
  struct statfs sfs;
  return IsMounted(mp) && ::statfs(mp.c_str(), &sfs) == 0 && sfs.f_type == kFuseSuperMagic;
}

// Value of "requests" in a STATUS= line ("serving: N requests, ...").
long StatusRequests(const std::string& msg) {
  size_t at = msg.find("STATUS=serving: ");
  if (at == std::string::npos) return -1;
  return std::stol(msg.substr(at + 16));
}

// Waits up to `timeout` for `pid` (a child) to exit; its exit status or -1.
int ExitCode(pid_t pid, milliseconds timeout) {
  int wstatus = 0;
  if (!WaitChild(pid, timeout, &wstatus)) return -1;
  return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
}

// What dsfs@.service relies on (Type=notify): READY=1 only once files can be read, STATUS=
// lines while serving, STOPPING=1 on SIGTERM, and SIGHUP never ends the daemon.
TEST(ServiceTest, NotifiesReadyOnceTheMountAnswersThenStatusAndStopping) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  NotifySocket sock(s.dir / "notify.sock");
  ASSERT_TRUE(sock.ok()) << "cannot bind " << sock.path() << ": " << ErrnoName(errno);
  MountGuard guard(s.mp);
  std::string log = s.dir / "daemon.log";
  pid_t pid = Spawn(
      {DsfsBinary(), "mount", "-f", s.store, s.mp, "-o", "status_interval=0.3,log_level=info"},
      {"NOTIFY_SOCKET=" + sock.path()}, log);
  ASSERT_GT(pid, 0);
  guard.Own(pid);

  // Watch both: when this test first sees the mount answer, and when READY=1 arrives.
  auto start = Clock::now();
  std::optional<Clock::time_point> answered, ready;
  std::string first;
  while (!ready && Clock::now() - start < std::chrono::seconds(15)) {
    if (!answered && MountAnswers(s.mp)) answered = Clock::now();
    std::string msg;
    if (!sock.Receive(&msg, milliseconds(1))) continue;
    if (first.empty()) first = msg;
    if (msg.find("READY=1") == std::string::npos) continue;
    ready = Clock::now();
    // At once: the mount is there and a file reads.
    EXPECT_TRUE(IsMounted(s.mp)) << "READY=1 before the mount exists";
    std::string data, error;
    EXPECT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << "READY=1, yet: " << error;
    EXPECT_EQ(data, "small store\n");
    if (!answered && MountAnswers(s.mp)) answered = Clock::now();
  }
  ASSERT_TRUE(ready) << "no READY=1 within 15 s; daemon log:\n" << ReadFile(log);
  EXPECT_NE(first.find("READY=1"), std::string::npos) << "the first message was " << first;
  EXPECT_NE(first.find("STATUS=serving: "), std::string::npos) << first;
  ASSERT_TRUE(answered);
  double ready_ms = std::chrono::duration<double, std::milli>(*ready - start).count();
  double answer_ms = std::chrono::duration<double, std::milli>(*answered - start).count();
  std::cout << "[ figures  ] mount answered this test " << answer_ms << " ms after the start, "
            << "READY=1 received " << ready_ms << " ms after the start (" << (ready_ms - answer_ms)
            << " ms later)\n";
  ::testing::Test::RecordProperty("ready_minus_answer_us",
                                  static_cast<int>((ready_ms - answer_ms) * 1000));

  // STATUS= keeps coming, with the requests served so far.
  long before = StatusRequests(first);
  for (int i = 0; i < 20; ++i) {
    std::string data, error;
    ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
  }
  struct stat st;
  ASSERT_EQ(::stat((s.mp + "/closed/inside.txt").c_str(), &st), 0);
  long later = -1;
  std::string msg;
  auto until = Clock::now() + std::chrono::seconds(5);
  while (later <= before && Clock::now() < until) {
    if (sock.Receive(&msg, milliseconds(500))) later = StatusRequests(msg);
  }
  EXPECT_GT(later, before) << "no STATUS= line with more requests; last message: " << msg;

  // SIGHUP (systemctl reload) reopens the log and does not end the daemon.
  ASSERT_EQ(::kill(pid, SIGHUP), 0);
  std::this_thread::sleep_for(milliseconds(500));
  int wstatus;
  ASSERT_EQ(::waitpid(pid, &wstatus, WNOHANG), 0) << "SIGHUP ended the daemon";
  std::string data, error;
  EXPECT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
  EXPECT_TRUE(IsMounted(s.mp));

  // SIGTERM: STOPPING=1, unmounted, exit 0, and READY=1 never again.
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  bool stopping = false;
  until = Clock::now() + std::chrono::seconds(5);
  while (!stopping && Clock::now() < until) {
    if (!sock.Receive(&msg, milliseconds(100))) continue;
    EXPECT_EQ(msg.find("READY=1"), std::string::npos) << msg;
    stopping = msg.find("STOPPING=1") != std::string::npos;
  }
  EXPECT_TRUE(stopping) << "no STOPPING=1 within 5 s of SIGTERM";
  EXPECT_EQ(ExitCode(pid, milliseconds(5000)), 0) << ReadFile(log);
  guard.Forget(pid);
  EXPECT_FALSE(IsMounted(s.mp));
  std::string daemon_log = ReadFile(log);
  EXPECT_NE(daemon_log.find("mount answers"), std::string::npos) << daemon_log;
  EXPECT_NE(daemon_log.find("SIGHUP received"), std::string::npos) << daemon_log;
  size_t at = daemon_log.find("mount answers (");
  if (at != std::string::npos) {
    std::cout << "[ figures  ] daemon: " << daemon_log.substr(at, daemon_log.find('\n', at) - at)
              << "\n";
  }
}

// A mount that fails never reports ready: systemd sees the exit status instead.
TEST(ServiceTest, NoReadyWhenTheMountFails) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  NotifySocket sock(s.dir / "notify.sock");
  ASSERT_TRUE(sock.ok());
  MountGuard guard(s.mp);
  std::string log = s.dir / "daemon.log";
  pid_t pid = Spawn({DsfsBinary(), "mount", "-f", s.dir / "missing.dsfs", s.mp},
                    {"NOTIFY_SOCKET=" + sock.path()}, log);
  ASSERT_GT(pid, 0);
  guard.Own(pid);
  EXPECT_EQ(ExitCode(pid, milliseconds(10000)), 1);
  guard.Forget(pid);
  std::string msg;
  EXPECT_FALSE(sock.Receive(&msg, milliseconds(200))) << "got " << msg;
  std::string out = ReadFile(log);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_NE(out.find("missing.dsfs"), std::string::npos) << out;
}

// logrotate moves the log away and sends SIGHUP: the daemon (foreground or background) writes
// to a new file by the old name and keeps serving.
TEST(ServiceTest, SighupReopensTheLogFile) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  for (bool foreground : {true, false}) {
    SCOPED_TRACE(foreground ? "foreground" : "background");
    std::string log = s.dir / (foreground ? "fg.log" : "bg.log");
    std::string opts = "log_file=" + log + ",log_level=info";
    MountGuard guard(s.mp);
    pid_t pid;
    if (foreground) {
      pid =
          Spawn({DsfsBinary(), "mount", "-f", s.store, s.mp, "-o", opts}, {}, s.dir / "stderr.txt");
      ASSERT_GT(pid, 0);
      guard.Own(pid);
      ASSERT_TRUE(WaitUntil([&] { return MountAnswers(s.mp); }, milliseconds(15000)));
    } else {
      CommandResult r = guard.MountBackground(s.store, {"-o", opts});
      ASSERT_EQ(r.exit_code, 0) << Describe(r);
      ASSERT_EQ(guard.daemons().size(), 1u);
      pid = guard.daemons()[0];
    }
    std::string data, error;
    ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
    ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(log); }, milliseconds(5000)));
    ASSERT_EQ(::rename(log.c_str(), (log + ".1").c_str()), 0);
    ASSERT_EQ(::kill(pid, SIGHUP), 0);
    EXPECT_TRUE(WaitUntil(
        [&] {
          return std::filesystem::exists(log) &&
                 ReadFile(log).find("log file reopened") != std::string::npos;
        },
        milliseconds(5000)))
        << "no new " << log;
    int wstatus;
    ASSERT_EQ(::waitpid(pid, &wstatus, WNOHANG), 0) << "SIGHUP ended the daemon";
    ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
    EXPECT_EQ(data, "small store\n");
    if (foreground) {
      ASSERT_EQ(::kill(pid, SIGTERM), 0);
      EXPECT_EQ(ExitCode(pid, milliseconds(5000)), 0);
      guard.Forget(pid);
      EXPECT_NE(ReadFile(log).find("unmounting"), std::string::npos) << ReadFile(log);
      EXPECT_EQ(ReadFile(s.dir / "stderr.txt"), "") << "the log went to the file, not stderr";
    }
  }
}

// The background daemon stays in the session of whoever mounted (so in the same scheduler
// autogroup: a reader in another task group is woken on the other CPU after every round trip,
// mount/mount.cc) but in a process group of its own, which the shell's job control never signals.
TEST(ServiceTest, BackgroundDaemonKeepsTheCallersSessionInAProcessGroupOfItsOwn) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  MountGuard guard(s.mp);
  CommandResult r = guard.MountBackground(s.store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_EQ(guard.daemons().size(), 1u);
  pid_t pid = guard.daemons()[0];
  EXPECT_EQ(::getsid(pid), ::getsid(0));
  EXPECT_EQ(::getpgid(pid), pid);
  std::string ours = ReadFile("/proc/self/autogroup");
  if (!ours.empty()) {
    EXPECT_EQ(ReadFile("/proc/" + std::to_string(pid) + "/autogroup"), ours);
  }
  std::string data, error;
  ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
  EXPECT_EQ(data, "small store\n");
}

// A damaged file read a thousand times: one error line and a "repeated K times" count, not a
// thousand lines.
TEST(ServiceTest, RepeatedReadErrorsAreLoggedWithACount) {
  SKIP_UNLESS_CAN_MOUNT();
  TempDir dir;
  std::string src = dir / "src", store = dir / "s.dsfs", mp = dir / "mnt";
  MakeDir(src);
  MakeDir(mp);
  // Incompressible, stored as is; over a chunk (256K), so good.txt, before it, is in a solid
  // group of its own.
  std::string bad = RandomBytes(300000, 9);
  PutFile(src + "/bad.bin", bad);
  PutFile(src + "/a-good.txt", "good\n");
  // LMDB: the damage is done to the store file's bytes.
  CommandResult r = Dsfs({"pack", "-q", "--backend", "lmdb", src, store});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_TRUE(DamageStoredFile(store, bad));

  MountGuard guard(mp);
  std::string log = dir / "dsfs.log";
  pid_t pid = Spawn({DsfsBinary(), "mount", "-f", store, mp, "-o", "log_file=" + log}, {},
                    dir / "stderr.txt");
  ASSERT_GT(pid, 0);
  guard.Own(pid);
  ASSERT_TRUE(WaitUntil([&] { return MountAnswers(mp); }, milliseconds(15000)));
  constexpr int kReads = 1000;
  for (int i = 0; i < kReads; ++i) {
    std::string data, error;
    ASSERT_FALSE(ReadAll(mp + "/bad.bin", &data, &error)) << "the damaged file read";
    ASSERT_NE(error.find("errno 5"), std::string::npos) << error;  // EIO
  }
  std::string data, error;
  ASSERT_TRUE(ReadAll(mp + "/a-good.txt", &data, &error)) << error;
  EXPECT_EQ(data, "good\n");
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  EXPECT_EQ(ExitCode(pid, milliseconds(5000)), 0);
  guard.Forget(pid);

  // The first error at once, the rest as one count when the daemon stops.
  std::string text = ReadFile(log);
  std::istringstream in(text);
  std::string line;
  int error_lines = 0;
  long repeated = 0;
  while (std::getline(in, line)) {
    if (line.find("checksum mismatch") == std::string::npos) continue;
    ++error_lines;
    size_t p = line.find("(repeated ");
    if (p != std::string::npos) repeated += std::stol(line.substr(p + 10));
  }
  EXPECT_EQ(error_lines, 2) << text;
  // Each failed read(2) is at least one READ request (the kernel may retry it).
  EXPECT_GE(repeated + 1, kReads) << text;
  std::cout << "[ figures  ] " << kReads << " reads of a damaged file: " << error_lines
            << " log lines, " << repeated + 1 << " errors counted\n";
}

// The argv systemd would run for `key` (ExecStop, ExecStopPost) of this build's
// dsfs@.service for the instance whose mountpoint is `mp`: the leading "-" dropped, words
// split with single quotes grouping, "$$" made "$" and %f replaced.
std::vector<std::string> UnitCommand(const std::string& key, const std::string& mp) {
  std::istringstream in(ReadFile(std::string(DSFS_BUILD_DIR) + "/systemd/dsfs@.service"));
  std::string line, value;
  while (std::getline(in, line)) {
    if (line.rfind(key + "=", 0) == 0) value = line.substr(key.size() + 1);
  }
  if (!value.empty() && value[0] == '-') value.erase(0, 1);
  std::vector<std::string> argv;
  std::string word;
  bool quoted = false, in_word = false;
  for (char c : value) {
    if (c == '\'') {
      quoted = !quoted;
      in_word = true;
    } else if (c == ' ' && !quoted) {
      if (in_word) argv.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) argv.push_back(word);
  for (std::string& a : argv) {
    for (size_t p; (p = a.find("$$")) != std::string::npos;) a.replace(p, 2, "$");
    for (size_t p; (p = a.find("%f")) != std::string::npos;) a.replace(p, 2, mp);
  }
  return argv;
}

// What systemd runs to stop dsfs@.service: ExecStop unmounts and the daemon exits 0;
// ExecStopPost clears the dead mount of a daemon that was killed, so a restart can mount.
TEST(ServiceTest, UnitStopCommandsUnmountAndClearADeadMount) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  std::vector<std::string> stop = UnitCommand("ExecStop", s.mp);
  std::vector<std::string> stop_post = UnitCommand("ExecStopPost", s.mp);
  ASSERT_EQ(stop, (std::vector<std::string>{DsfsBinary(), "umount", s.mp}));
  ASSERT_EQ(stop_post.size(), 5u) << ::testing::PrintToString(stop_post);
  MountGuard guard(s.mp);
  {
    pid_t pid = Spawn({DsfsBinary(), "mount", "--foreground", s.store, s.mp, "-o", "ro,"}, {},
                      s.dir / "stderr.txt");
    ASSERT_GT(pid, 0);
    guard.Own(pid);
    ASSERT_TRUE(WaitUntil([&] { return MountAnswers(s.mp); }, milliseconds(15000)));
    CommandResult r = RunCommand(stop, 30);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(ExitCode(pid, milliseconds(5000)), 0) << ReadFile(s.dir / "stderr.txt");
    guard.Forget(pid);
    EXPECT_FALSE(IsMounted(s.mp));
  }
  {
    pid_t pid =
        Spawn({DsfsBinary(), "mount", "--foreground", s.store, s.mp}, {}, s.dir / "stderr.txt");
    ASSERT_GT(pid, 0);
    guard.Own(pid);
    ASSERT_TRUE(WaitUntil([&] { return MountAnswers(s.mp); }, milliseconds(15000)));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    WaitChild(pid, milliseconds(5000));
    guard.Forget(pid);
    ASSERT_TRUE(IsMounted(s.mp)) << "kill -9 leaves a dead mount";
    auto with_result = [&](const std::string& result) {
      std::vector<std::string> argv = {"env", "SERVICE_RESULT=" + result};
      argv.insert(argv.end(), stop_post.begin(), stop_post.end());
      return RunCommand(argv, 30);
    };
    // After a clean stop there is nothing to clear: the command does nothing.
    CommandResult r = with_result("success");
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_TRUE(IsMounted(s.mp));
    r = with_result("signal");
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_FALSE(IsMounted(s.mp)) << "ExecStopPost left the dead mount";
    // Restart=on-failure: the next start mounts.
    r = guard.MountBackground(s.store);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    std::string data, error;
    ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
  }
}

// mount(8) runs /sbin/mount.fuse.dsfs SOURCE MOUNTPOINT [-n] -o OPTIONS: here the helper is a
// link in a temporary directory, run with that argv convention.
TEST(MountHelperTest, HelperMountsWithFstabOptions) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  std::string helper = s.dir / "mount.fuse.dsfs";  // removed with the directory
  ASSERT_EQ(::symlink(DsfsBinary().c_str(), helper.c_str()), 0);
  MountGuard guard(s.mp);
  CommandResult r = RunCommand(
      {helper, s.store, s.mp, "-n", "-o",
       "ro,cache_size=64M,nofail,noatime,_netdev,nosuid,nodev,x-systemd.automount,allow_other"},
      60);
  guard.Adopt();
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out + r.err, "");
  ASSERT_EQ(guard.daemons().size(), 1u) << "the helper's daemon is not running";
  std::vector<MountEntry> entries = MountsAt(s.mp);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].fstype, "fuse.dsfs");
  EXPECT_EQ(entries[0].source, s.store);
  std::string data, error;
  ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
  EXPECT_EQ(data, "small store\n");
  // The dsfs options took effect.
  EXPECT_EQ(StatsOf(s.mp)["cache.capacity_bytes"], "67108864");
  // A second mount there is refused; umount(8) unmounts, and the daemon ends.
  r = RunCommand({helper, s.store, s.mp, "-o", "ro"}, 60);
  EXPECT_EQ(r.exit_code, 32) << Describe(r);
  EXPECT_NE(r.err.find("already mounted"), std::string::npos) << Describe(r);
  pid_t pid = guard.daemons()[0];
  r = RunCommand({"umount", s.mp}, 30);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(WaitChild(pid, milliseconds(5000))) << "the daemon outlived umount";
  guard.Forget(pid);

  // Bad input: one line, mount(8)'s exit codes, nothing mounted.
  r = RunCommand({helper, s.store, s.mp, "-o", "rw=1"}, 60);
  EXPECT_TRUE(IsOneLineError(r, {"read-only"}, 1));
  r = RunCommand({helper, s.store, s.mp, "-o", "ro,log_level=chatty"}, 60);
  EXPECT_TRUE(IsOneLineError(r, {"log_level=chatty"}, 1));
  r = RunCommand({helper, s.dir / "missing.dsfs", s.mp, "-o", "ro"}, 60);
  EXPECT_TRUE(IsOneLineError(r, {"missing.dsfs"}, 32));
  EXPECT_FALSE(IsMounted(s.mp));
}

// The link /sbin/mount.fuse.dsfs, made for one test when it is not there (mount(8) looks for
// helpers in /sbin only) and removed afterwards.
class SbinHelperLink {
 public:
  SbinHelperLink() {
    std::error_code ec;
    if (std::filesystem::is_symlink(kPath, ec)) {
      if (std::filesystem::read_symlink(kPath, ec) == DsfsBinary()) {
        usable_ = true;  // left by an interrupted run of this test: ours
        created_ = true;
        return;
      }
      why_not_ = std::string(kPath) + " exists (an installed dsfs?) and is not this build's";
      return;
    }
    if (std::filesystem::exists(kPath, ec)) {
      why_not_ = std::string(kPath) + " exists (an installed dsfs?)";
      return;
    }
    if (::symlink(DsfsBinary().c_str(), kPath) != 0) {
      why_not_ = std::string("cannot create ") + kPath + ": " + ErrnoName(errno);
      return;
    }
    created_ = usable_ = true;
  }
  ~SbinHelperLink() {
    if (created_) ::unlink(kPath);
  }
  bool usable() const { return usable_; }
  const std::string& why_not() const { return why_not_; }

 private:
  static constexpr const char* kPath = "/sbin/mount.fuse.dsfs";
  bool created_ = false, usable_ = false;
  std::string why_not_;
};

// `mount -t fuse.dsfs` and an fstab line, through util-linux mount(8) and umount(8).
TEST(MountHelperTest, MountCommandAndFstabLine) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  SbinHelperLink link;
  if (!link.usable()) GTEST_SKIP() << "SKIPPED: " << link.why_not();
  {
    MountGuard guard(s.mp);
    CommandResult r =
        RunCommand({"mount", "-t", "fuse.dsfs", "-o", "ro,cache_size=64M", s.store, s.mp}, 60);
    guard.Adopt();
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    std::string data, error;
    ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
    EXPECT_EQ(data, "small store\n");
    ASSERT_EQ(guard.daemons().size(), 1u);
    pid_t pid = guard.daemons()[0];
    r = RunCommand({"umount", s.mp}, 30);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_TRUE(WaitChild(pid, milliseconds(5000)));
    guard.Forget(pid);
  }
  // Without ro, mount(8) passes "rw" (and -w asks for it): mounted read-only, one warning line.
  for (const std::vector<std::string>& how :
       {std::vector<std::string>{"mount", "-t", "fuse.dsfs", s.store, s.mp},
        std::vector<std::string>{"mount", "-w", "-t", "fuse.dsfs", s.store, s.mp}}) {
    MountGuard guard(s.mp);
    CommandResult r = RunCommand(how, 60);
    guard.Adopt();
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(LineCount(r.err), 1) << Describe(r);
    EXPECT_NE(r.err.find("warning: " + s.store + ": dsfs mounts are read-only"), std::string::npos)
        << Describe(r);
    struct statvfs sv;
    ASSERT_EQ(::statvfs(s.mp.c_str(), &sv), 0);
    EXPECT_TRUE(sv.f_flag & ST_RDONLY);
    std::string data, error;
    ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
    EXPECT_EQ(data, "small store\n");
    EXPECT_NE(::open((s.mp + "/a.txt").c_str(), O_WRONLY), 0);
    EXPECT_EQ(errno, EROFS);
    r = RunCommand({"umount", s.mp}, 30);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
  }
  {
    // fstab's "defaults" (mount(8) passes rw), mounted by mount -a: read-only, one warning.
    std::string fstab = s.dir / "fstab-defaults";
    PutFile(fstab, s.store + " " + s.mp + " fuse.dsfs defaults 0 0\n");
    MountGuard guard(s.mp);
    CommandResult r = RunCommand({"mount", "-a", "-T", fstab}, 60);
    guard.Adopt();
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(LineCount(r.err), 1) << Describe(r);
    std::string data, error;
    ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
    EXPECT_EQ(data, "small store\n");
    struct statvfs sv;
    ASSERT_EQ(::statvfs(s.mp.c_str(), &sv), 0);
    EXPECT_TRUE(sv.f_flag & ST_RDONLY);
    r = RunCommand({"umount", s.mp}, 30);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
  }
  {
    // The fstab line from docs/service.md (mount -T reads another fstab than /etc/fstab).
    std::string fstab = s.dir / "fstab";
    PutFile(fstab, "# test\n" + s.store + " " + s.mp +
                       " fuse.dsfs ro,allow_other,cache_size=8G,nofail,x-systemd.automount 0 0\n");
    MountGuard guard(s.mp);
    CommandResult r = RunCommand({"mount", "-T", fstab, s.mp}, 60);
    guard.Adopt();
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    std::vector<MountEntry> entries = MountsAt(s.mp);
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].fstype, "fuse.dsfs");
    std::string data, error;
    ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
    // allow_other: another user reads it.
    ASSERT_EQ(::chmod(s.dir.path().c_str(), 0755), 0);
    r = RunCommand(
        {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", s.mp + "/a.txt"},
        30);
    EXPECT_EQ(r.out, "small store\n") << Describe(r);
    ASSERT_EQ(guard.daemons().size(), 1u);
    pid_t pid = guard.daemons()[0];
    r = RunCommand({"umount", s.mp}, 30);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_TRUE(WaitChild(pid, milliseconds(5000)));
    guard.Forget(pid);
  }
}

}  // namespace
}  // namespace dsfs::testing
