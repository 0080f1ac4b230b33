#include "backend/lmdb_check.h"

#include <fcntl.h>
#include <lmdb.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <utility>
#include <vector>

#include "common/log.h"

namespace dsfs::lmdb {

Status LmdbError(int rc, std::string_view what, const std::string& path) {
  if (rc == ENOSPC || rc == EDQUOT) {
    return Status::NoSpace(path + ": no space left on device while " + std::string(what));
  }
  if (rc == MDB_MAP_FULL)
    return Status::NoSpace(path + ": store map full while " + std::string(what));
  if (rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND ||
      rc == MDB_VERSION_MISMATCH || rc == MDB_BAD_TXN) {
    return Status::Corruption(path + ": corrupt store (" + mdb_strerror(rc) + ") while " +
                              std::string(what));
  }
  if (rc > 0) return Status::FromErrno(rc, path + ": " + std::string(what));
  return Status::IOError(path + ": " + std::string(what) + ": " + mdb_strerror(rc));
}

namespace {

// ---------------------------------------------------------------------------------------------
// The structural check of a store opened read-only (docs/hardening.md). LMDB trusts its pages:
// a damaged page number or node offset in a branch or leaf page makes it read wherever that
// leads, and the process dies of SIGSEGV or SIGBUS before dsfs sees a value (whose checksum
// would have caught the damage). So before the store is served, a child process walks the
// whole main database with LMDB itself: every key in order with a cursor, each one looked up
// again with mdb_get (that descends the branch pages, comparing their keys as every lookup
// does), every key and value pointer checked to lie inside the file. What a damaged tree does
// to LMDB happens in the child; the parent only reads its report, or how it died.
//
// The child uses the transaction and cursor the parent opened before fork(), so it allocates
// nothing and calls nothing but LMDB's read functions and a few system calls: it is safe to
// fork from a process that already runs threads (the walk needs no lock: MDB_NOLOCK, read
// only). Values are not read: LMDB computes an overflow value's pointer without touching its
// pages, so the walk reads the branch and leaf pages only (31 of 72,400 pages of a 1M-file
// store).

enum class TreeFault : uint32_t {
  kNone = 0,
  kLmdbError,    // LMDB returned an error while walking (lmdb_rc)
  kKeyOrder,     // a key not greater than the one before it
  kKeyLost,      // a key the cursor found that a lookup does not find
  kOtherValue,   // a lookup of a key finds another value than the cursor
  kTooMany,      // more entries than the database records
  kTooFew,       // fewer entries than the database records
  kOutsideFile,  // a key or value pointer outside the file's bytes
};

// What the child writes to its pipe (one write, well under PIPE_BUF: atomic).
struct TreeReport {
  TreeFault fault = TreeFault::kNone;
  int32_t lmdb_rc = 0;
  uint64_t entries = 0;  // entries walked
};

// One mapping of the store's file (offset 0) in this process.
struct MappedRange {
  uintptr_t begin = 0, end = 0;
};
constexpr size_t kMaxRanges = 16;

// The mappings of the file (device, inode) at offset 0 in /proc/self/maps, at most kMaxRanges:
// LMDB does not say where it mapped the file. Another reader of the same file in this process
// has a mapping of its own; the child picks the one that holds the first key.
size_t FileMappings(dev_t dev, ino_t ino, MappedRange* ranges) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  size_t n = 0;
  while (n < kMaxRanges && std::getline(maps, line)) {
    unsigned long start, end, offset, inode;
    unsigned int major, minor;
    char perms[8];
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %x:%x %lu", &start, &end, perms, &offset, &major,
                    &minor, &inode) != 7) {
      continue;
    }
    if (inode == ino && makedev(major, minor) == dev && offset == 0) {
      ranges[n++] = {static_cast<uintptr_t>(start), static_cast<uintptr_t>(end)};
    }
  }
  return n;
}

