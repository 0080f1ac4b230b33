// FileWatch: a file a long-lived reader serves from (a mounted store), watched for changes made
// to it under the reader, and guarded so that a memory map of it outlives them.
//
// An admin who copies a new store over a mounted one (`cp new.db mounted.db`) truncates and
// rewrites the very inode the daemon has open and mapped: a read of a mapped page past the
// file's new end kills the process with SIGBUS. So:
//
//  - The fault guard, a process-wide SIGBUS handler (SA_SIGINFO), installed with the first
//    watch of a mapping. A fault in a registered mapping gets zeros mapped over what it lost
//    (from the file's new end to the mapping's end when the file now ends before the faulting
//    page; only that page when it lies inside the file, a page the disk could not read), and the
//    faulting load resumes and reads zeros, which the store's checksums refuse (EIO): never wrong
//    bytes. The zeros stay for the mapping's life. Any other SIGBUS gets the action that was there
//    before (by default: death, with a core). The handler only calls async-signal-safe system calls
//    (fstat, mmap, write) and touches lock-free atomics.
//  - The watch: one thread per process, started with the first watch, waits on inotify
//    (IN_MODIFY: a write to or a truncation of a watched inode) and on the fault guard's
//    wake-ups, and calls the watch's callback in normal context, where it may log, read the
//    file and take locks. A rename over the file's path (`mv new.db mounted.db`) is no change:
//    the reader keeps its inode, which nothing modifies.
//
// Thread safety: Start and the destructor may be called from any thread; faults() too. The
// callbacks run one at a time on the watch thread, under the watch's lock: a callback must not
// start or destroy a FileWatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace dsfs {

class FileWatch {
 public:
  enum class Event {
    kModified,  // inotify saw a write to or a truncation of the file
    kFaulted,   // a read of the guarded mapping faulted and was given zeros (see faults())
  };
  using Callback = std::function<void(Event)>;

  // Watches the file open as `fd` (its inode) and guards [map, map + map_bytes), a shared
  // mapping of it from offset 0 (null: no mapping). `fd` must stay open, and the mapping
  // mapped, until the watch is destroyed. `on_change` (may be empty) is called on the watch
  // thread after changes: at least once after each burst of them, never after the destructor
  // returns. Never fails: where inotify is not to be had (too many watches, a filesystem
  // without it) the file is not watched (said at debug level) but the mapping is still
  // guarded; where more mappings are guarded than the guard has room for (kMaxGuarded), the
  // mapping is not guarded (a warning) and a fault there kills the process as before.
  static std::unique_ptr<FileWatch> Start(int fd, const void* map, size_t map_bytes,
                                          Callback on_change);
  ~FileWatch();
  FileWatch(const FileWatch&) = delete;
  FileWatch& operator=(const FileWatch&) = delete;

  // Faults of the guarded mapping given zeros so far.
  uint64_t faults() const;

  // Mappings that can be guarded at once in a process.
  static constexpr size_t kMaxGuarded = 256;

 private:
  friend class WatchThread;
  FileWatch() = default;

  int slot_ = -1;             // the guard's slot of the mapping; -1: none
  int wd_ = -1;               // inotify watch descriptor; -1: none
  uint64_t seen_faults_ = 0;  // faults the callback has been told of (watch thread only)
  Callback on_change_;
};

}  // namespace dsfs
