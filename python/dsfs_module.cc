// The Python extension module dsfs._dsfs: a store read in the calling process, without FUSE.
//
// It assembles what a mount assembles (mount/mount.cc, Serve): the RAM cache sized from the
// memory limit, the store, and the FUSE-free Filesystem (fs/), whose paths are the mount's,
// views and control directory included (.dsfs/bmp/..., .dsfs/tensor/DIR/images.npy). Nothing
// of fuse/, kernel/, mount/ or tools/ is linked (tests/python/test_module.py checks the
// shared object's dependencies).
//
// Every call that reads releases the GIL. A Store is safe to share between threads: the
// Filesystem is. After fork() (a DataLoader worker) the child reopens the store on its next
// call: LMDB, RocksDB and libcurl handles must not be used across a fork, nor can a mutex held
// by a parent thread at the fork be taken. The parent's objects are left to the child
// untouched (never destroyed there: their destructors would take those locks).
#include <pthread.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "backend/kv_open.h"
#include "common/log.h"
#include "common/memory_limit.h"
#include "common/path.h"
#include "common/status.h"
#include "common/units.h"
#include "fs/filesystem.h"
#include "fs/memory_guard.h"
#include "fs/views.h"
#include "s3/addressing.h"
#include "store/store.h"

namespace py = pybind11;

namespace dsfs {
namespace {

// Bumped in the child of every fork: a Store opened in an earlier generation reopens.
std::atomic<uint64_t> g_fork_generation{0};

// Every live Store's lock is taken across a fork (pthread_atfork), so that a child never
// inherits one that another thread of the parent held at that moment (it would wait on it for
// ever). Never destroyed: a fork may come during the interpreter's exit.
std::mutex& StoresMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::set<std::mutex*>& StoreLocks() {  // guarded by StoresMutex()
  static auto* locks = new std::set<std::mutex*>;
  return *locks;
}
void RegisterStoreLock(std::mutex* mu) {
  std::lock_guard<std::mutex> lock(StoresMutex());
  StoreLocks().insert(mu);
}
void UnregisterStoreLock(std::mutex* mu) {
  std::lock_guard<std::mutex> lock(StoresMutex());
  StoreLocks().erase(mu);
}
// The Store locks this thread holds (the store's own code forks too: the LMDB check's child,
// under a Store's lock when a child of fork reopens it): not taken again across that fork.
thread_local std::vector<std::mutex*> t_held;
std::vector<std::mutex*>& LockedForFork() {  // guarded by StoresMutex() across the fork
  static auto* locked = new std::vector<std::mutex*>;
  return *locked;
}
void BeforeFork() {
  StoresMutex().lock();
  for (std::mutex* mu : StoreLocks()) {
    if (std::find(t_held.begin(), t_held.end(), mu) != t_held.end()) continue;
    mu->lock();
    LockedForFork().push_back(mu);
  }
}
void AfterForkParent() {
  for (std::mutex* mu : LockedForFork()) mu->unlock();
  LockedForFork().clear();
  StoresMutex().unlock();
}
// A Store's lock, known to BeforeFork as this thread's.
class StoreLock {
 public:
  explicit StoreLock(std::mutex* mu) : mu_(mu) {
    mu_->lock();
    t_held.push_back(mu_);
  }
  ~StoreLock() {
    t_held.pop_back();
    mu_->unlock();
  }
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;

 private:
  std::mutex* mu_;
};
void AfterForkChild() {
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  AfterForkParent();  // the forking thread is the child's only one: it holds them
}

// A failed call: raised as OSError(errno, message, path), which Python turns into the errno's
// subclass (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError).
struct StatusError {
  int err;
  std::string message;
  std::string path;
};
// Bad options: ValueError.
struct OptionError {
  std::string message;
};

[[noreturn]] void Raise(const Status& s, std::string_view path) {
  throw StatusError{s.ToErrno(), s.message(), std::string(path)};
}
[[noreturn]] void RaiseErrno(int err, std::string_view what, std::string_view path) {
  throw StatusError{err, std::string(what), std::string(path)};
}

// What a Store is opened with: the mount's -o options that mean something without FUSE.
struct OpenConfig {
  std::string path;
  uint64_t cache_bytes = UINT64_MAX;  // UINT64_MAX: the mount's default
  bool cache_disk_set = false;
  StoreOptions store;
  FsOptions fs;
};

// The mount's options that only a mount has: refused by name rather than ignored.
bool IsMountOnlyOption(std::string_view key) {
  static const std::string_view kMountOnly[] = {
      "threads", "transport",   "push",  "preload",      "timeout",         "zero_open", "nice",
      "kernel",  "allow_other", "debug", "metrics_file", "status_interval", "log_file",  "ro"};
  for (std::string_view k : kMountOnly) {
    if (key == k) return true;
  }
  return false;
}

uint64_t OptionNumber(std::string_view key, const std::string& value, uint64_t min, uint64_t max) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || value[0] == '-' || *end != '\0' || errno != 0 || v < min || v > max) {
    throw OptionError{"option " + std::string(key) + "=" + value + ": not a whole number from " +
                      std::to_string(min) + " to " + std::to_string(max)};
  }
  return v;
}