// The walk itself, in the child. No allocation, no logging: LMDB's read functions only.
TreeReport WalkTree(MDB_txn* txn, MDB_dbi dbi, MDB_cursor* cursor, uint64_t expected,
                    const MappedRange* ranges, size_t nranges, uint64_t file_size) {
  TreeReport r;
  uintptr_t lo = 0, hi = 0;  // the file's bytes in the map that holds the first key
  auto inside = [&](const MDB_val& v) {
    uintptr_t p = reinterpret_cast<uintptr_t>(v.mv_data);
    return nranges == 0 || (p >= lo && p <= hi && v.mv_size <= hi - p);
  };
  MDB_val key, value, prev{0, nullptr};
  int rc = mdb_cursor_get(cursor, &key, &value, MDB_FIRST);
  for (; rc == 0; rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)) {
    if (r.entries == 0 && nranges > 0) {
      uintptr_t p = reinterpret_cast<uintptr_t>(key.mv_data);
      for (size_t i = 0; i < nranges; ++i) {
        if (p >= ranges[i].begin && p < ranges[i].end) {
          lo = ranges[i].begin;
          hi = lo + std::min<uint64_t>(file_size, ranges[i].end - ranges[i].begin);
        }
      }
    }
    // Before anything reads them: a key LMDB would compare, a value dsfs would read.
    if (!inside(key) || !inside(value)) {
      r.fault = TreeFault::kOutsideFile;
      return r;
    }
    if (++r.entries > expected) {
      r.fault = TreeFault::kTooMany;
      return r;
    }
    if (r.entries > 1 && mdb_cmp(txn, dbi, &prev, &key) >= 0) {
      r.fault = TreeFault::kKeyOrder;
      return r;
    }
    MDB_val found;
    int g = mdb_get(txn, dbi, &key, &found);
    if (g != 0) {
      r.fault = g == MDB_NOTFOUND ? TreeFault::kKeyLost : TreeFault::kLmdbError;
      r.lmdb_rc = g;
      return r;
    }
    if (found.mv_data != value.mv_data || found.mv_size != value.mv_size) {
      r.fault = TreeFault::kOtherValue;
      return r;
    }
    prev = key;  // points into the map, valid for the whole read-only transaction
  }
  if (rc != MDB_NOTFOUND) {
    r.fault = TreeFault::kLmdbError;
    r.lmdb_rc = rc;
  } else if (r.entries != expected) {
    r.fault = TreeFault::kTooFew;
  }
  return r;
}

[[noreturn]] void TreeCheckChild(pid_t parent, int report_fd, MDB_txn* txn, MDB_dbi dbi,
                                 MDB_cursor* cursor, uint64_t expected, const MappedRange* ranges,
                                 size_t nranges, uint64_t file_size) {
  // Ends with the process that waits for it; never leaves a core file of a crash it was
  // made to have.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) _exit(2);
  ::prctl(PR_SET_DUMPABLE, 0);
  // Default actions: a fault kills it (whatever handlers the parent has, e.g. a sanitizer's),
  // and so does an interrupt of the command it belongs to.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS, SIGINT, SIGTERM,
                  SIGHUP, SIGPIPE}) {
    ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Nothing it could print (LMDB's assertions) reaches the command's stderr: the parent says
  // what happened, in one line. It keeps no other descriptor open, so the pipe of a check
  // another thread runs at the same time sees its end when that check's child exits.
  if (report_fd < 3) report_fd = ::fcntl(report_fd, F_DUPFD, 3);
  int null = ::open("/dev/null", O_RDWR);
  if (null >= 0) {
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
  }
  if (report_fd > 3) ::close_range(3, static_cast<unsigned>(report_fd) - 1, 0);
  if (report_fd >= 3) ::close_range(static_cast<unsigned>(report_fd) + 1, ~0u, 0);
  TreeReport r = WalkTree(txn, dbi, cursor, expected, ranges, nranges, file_size);
  ssize_t n = ::write(report_fd, &r, sizeof(r));
  _exit(n == static_cast<ssize_t>(sizeof(r)) ? 0 : 3);
}

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

bool IsFaultSignal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGABRT ||
         sig == SIGTRAP || sig == SIGSYS;
}

}  // namespace

