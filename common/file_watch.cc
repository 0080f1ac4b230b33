#include "common/file_watch.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"

namespace dsfs {
namespace {

// ---------------------------------------------------------------------------------------------
// The fault guard. The handler may run on any thread at any moment, also while a mapping is
// being registered: it reads only lock-free atomics, and a slot is matched only once its
// `begin` is stored (last, with release order), and no longer once `begin` is cleared (first).

struct Slot {
  std::atomic<bool> used{false};
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<int> fd{-1};
  std::atomic<uint64_t> faults{0};
};
static_assert(std::atomic<uintptr_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int>::is_always_lock_free);

Slot g_slots[FileWatch::kMaxGuarded];
std::atomic<int> g_wake_fd{-1};  // the watch thread's eventfd
uintptr_t g_page = 4096;
struct sigaction g_previous;  // the SIGBUS action before the guard's

// A SIGBUS that is not the guard's: the action that was there before. The default (or an
// ignored SIGBUS, which for a fault would fault forever) becomes death by the signal: a fault
// re-executes the load under the default action once the handler returns; a SIGBUS sent by
// kill(2) is raised again (blocked until the handler returns).
void PassOn(int sig, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (!(g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_handler != SIG_DFL &&
      g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  if (info != nullptr && info->si_code > 0) {  // a fault, not a signal someone sent
    const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
    for (Slot& s : g_slots) {
      const uintptr_t begin = s.begin.load(std::memory_order_acquire);
      if (begin == 0 || addr < begin) continue;
      const uintptr_t end = s.end.load(std::memory_order_relaxed);
      if (addr >= end) continue;
      uintptr_t page = addr & ~(g_page - 1);
      uintptr_t to = page + g_page;
      // Past the file's end now: everything from the end on is gone (a truncation takes the
      // end of a file), so that part of the mapping gets zeros at once: one fault and one
      // mapping, not one of each per page. Inside the file: the disk failed to read this
      // page alone.
      struct stat st;
      const int fd = s.fd.load(std::memory_order_relaxed);
      if (fd >= 0 && ::fstat(fd, &st) == 0 && st.st_size >= 0) {
        const uintptr_t size = static_cast<uintptr_t>(st.st_size);
        const uintptr_t eof =
            size >= end - begin ? end : begin + ((size + g_page - 1) & ~(g_page - 1));
        if (page >= eof) {
          page = eof;
          to = end;
        }
      }
      void* p = ::mmap(reinterpret_cast<void*>(page), to - page, PROT_READ,
                       MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) break;  // no way to go on: die of it, as without the guard
      s.faults.fetch_add(1, std::memory_order_relaxed);
      const int wake = g_wake_fd.load(std::memory_order_acquire);
      if (wake >= 0) {
        const uint64_t one = 1;
        ssize_t n = ::write(wake, &one, sizeof(one));
        (void)n;  // a full counter still wakes the thread
      }
      errno = saved_errno;
      return;  // the load runs again and reads zeros
    }
  }
  errno = saved_errno;
  PassOn(sig, info, context);
}

void InstallGuard() {
  static std::once_flag once;
  std::call_once(once, [] {
    const long page = ::sysconf(_SC_PAGESIZE);
    if (page > 0) g_page = static_cast<uintptr_t>(page);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGBUS, &sa, &g_previous) != 0) {
      Log()->warn("cannot install the SIGBUS handler of the store mappings: {}",
                  std::strerror(errno));
    }
  });
}

int ClaimSlot(int fd, const void* map, size_t map_bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(map);
  for (size_t i = 0; i < FileWatch::kMaxGuarded; ++i) {
    bool free = false;
    if (!g_slots[i].used.compare_exchange_strong(free, true)) continue;
    g_slots[i].fd.store(fd, std::memory_order_relaxed);
    g_slots[i].faults.store(0, std::memory_order_relaxed);
    g_slots[i].end.store(begin + map_bytes, std::memory_order_relaxed);
    g_slots[i].begin.store(begin, std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

void ReleaseSlot(int i) {
  g_slots[i].begin.store(0, std::memory_order_release);
  g_slots[i].end.store(0, std::memory_order_relaxed);
  g_slots[i].fd.store(-1, std::memory_order_relaxed);
  g_slots[i].used.store(false, std::memory_order_release);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The watch thread: one per process, never ended (a process that serves a store watches it
// until it exits; tools watch theirs for a moment).

class WatchThread {
 public:
  static WatchThread& Get() {
    // Leaked on purpose: the thread may be waiting in poll() when the process exits.
    static WatchThread* t = new WatchThread();
    return *t;
  }

  void Add(FileWatch* w, int fd) {
    // Under the lock: a Remove of another watch of the same inode (the same descriptor) must
    // see this one.
    std::lock_guard<std::mutex> lock(mu_);
    if (inotify_ >= 0) {
      // By the descriptor: the inode it has open, whatever its path names now.
      const std::string path = "/proc/self/fd/" + std::to_string(fd);
      w->wd_ = ::inotify_add_watch(inotify_, path.c_str(), IN_MODIFY);
      if (w->wd_ < 0) {
        Log()->debug("not watching the store file {} for changes: inotify: {}", path,
                     std::strerror(errno));
      }
    }
    watches_.push_back(w);
  }

  void Remove(FileWatch* w) {
    std::lock_guard<std::mutex> lock(mu_);
    watches_.erase(std::remove(watches_.begin(), watches_.end(), w), watches_.end());
    // Watches of one inode share its descriptor: removed with the last of them.
    if (w->wd_ >= 0 && std::none_of(watches_.begin(), watches_.end(),
                                    [&](const FileWatch* o) { return o->wd_ == w->wd_; })) {
      ::inotify_rm_watch(inotify_, w->wd_);
    }
    w->wd_ = -1;
  }

 private:
  WatchThread() {
    inotify_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_ < 0) {
      Log()->debug("not watching store files for changes: inotify: {}", std::strerror(errno));
    }
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_ >= 0) g_wake_fd.store(wake_, std::memory_order_release);
    std::thread([this] { Run(); }).detach();
  }

  void Run() {
    struct pollfd fds[2] = {{inotify_, POLLIN, 0}, {wake_, POLLIN, 0}};
    alignas(struct inotify_event) char buf[8192];
    for (;;) {
      int n = ::poll(fds, 2, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        Log()->warn("the watch of the store files ended: poll: {}", std::strerror(errno));
        return;
      }
      std::vector<int> modified, ignored;
      if (fds[0].revents & POLLIN) {
        for (;;) {
          ssize_t len = ::read(inotify_, buf, sizeof(buf));
          if (len <= 0) break;
          for (ssize_t at = 0; at + static_cast<ssize_t>(sizeof(inotify_event)) <= len;) {
            const auto* e = reinterpret_cast<const struct inotify_event*>(buf + at);
            if (e->mask & IN_MODIFY) modified.push_back(e->wd);
            if (e->mask & IN_IGNORED) ignored.push_back(e->wd);
            at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
          }
        }
      }
      bool woken = false;
      if (fds[1].revents & POLLIN) {
        uint64_t count;
        woken = ::read(wake_, &count, sizeof(count)) == sizeof(count);
      }
      auto has = [](const std::vector<int>& v, int wd) {
        return std::find(v.begin(), v.end(), wd) != v.end();
      };
      std::lock_guard<std::mutex> lock(mu_);
      for (FileWatch* w : watches_) {
        if (w->wd_ >= 0 && has(ignored, w->wd_)) w->wd_ = -1;  // the kernel dropped it
        if (w->wd_ >= 0 && has(modified, w->wd_)) Call(w, FileWatch::Event::kModified);
        if (woken && w->slot_ >= 0) {
          const uint64_t f = g_slots[w->slot_].faults.load(std::memory_order_relaxed);
          if (f != w->seen_faults_) {
            w->seen_faults_ = f;
            Call(w, FileWatch::Event::kFaulted);
          }
        }
      }
    }
  }

  static void Call(FileWatch* w, FileWatch::Event e) {
    if (!w->on_change_) return;
    try {
      w->on_change_(e);
    } catch (const std::exception& ex) {
      Log()->warn("the watch of a store file: {}", ex.what());
    } catch (...) {
      Log()->warn("the watch of a store file: an unknown exception");
    }
  }

  int inotify_ = -1, wake_ = -1;
  std::mutex mu_;                    // guards watches_ and their wd_ and seen_faults_
  std::vector<FileWatch*> watches_;  // the live ones
};

std::unique_ptr<FileWatch> FileWatch::Start(int fd, const void* map, size_t map_bytes,
                                            Callback on_change) {
  std::unique_ptr<FileWatch> w(new FileWatch());
  w->on_change_ = std::move(on_change);
  if (map != nullptr && map_bytes > 0) {
    InstallGuard();
    w->slot_ = ClaimSlot(fd, map, map_bytes);
    if (w->slot_ < 0) {
      Log()->warn(
          "more than {} store mappings in this process: a store truncated under "
          "the last one opened would end the process",
          kMaxGuarded);
    }
  }
  WatchThread::Get().Add(w.get(), fd);
  return w;
}

FileWatch::~FileWatch() {
  WatchThread::Get().Remove(this);
  if (slot_ >= 0) ReleaseSlot(slot_);
}

uint64_t FileWatch::faults() const {
  return slot_ >= 0 ? g_slots[slot_].faults.load(std::memory_order_relaxed) : 0;
}

}  // namespace dsfs