uint64_t OptionSize(std::string_view key, const std::string& value) {
  uint64_t bytes = 0;
  Status s = ParseSize(value, &bytes);
  if (!s.ok()) throw OptionError{"option " + std::string(key) + ": " + s.message()};
  return bytes;
}

void NeedFlag(std::string_view key, const std::string& value) {
  if (!value.empty()) throw OptionError{"option " + std::string(key) + " takes no value"};
}

void ApplyOption(const std::string& key, const std::string& value, OpenConfig* c) {
  if (key == "cache_size") {
    c->cache_bytes = OptionSize(key, value);
  } else if (key == "cache_dir") {
    if (value.empty()) throw OptionError{"option cache_dir needs a path"};
    c->store.kv.cache_dir = std::filesystem::absolute(value).lexically_normal().string();
  } else if (key == "cache_disk") {
    c->store.kv.cache_disk_bytes = OptionSize(key, value);
    c->cache_disk_set = true;
  } else if (key == "s3_attempts") {
    c->store.kv.remote_attempts = static_cast<int>(OptionNumber(key, value, 1, 1000));
  } else if (key == "s3_timeout") {
    c->store.kv.remote_timeout_s = static_cast<int>(OptionNumber(key, value, 1, 86400));
  } else if (key == "s3_anonymous") {
    NeedFlag(key, value);
    c->store.kv.s3.anonymous = true;
  } else if (key == "s3_addressing") {
    Status s = ParseS3Addressing(value, &c->store.kv.s3.addressing);
    if (!s.ok()) throw OptionError{"option s3_addressing: " + s.message()};
  } else if (key == "os_readahead") {
    c->store.kv.random_access = OptionNumber(key, value, 0, 1) == 0;
  } else if (key == "view") {
    Status s = ParseView(value, &c->fs.view);
    if (!s.ok()) throw OptionError{"option view: " + s.message()};
  } else if (key == "uid") {
    c->fs.uid = static_cast<uid_t>(OptionNumber(key, value, 0, UINT32_MAX - 1));
  } else if (key == "gid") {
    c->fs.gid = static_cast<gid_t>(OptionNumber(key, value, 0, UINT32_MAX - 1));
  } else if (key == "umask") {
    char* end = nullptr;
    const unsigned long mask = std::strtoul(value.c_str(), &end, 8);
    if (value.empty() || *end != '\0' || mask > 0777) {
      throw OptionError{"option umask=" + value + ": not an octal mode (0 to 0777)"};
    }
    c->fs.umask = static_cast<mode_t>(mask);
  } else if (key == "log_level") {
    if (!IsLogLevel(value)) {
      throw OptionError{"option log_level=" + value +
                        ": not one of trace, debug, info, warn, error, off"};
    }
    SetLogLevel(value);
  } else if (IsMountOnlyOption(key)) {
    throw OptionError{"option " + key + " is a mount's (FUSE or the kernel's), not a Store's"};
  } else {
    throw OptionError{"unknown option '" + key + "'"};
  }
}

// The S3 disk cache's default directory, as `dsfs mount` has it (tools/cmd_cache.cc).
std::string DefaultCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/dsfs";
  return std::string(home && home[0] == '/' ? home : "/root") + "/.cache/dsfs";
}