Status CheckTree(MDB_env* env, MDB_dbi dbi, const std::string& path, const struct stat& st,
                 std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
  if (rc != 0) return LmdbError(rc, "starting a read transaction", path);
  MDB_stat ds;
  rc = mdb_stat(txn, dbi, &ds);
  MDB_cursor* cursor = nullptr;
  if (rc == 0) rc = mdb_cursor_open(txn, dbi, &cursor);
  if (rc != 0) {
    mdb_txn_abort(txn);
    return LmdbError(rc, "opening a cursor", path);
  }
  MappedRange ranges[kMaxRanges];
  size_t nranges = FileMappings(st.st_dev, st.st_ino, ranges);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    int err = errno;
    mdb_cursor_close(cursor);
    mdb_txn_abort(txn);
    return Status::FromErrno(err, path + ": checking its LMDB B-tree: pipe");
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    TreeCheckChild(parent, fds[1], txn, dbi, cursor, ds.ms_entries, ranges, nranges,
                   static_cast<uint64_t>(st.st_size));
  }
  const int fork_errno = errno;
  // The child has its own copy of the transaction; this process is done with it.
  mdb_cursor_close(cursor);
  mdb_txn_abort(txn);
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return Status::FromErrno(fork_errno, path + ": checking its LMDB B-tree: fork");
  }
  // Its report, its end (the pipe's end of file), or the deadline.
  TreeReport report;
  size_t got = 0;
  bool timed_out = false;
  const auto deadline = start + timeout;
  while (got < sizeof(report)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    struct pollfd p = {fds[0], POLLIN, 0};
    int prc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30)));
    if (prc < 0 && errno != EINTR) break;
    if (prc <= 0) continue;
    ssize_t n = ::read(fds[0], reinterpret_cast<char*>(&report) + got, sizeof(report) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int wstatus = 0;
  pid_t w;
  do {
    w = ::waitpid(pid, &wstatus, 0);
  } while (w < 0 && errno == EINTR);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (timed_out) {
    return Status::IOError(path + ": the check of its LMDB B-tree did not finish in " +
                           std::to_string(timeout.count() / 1000) +
                           " s (a damaged store, or a stalled disk)");
  }
  const std::string damaged = path + ": damaged store: its LMDB B-tree is inconsistent (";
  if (got < sizeof(report)) {
    // It ended without a report: how?
    if (w == pid && WIFSIGNALED(wstatus)) {
      int sig = WTERMSIG(wstatus);
      if (IsFaultSignal(sig)) {
        return Status::Corruption(damaged + "the check died of " + SignalName(sig) + ")");
      }
      return Status::IOError(path + ": the check of its LMDB B-tree was ended by " +
                             SignalName(sig));
    }
    if (w == pid && WIFEXITED(wstatus)) {
      return Status::Corruption(damaged + "the check exited with status " +
                                std::to_string(WEXITSTATUS(wstatus)) + ")");
    }
    return Status::Corruption(damaged + "the check ended without a report)");
  }
  // An if-chain, not a switch: clang's AddressSanitizer reports a stack-use-after-scope for
  // the temporaries of a switch's cases (the logger's shared_ptr) that jump past each other.
  const TreeFault f = report.fault;
  const std::string entry = std::to_string(report.entries);
  if (f == TreeFault::kNone) {
    Log()->debug(
        "checked the LMDB B-tree of {}: {} entries, {} branch and {} leaf pages in {:.1f} ms", path,
        report.entries, ds.ms_branch_pages, ds.ms_leaf_pages, ms);
    return Status::OK();
  }
  std::string why;
  if (f == TreeFault::kLmdbError) {
    why = std::string(mdb_strerror(report.lmdb_rc)) + " after " + entry + " entries";
  } else if (f == TreeFault::kKeyOrder) {
    why = "entry " + entry + " is out of order";
  } else if (f == TreeFault::kKeyLost) {
    why = "a lookup does not find entry " + entry;
  } else if (f == TreeFault::kOtherValue) {
    why = "a lookup of entry " + entry + " finds another value";
  } else if (f == TreeFault::kTooMany || f == TreeFault::kTooFew) {
    why = entry + (f == TreeFault::kTooMany ? " or more" : "") + " entries where it records " +
          std::to_string(ds.ms_entries);
  } else if (f == TreeFault::kOutsideFile) {
    why = "entry " + std::to_string(report.entries + 1) + " lies outside the file";
  } else {
    why = "an unknown report";
  }
  return Status::Corruption(damaged + why + ")");
}

std::chrono::milliseconds DefaultCheckTimeout(MDB_env* env) {
  MDB_stat st;
  uint64_t pages = mdb_env_stat(env, &st) == 0 ? st.ms_branch_pages + st.ms_leaf_pages : 0;
  // 60 s, and 10 ms per page to read (a disk seek each), at most 10 minutes.
  return std::chrono::milliseconds(60'000 + std::min<uint64_t>(pages, 54'000) * 10);
}

}  // namespace dsfs::lmdb