OpenConfig ParseConfig(const std::string& path, const std::map<std::string, std::string>& options) {
  if (path.empty()) throw OptionError{"no store path given"};
  if (Status s = CheckUrlScheme(path, kStoreSources); !s.ok()) throw OptionError{s.message()};
  OpenConfig c;
  c.path = path;
  for (const auto& [key, value] : options) ApplyOption(key, value, &c);
  if (IsRemoteStore(path)) {
    // As a mount: what was fetched is kept on the local disk unless told otherwise.
    if (!c.cache_disk_set) c.store.kv.cache_disk_bytes = 8ull << 30;
    if (c.store.kv.cache_dir.empty() && c.store.kv.cache_disk_bytes > 0) {
      c.store.kv.cache_dir = DefaultCacheDir();
    }
  }
  return c;
}

// One opened store: the cache, the Filesystem over the store, and the guard that sheds the
// cache before the memory limit is reached (as a mount's daemon: the process's own memory, a
// model, batches, is charged to the same limit).
struct Opened {
  std::shared_ptr<ByteCache> cache;
  uint64_t full_cache_bytes = 0;  // its capacity before a share (Store.share_cache)
  std::shared_ptr<Filesystem> fs;
  std::unique_ptr<MemoryGuard> guard;  // last: stopped before the cache goes

  // (Re)starts the guard at the cache's capacity now (the guard's policy never raises the
  // capacity above what it started with).
  void Guard() {
    guard.reset();
    if (cache && cache->capacity_bytes() > 0) {
      guard = std::make_unique<MemoryGuard>(cache.get(), ProcessMemoryLimit());
    }
  }
};

// As mount/mount.cc's Serve assembles a mount, without the mount.
Status OpenStore(const OpenConfig& c, unsigned share, Opened* out) {
  StoreOptions so = c.store;
  const MemoryBudgets& budgets = DefaultBudgets();
  const bool default_cache = c.cache_bytes == UINT64_MAX;
  const uint64_t cache_bytes =
      default_cache ? std::max(budgets.cache_bytes, budgets.tight_cache_bytes) : c.cache_bytes;
  if (cache_bytes > 0) so.cache = std::make_shared<ByteCache>(cache_bytes);
  std::unique_ptr<Store> store;
  DSFS_RETURN_IF_ERROR(Store::Open(c.path, so, &store));
  out->full_cache_bytes = default_cache ? DefaultMountCacheBytes(*store) : cache_bytes;
  if (so.cache) so.cache->SetCapacity(out->full_cache_bytes / std::max(1u, share));
  FsOptions fo = c.fs;
  fo.max_render_bytes = so.cache ? so.cache->max_value_bytes() : 0;
  out->cache = so.cache;
  out->fs = std::make_shared<Filesystem>(std::move(store), fo, so.cache);
  out->Guard();
  return Status::OK();
}

// Python's os.fsencode of a path argument (str, bytes or os.PathLike).
std::string PathArg(py::handle h) {
  py::object p = py::reinterpret_steal<py::object>(PyOS_FSPath(h.ptr()));
  if (!p) throw py::error_already_set();
  if (PyUnicode_Check(p.ptr())) {
    p = py::reinterpret_steal<py::object>(PyUnicode_EncodeFSDefault(p.ptr()));
    if (!p) throw py::error_already_set();
  }
  char* data = nullptr;
  Py_ssize_t n = 0;
  if (PyBytes_AsStringAndSize(p.ptr(), &data, &n) != 0) throw py::error_already_set();
  std::string path(data, static_cast<size_t>(n));
  if (path.find('\0') != std::string::npos) throw py::value_error("embedded null byte");  // as os
  return path;
}

// os.fsdecode of a name.
py::str FsName(std::string_view name) {
  PyObject* o = PyUnicode_DecodeFSDefaultAndSize(name.data(), static_cast<Py_ssize_t>(name.size()));
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

constexpr int kMaxSymlinkHops = 40;  // the kernel's MAXSYMLINKS

class PyStore {
 public:
  PyStore(py::handle path, const std::map<std::string, std::string>& options)
      : config_(ParseConfig(PathArg(path), options)), options_(options) {
    Status s;
    {
      py::gil_scoped_release release;
      s = OpenStore(config_, share_, &opened_);
    }
    if (!s.ok()) Raise(s, "");  // the store's message names the path
    generation_ = g_fork_generation.load(std::memory_order_relaxed);
    RegisterStoreLock(&mu_);
  }
  ~PyStore() {
    UnregisterStoreLock(&mu_);
    // A copy inherited over a fork is left as it is (see the top of this file).
    if (generation_ != g_fork_generation.load(std::memory_order_relaxed)) {
      new Opened(std::move(opened_));  // NOLINT: deliberately never freed
    }
  }

  const std::string& path() const { return config_.path; }
  const std::map<std::string, std::string>& options() const { return options_; }

  // The Filesystem of this process (reopened after a fork). GIL released by the caller.
  std::shared_ptr<Filesystem> Fs() {
    StoreLock lock(&mu_);
    ReopenAfterForkLocked();
    return opened_.fs;
  }

  // Resolves `path` (relative to the root; "" and "/" are the root) to a FUSE inode number,
  // following symbolic links on the way (and the last component's when `follow`).
  uint64_t Resolve(const Filesystem& fs, std::string_view path, bool follow, struct stat* st) {
    std::vector<uint64_t> stack{1};
    stack.reserve(8);
    int hops = 0;
    st->st_mode = S_IFDIR;  // the root: its attributes are read only if it is the answer
    st->st_ino = 0;
    Walk(fs, path, follow, &stack, &hops, st, path);
    if (st->st_ino != stack.back()) {  // the root, or a directory reached by "." in a link
      Status s = fs.GetAttr(1, st);
      if (!s.ok()) Raise(s, path);
    }
    return stack.back();
  }

  // Python-facing calls.
  py::tuple Stat(py::handle path_obj, bool follow) {
    const std::string path = PathArg(path_obj);
    struct stat st;
    {
      py::gil_scoped_release release;
      std::shared_ptr<Filesystem> fs = Fs();
      Resolve(*fs, path, follow, &st);
    }
    return py::make_tuple(st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid,
                          st.st_size, st.st_atim.tv_sec, st.st_mtim.tv_sec, st.st_ctim.tv_sec);
  }

  // (name, mode, FUSE inode) of each entry of a directory (the mode of the entry itself: a
  // link is a link).
  py::list ScanDir(py::handle path_obj) {
    const std::string path = PathArg(path_obj);
    struct Entry {
      std::string name;
      uint32_t mode;
      uint64_t ino;
    };
    std::vector<Entry> entries;
    {
      py::gil_scoped_release release;
      std::shared_ptr<Filesystem> fs = Fs();
      struct stat st;
      const uint64_t ino = Resolve(*fs, path, true, &st);
      if (!S_ISDIR(st.st_mode)) RaiseErrno(ENOTDIR, "Not a directory", path);
      Status s = fs->ReadDir(ino, 2, [&](std::string_view name, const struct stat& e, uint64_t) {
        entries.push_back({std::string(name), static_cast<uint32_t>(e.st_mode), e.st_ino});
        return true;
      });
      if (!s.ok()) Raise(s, path);
    }
    py::list out(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      out[i] = py::make_tuple(FsName(entries[i].name), entries[i].mode, entries[i].ino);
    }
    return out;
  }

  py::list ListDir(py::handle path_obj) {
    py::list scanned = ScanDir(path_obj);
    py::list out(scanned.size());
    for (size_t i = 0; i < scanned.size(); ++i) out[i] = scanned[i].cast<py::tuple>()[0];
    return out;
  }

  py::str ReadLinkPy(py::handle path_obj) {
    const std::string path = PathArg(path_obj);
    std::string target;
    {
      py::gil_scoped_release release;
      std::shared_ptr<Filesystem> fs = Fs();
      struct stat st;
      const uint64_t ino = Resolve(*fs, path, false, &st);
      if (!S_ISLNK(st.st_mode)) RaiseErrno(EINVAL, "Invalid argument: not a symbolic link", path);
      std::string_view t;
      Status s = fs->ReadLink(ino, &t);
      if (!s.ok()) Raise(s, path);
      target.assign(t);
    }
    return FsName(target);
  }

  // The FUSE inode and size of regular file `path` (links followed), for the file objects.
  py::tuple OpenFile(py::handle path_obj) {
    const std::string path = PathArg(path_obj);
    struct stat st;
    uint64_t ino;
    {
      py::gil_scoped_release release;
      std::shared_ptr<Filesystem> fs = Fs();
      ino = ResolveFile(*fs, path, &st);
    }
    return py::make_tuple(ino, st.st_size);
  }

  // The whole of regular file `path`.
  py::bytes ReadPath(py::handle path_obj) {
    const std::string path = PathArg(path_obj);
    ReadBuffer buf;
    std::string_view out;
    std::shared_ptr<Filesystem> fs;
    {
      py::gil_scoped_release release;
      fs = Fs();
      struct stat st;
      const uint64_t ino = ResolveFile(*fs, path, &st);
      ReadAll(*fs, ino, static_cast<uint64_t>(st.st_size), &buf, &out, path);
    }
    py::bytes b(out.data(), out.size());
    {
      py::gil_scoped_release release;
      buf = ReadBuffer();  // a pinned chunk is let go without the GIL
      fs.reset();
    }
    return b;
  }

  // (width, height, RGB bytes) of image file `path` as the views decode it (what PIL's
  // Image.open(f).convert("RGB") gives), or None for a file they serve as it is.
  py::object PixelsPath(py::handle path_obj, bool keep) {
    const std::string path = PathArg(path_obj);
    ByteCache::Value px;
    bool decoded = false;
    uint32_t w = 0, h = 0;
    std::shared_ptr<Filesystem> fs;
    {
      py::gil_scoped_release release;
      fs = Fs();
      struct stat st;
      const uint64_t ino = ResolveFile(*fs, path, &st);
      Status s = fs->DecodedPixels(ino, keep, &decoded, &w, &h, &px);
      if (!s.ok()) Raise(s, path);
    }
    if (!decoded) return py::none();
    py::bytes b(px->data(), px->size());
    {
      py::gil_scoped_release release;
      px.reset();
      fs.reset();
    }
    return py::make_tuple(w, h, std::move(b));
  }

  // Up to `size` bytes at `offset` of the file with FUSE inode `ino` (OpenFile's).
  py::bytes ReadAt(uint64_t ino, uint64_t offset, uint64_t size) {
    ReadBuffer buf;
    std::string_view out;
    std::shared_ptr<Filesystem> fs;
    {
      py::gil_scoped_release release;
      fs = Fs();
      ReadAll(*fs, ino, size, &buf, &out, "", offset);
    }
    return py::bytes(out.data(), out.size());
  }

  // Reads into a writable buffer at `offset` of file `ino`: the bytes read.
  size_t ReadInto(uint64_t ino, uint64_t offset, py::handle target) {
    // As FileIO.readinto: one contiguous writable buffer (a strided view is refused, never
    // written past).
    Py_buffer view;
    if (PyObject_GetBuffer(target.ptr(), &view, PyBUF_WRITABLE) != 0) {
      if (!PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_TypeError)) {
        throw py::error_already_set();  // e.g. numpy's "ndarray is not C-contiguous"
      }
      PyErr_Clear();
      throw py::type_error(
          std::string("readinto() argument must be read-write bytes-like object, not ") +
          Py_TYPE(target.ptr())->tp_name);
    }
    std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> release_view(&view, PyBuffer_Release);
    char* dst = static_cast<char*>(view.buf);
    const uint64_t want = static_cast<uint64_t>(view.len);
    uint64_t done = 0;
    {
      py::gil_scoped_release release;
      std::shared_ptr<Filesystem> fs = Fs();
      ReadBuffer buf;
      while (done < want) {
        std::string_view out;
        Status s = fs->Read(ino, offset + done, want - done, &buf, &out);
        if (!s.ok()) Raise(s, "");
        if (out.empty()) break;
        std::memcpy(dst + done, out.data(), out.size());
        done += out.size();
      }
    }
    return done;
  }

  // Lowers this process's RAM cache to 1/n of its budget (n DataLoader workers share the
  // memory limit); applies to the store reopened after a fork too.
  void ShareCache(int64_t n) {
    if (n < 1 || n > 65536) {
      throw OptionError{"share_cache(" + std::to_string(n) +
                        "): n is a count of processes, 1 to 65536"};
    }
    py::gil_scoped_release release;
    StoreLock lock(&mu_);
    share_ = static_cast<unsigned>(n);
    ReopenAfterForkLocked();  // never the parent's guard: its thread is not in this process
    if (opened_.cache) {
      opened_.guard.reset();  // the only other writer of the capacity
      opened_.cache->SetCapacity(opened_.full_cache_bytes / share_);
      opened_.Guard();
    }
  }

  py::dict Info() {
    std::shared_ptr<Filesystem> fs;
    {
      py::gil_scoped_release release;
      fs = Fs();
    }
    const Store& s = fs->store();
    py::dict d;
    d["backend"] = std::string(s.backend_name());
    d["remote"] = s.remote();
    d["files"] = s.header().file_count;
    d["inodes"] = s.inode_count();
    d["file_bytes"] = s.header().file_bytes;
    d["cache_bytes"] = opened_.cache ? opened_.cache->capacity_bytes() : 0;
    d["view"] = ViewName(fs->options().view);
    {
      StoreLock lock(&mu_);
      d["memory_guard"] = opened_.guard ? opened_.guard->stats().watching : std::string();
    }
    return d;
  }

 private:
  // In the child of a fork: the parent's objects left untouched, the store opened anew.
  void ReopenAfterForkLocked() {
    const uint64_t gen = g_fork_generation.load(std::memory_order_relaxed);
    if (gen == generation_) return;
    new Opened(std::move(opened_));  // NOLINT: the parent's, never freed here
    opened_ = Opened();
    Status s = OpenStore(config_, share_, &opened_);
    if (!s.ok()) Raise(s, "");
    generation_ = gen;
  }

  // Walks the components of `path` from the directory on top of *stack.
  void Walk(const Filesystem& fs, std::string_view path, bool follow, std::vector<uint64_t>* stack,
            int* hops, struct stat* st, std::string_view whole) {
    if (!path.empty() && path[0] == '/') stack->resize(1);
    size_t pos = 0;
    while (pos < path.size()) {
      size_t slash = path.find('/', pos);
      if (slash == std::string_view::npos) slash = path.size();
      const std::string_view name = path.substr(pos, slash - pos);
      size_t next = slash;
      while (next < path.size() && path[next] == '/') ++next;
      const bool last = next >= path.size();
      const bool trailing_slash = slash < path.size();
      pos = next;
      if (name.empty() || name == ".") continue;
      if (!S_ISDIR(st->st_mode)) RaiseErrno(ENOTDIR, "Not a directory", whole);
      if (name == "..") {
        if (stack->size() > 1) stack->pop_back();
        Status s = fs.GetAttr(stack->back(), st);
        if (!s.ok()) Raise(s, whole);
        continue;
      }
      Status s = fs.Lookup(stack->back(), name, st);
      if (!s.ok()) {
        if (s.IsNotFound()) RaiseErrno(ENOENT, "No such file or directory", whole);
        Raise(s, whole);
      }
      if (S_ISLNK(st->st_mode) && (!last || follow || trailing_slash)) {
        if (++*hops > kMaxSymlinkHops)
          RaiseErrno(ELOOP, "Too many levels of symbolic links", whole);
        std::string_view target;
        s = fs.ReadLink(st->st_ino, &target);
        if (!s.ok()) Raise(s, whole);
        const std::string copy(target);
        // An absolute target names the host's tree, not the store's: as a dangling link.
        if (!copy.empty() && copy[0] == '/') RaiseErrno(ENOENT, "No such file or directory", whole);
        st->st_mode = S_IFDIR;  // the directory holding the link
        st->st_ino = 0;
        Walk(fs, copy, true, stack, hops, st, whole);
        continue;
      }
      stack->push_back(st->st_ino);
    }
  }

  uint64_t ResolveFile(const Filesystem& fs, std::string_view path, struct stat* st) {
    const uint64_t ino = Resolve(fs, path, true, st);
    if (S_ISDIR(st->st_mode)) RaiseErrno(EISDIR, "Is a directory", path);
    if (!S_ISREG(st->st_mode)) RaiseErrno(EINVAL, "Invalid argument: not a regular file", path);
    return ino;
  }

  // Reads [offset, offset + size) whole (Filesystem::Read may return less, e.g. at a chunk's
  // end: the rest is appended to buf->bytes).
  void ReadAll(const Filesystem& fs, uint64_t ino, uint64_t size, ReadBuffer* buf,
               std::string_view* out, std::string_view path, uint64_t offset = 0) {
    Status s = fs.Read(ino, offset, size, buf, out);
    if (!s.ok()) Raise(s, path);
    if (out->size() >= size || out->empty()) return;
    std::string whole(*out);
    ReadBuffer more;
    while (whole.size() < size) {
      std::string_view part;
      s = fs.Read(ino, offset + whole.size(), size - whole.size(), &more, &part);
      if (!s.ok()) Raise(s, path);
      if (part.empty()) break;
      whole.append(part);
    }
    *buf = ReadBuffer();
    buf->bytes = std::move(whole);
    *out = buf->bytes;
  }

  OpenConfig config_;
  std::map<std::string, std::string> options_;
  std::mutex mu_;  // guards opened_, generation_, share_
  Opened opened_;
  uint64_t generation_ = 0;
  unsigned share_ = 1;
};

// The PyStore of `self`, for a method called on it. One made by _Store.__new__ without
// __init__ has no store (pybind11 would hand the method uninitialized memory): TypeError.
PyStore& Self(py::handle self) {
  if (!py::isinstance<PyStore>(self)) throw py::type_error("not a dsfs.Store");
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  py::detail::value_and_holder vh =
      inst->get_value_and_holder(py::detail::get_type_info(typeid(PyStore)));
  if (!vh.holder_constructed()) {
    throw py::type_error("dsfs.Store: not opened (its __init__ did not run)");
  }
  return *vh.value_ptr<PyStore>();
}

template <typename R, typename... A>
auto Method(R (PyStore::*m)(A...)) {
  return [m](py::handle self, A... a) -> R { return (Self(self).*m)(std::forward<A>(a)...); };
}

}  // namespace
}  // namespace dsfs

PYBIND11_MODULE(_dsfs, m) {
  using dsfs::Method;
  using dsfs::PyStore;
  using dsfs::Self;
  m.doc() = "dsfs's store reader (the C++ part of the dsfs package; use dsfs.Store)";
  ::pthread_atfork(dsfs::BeforeFork, dsfs::AfterForkParent, dsfs::AfterForkChild);
  dsfs::SetLogLevel("warn");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const dsfs::StatusError& e) {
      py::object err = e.path.empty()
                           ? py::reinterpret_borrow<py::object>(PyExc_OSError)(e.err, e.message)
                           : py::reinterpret_borrow<py::object>(PyExc_OSError)(
                                 e.err, e.message, dsfs::FsName(e.path));
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
    } catch (const dsfs::OptionError& e) {
      PyErr_SetString(PyExc_ValueError, e.message.c_str());
    }
  });

  py::class_<PyStore>(m, "_Store")
      .def(py::init<py::handle, const std::map<std::string, std::string>&>(), py::arg("path"),
           py::arg("options"))
      .def_property_readonly(
          "path", [](py::handle self) { return Self(self).path(); },
          "The store's path or s3:// URL, as given to Store().")
      .def_property_readonly("_options", [](py::handle self) { return Self(self).options(); })
      .def("_stat", Method(&PyStore::Stat), py::arg("path"), py::arg("follow_symlinks"))
      .def("_scandir", Method(&PyStore::ScanDir), py::arg("path"))
      .def("listdir", Method(&PyStore::ListDir), py::arg("path") = "",
           "listdir(path='') -> list of str\n\nThe names in directory `path` (relative to the "
           "store's root; links followed), in the store's order (sorted by bytes), without '.' "
           "and '..'. NotADirectoryError, FileNotFoundError as os.listdir.")
      .def("readlink", Method(&PyStore::ReadLinkPy), py::arg("path"),
           "readlink(path) -> str\n\nThe target of symbolic link `path`, as os.readlink.")
      .def("read", Method(&PyStore::ReadPath), py::arg("path"),
           "read(path) -> bytes\n\nThe whole of file `path` (links followed), the GIL released "
           "while it is read. FileNotFoundError, IsADirectoryError, OSError(EIO) with the store's "
           "message for damaged data (never wrong bytes).")
      .def("_open", Method(&PyStore::OpenFile), py::arg("path"))
      .def("_pixels", Method(&PyStore::PixelsPath), py::arg("path"), py::arg("keep") = false)
      .def("_read_at", Method(&PyStore::ReadAt), py::arg("ino"), py::arg("offset"), py::arg("size"))
      .def("_readinto_at", Method(&PyStore::ReadInto), py::arg("ino"), py::arg("offset"),
           py::arg("buffer"))
      .def("share_cache", Method(&PyStore::ShareCache), py::arg("n"),
           "share_cache(n)\n\nGives this process 1/n of the RAM cache's budget (n processes "
           "reading one store inside one memory limit, e.g. DataLoader workers; "
           "dsfs.torch's datasets call it in each worker).")
      .def("info", Method(&PyStore::Info),
           "info() -> dict\n\nThe store's backend, file count and bytes, and this process's "
           "RAM cache budget (lowered by the memory guard under pressure) and what the memory "
           "guard watches (memory_guard: a cgroup, physical memory).");
}
