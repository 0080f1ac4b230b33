#include "tests/support/test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <png.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dsfs::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/dsfs-test-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteFile(const std::string& path, std::string_view data, mode_t mode) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  f.close();
  if (!f) throw std::runtime_error("cannot write " + path);
  ::chmod(path.c_str(), mode);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    for (size_t k = 0; k < 8 && i + k < n; ++k) s[i + k] = static_cast<char>(v >> (8 * k));
  }
  return s;
}

std::string TextBytes(size_t n, uint32_t seed) {
  static const char* kWords[] = {"pixel ", "tensor ", "batch ", "epoch ", "class ",
                                 "image ", "store ",  "mount ", "read ",  "cache "};
  std::mt19937 rng(seed);
  std::string s;
  while (s.size() < n) s += kWords[rng() % 10];
  s.resize(n);
  return s;
}

CommandResult RunCommand(const std::vector<std::string>& argv, int timeout_s) {
  CommandResult r;
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) return r;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    _exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  struct pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  bool killed = false;
  char buf[65536];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    if (::poll(fds, 2, static_cast<int>(std::min<long>(left, 1000))) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& fd : fds) {
    if (fd.fd >= 0) ::close(fd.fd);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!killed && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

std::string ErrnoName(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

std::string Printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

namespace {
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void AddTestTransport(std::vector<std::string>* mount_args) {
  std::string t = TestTransport();
  if (t.empty()) return;
  for (const std::string& a : *mount_args) {
    if (a.find("transport=") != std::string::npos) return;
  }
  mount_args->insert(mount_args->end(), {"-o", "transport=" + t});
}

void AddTestMount(std::vector<std::string>* mount_args) {
  if (!KernelMountUnderTest()) return;
  for (const std::string& a : *mount_args) {
    if (a.find("kernel") != std::string::npos) return;
  }
  mount_args->insert(mount_args->end(), {"-o", "kernel"});
}

CommandResult Dsfs(std::vector<std::string> args, int timeout_s) {
  if (!args.empty() && args[0] == "pack" &&
      std::find(args.begin(), args.end(), "--backend") == args.end()) {
    args.insert(args.begin() + 1, {"--backend", TestBackend()});
  }
  if (!args.empty() && args[0] == "mount") {
    AddTestTransport(&args);
    AddTestMount(&args);
  }
  args.insert(args.begin(), DsfsBinary());
  return RunCommand(args, timeout_s);
}

std::string Describe(const CommandResult& r) {
  return "exit code " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + Printable(r.out) +
         "\n--- stderr ---\n" + Printable(r.err);
}

::testing::AssertionResult IsOneLineError(const CommandResult& r,
                                          const std::vector<std::string>& needles, int exit_code) {
  if (r.exit_code != exit_code) {
    return ::testing::AssertionFailure()
           << "expected exit code " << exit_code << ", got " << Describe(r);
  }
  if (r.err.empty() || r.err.back() != '\n' || LineCount(r.err) != 1) {
    return ::testing::AssertionFailure() << "expected exactly one stderr line, got " << Describe(r);
  }
  if (r.err.rfind("dsfs: error: ", 0) != 0) {
    return ::testing::AssertionFailure()
           << "stderr does not start with 'dsfs: error: ': " << Describe(r);
  }
  std::string err = Lower(r.err);
  for (const auto& n : needles) {
    if (err.find(Lower(n)) != std::string::npos) return ::testing::AssertionSuccess();
  }
  std::string all;
  for (const auto& n : needles) all += (all.empty() ? "'" : ", '") + n + "'";
  return ::testing::AssertionFailure() << "stderr mentions none of " << all << ": " << Describe(r);
}

int LineCount(std::string_view text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

std::vector<std::string> LinesWith(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(needle) != std::string::npos) out.push_back(line);
  }
  return out;
}

void PutFile(const std::string& path, std::string_view data, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("create " + Printable(path) + ": " + ErrnoName(errno));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) throw std::runtime_error("write " + Printable(path) + ": " + ErrnoName(errno));
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::chmod(path.c_str(), mode) != 0) throw std::runtime_error("chmod " + Printable(path));
}

void MakeDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    throw std::runtime_error("mkdir " + Printable(path) + ": " + ErrnoName(errno));
  }
  ::chmod(path.c_str(), mode);
}

std::vector<std::string> DirNames(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw std::runtime_error("opendir " + Printable(dir) + ": " + ErrnoName(errno));
  errno = 0;
  while (struct dirent* de = ::readdir(d)) {
    if (std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0) {
      names.emplace_back(de->d_name);
    }
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) throw std::runtime_error("readdir " + Printable(dir) + ": " + ErrnoName(err));
  std::sort(names.begin(), names.end());
  return names;
}

std::string RgbPixels(uint32_t w, uint32_t h,
                      const std::function<void(uint32_t x, uint32_t y, char* rgb)>& pixel) {
  std::string rgb(size_t{w} * h * 3, '\0');
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) pixel(x, y, rgb.data() + (size_t{y} * w + x) * 3);
  }
  return rgb;
}

std::string EncodePng(uint32_t w, uint32_t h, uint32_t format, std::string pixels) {
  png_image img = {};  // every field not set here is 0
  img.version = PNG_IMAGE_VERSION;
  img.width = w;
  img.height = h;
  img.format = format;
  pixels.resize(PNG_IMAGE_SIZE(img));
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&img, nullptr, &size, 0, pixels.data(), 0, nullptr)) return "";
  std::string png(size, '\0');
  if (!png_image_write_to_memory(&img, png.data(), &size, 0, pixels.data(), 0, nullptr)) return "";
  png.resize(size);
  return png;
}

std::string Jpeg(int w, int h, int seed) {
  std::string rgb(static_cast<size_t>(w) * h * 3, '\0');
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<char>((i * 7 + seed * 31) % 251);
  tjhandle t = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  tjCompress2(t, reinterpret_cast<const unsigned char*>(rgb.data()), w, 0, h, TJPF_RGB, &out, &size,
              TJSAMP_420, 90, 0);
  std::string jpeg(reinterpret_cast<char*>(out), size);
  tjFree(out);
  tjDestroy(t);
  return jpeg;
}

std::vector<LmdbPage> LmdbTreePages(const std::string& bytes) {
  constexpr size_t kPage = 4096;
  auto u16 = [&](size_t at) {
    uint16_t v;
    std::memcpy(&v, bytes.data() + at, sizeof(v));
    return v;
  };
  std::vector<LmdbPage> pages;
  for (size_t pgno = 0; (pgno + 1) * kPage <= bytes.size();) {
    const size_t at = pgno * kPage;
    uint64_t stored;
    std::memcpy(&stored, bytes.data() + at, sizeof(stored));
    const uint16_t flags = u16(at + 10);
    if (stored == pgno && (flags & 0x04)) {  // P_OVERFLOW: the run's length follows
      uint32_t run;
      std::memcpy(&run, bytes.data() + at + 12, sizeof(run));
      pgno += std::max<uint32_t>(run, 1);
      continue;
    }
    if (stored == pgno && (flags & 0x03) && !(flags & 0x08)) {
      pages.push_back({pgno, flags, u16(at + 12), u16(at + 14)});
    }
    ++pgno;
  }
  return pages;
}

std::string XorBytes(std::string bytes, size_t offset, size_t n, uint8_t mask) {
  for (size_t i = offset; i < offset + n && i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>(static_cast<uint8_t>(bytes[i]) ^ mask);
  }
  return bytes;
}

::testing::AssertionResult DamageStoredFile(const std::string& store, const std::string& data) {
  std::string bytes = ReadFile(store);
  size_t at = bytes.find(data.substr(50000, 64));
  if (at == std::string::npos) {
    return ::testing::AssertionFailure() << "the file's bytes are not in the store verbatim";
  }
  bytes[at + 10] ^= 0x20;
  PutFile(store, bytes);
  return ::testing::AssertionSuccess();
}

void BecomeSubreaper() {
  static const bool ok = ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
  if (!ok) ADD_FAILURE() << "prctl(PR_SET_CHILD_SUBREAPER): " << ErrnoName(errno);
}

bool WaitChild(pid_t pid, std::chrono::milliseconds timeout, int* wstatus) {
  int st = 0;
  bool done = WaitUntil(
      [&] {
        pid_t r = ::waitpid(pid, &st, WNOHANG);
        return r == pid || (r < 0 && errno == ECHILD);
      },
      timeout);
  if (wstatus) *wstatus = st;
  return done;
}

void ExpectDaemonExits(pid_t pid) {
  if (WaitChild(pid, std::chrono::milliseconds(5000))) return;
  ADD_FAILURE() << "daemon " << pid << " still runs 5 s after unmounting; killing it";
  ::kill(pid, SIGKILL);
  WaitChild(pid, std::chrono::milliseconds(5000));
}

std::string CannotMountReason() {
  if (::geteuid() != 0) return "not running as root (mounting needs root)";
  int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) return std::string("/dev/fuse is not usable: ") + std::strerror(errno);
  ::close(fd);
  return "";
}

// DSFS_TEST_BINARY runs the tests against another build of dsfs (an older one: does a new test
// fail there?).
std::string DsfsBinary() {
  const char* other = std::getenv("DSFS_TEST_BINARY");
  return other && *other ? other : DSFS_BINARY;
}

Status DamagePayload(const MemTable& table, uint64_t id, std::shared_ptr<MemTable>* damaged,
                     uint64_t* first, uint64_t* last) {
  auto copy = std::make_shared<MemTable>();
  copy->data = table.data;
  auto it = copy->data.lower_bound(PayloadKey(id));
  uint64_t last_id;
  if (it == copy->data.end() || !ParsePayloadKey(it->first, &last_id)) {
    return Status::Corruption("no such payload");
  }
  // The group's first id: the key of the group before it, plus one.
  uint64_t first_id = 0;
  if (it != copy->data.begin()) {
    uint64_t prev;
    if (ParsePayloadKey(std::prev(it)->first, &prev)) first_id = prev + 1;
  }
  if (id < first_id) return Status::Corruption("no such payload");
  it->second.back() ^= 0x01;
  if (first) *first = first_id;
  if (last) *last = last_id;
  *damaged = std::move(copy);
  return Status::OK();
}

Status UnsolidGroups(MemTable* table) {
  std::string dict_bytes;
  if (auto z = table->data.find(std::string(kDictKey)); z != table->data.end()) {
    StoreHeader h;
    DSFS_RETURN_IF_ERROR(ParseHeader(table->data.at(std::string(kHeaderKey)), &h));
    DSFS_RETURN_IF_ERROR(DecodeDictionaryRecord(z->second, h.dict_bytes, &dict_bytes));
    // Older versions stored it raw.
    z->second = RawPayloadRecord(dict_bytes);
  }
  std::shared_ptr<Dictionary> dict;
  DSFS_RETURN_IF_ERROR(Dictionary::Create(dict_bytes, 3, &dict));
  PayloadDecoder decoder;
  for (auto& [key, value] : table->data) {
    uint64_t last_id;
    if (!ParsePayloadKey(key, &last_id, kPayloadSpace) &&
        !ParsePayloadKey(key, &last_id, kPixelSpace)) {
      continue;
    }
    PayloadView p;
    DSFS_RETURN_IF_ERROR(ParsePayload(value, &p));
    std::string content(p.raw_bytes, '\0');
    DSFS_RETURN_IF_ERROR(decoder.Decode(p, dict.get(), content.data()));
    uint32_t count;
    std::memcpy(&count, content.data(), 4);
    GroupBuilder old;
    for (uint64_t id = last_id + 1 - count; id <= last_id; ++id) {
      std::string_view record;
      DSFS_RETURN_IF_ERROR(FindInGroup(content, last_id, id, &record));
      old.Add(RawPayloadRecord(record));
    }
    value = old.Finish();
  }
  return Status::OK();
}

Status PackToMemory(const std::string& src, const PackOptions& options,
                    std::shared_ptr<MemTable>* table, std::unique_ptr<Store>* store) {
  *table = std::make_shared<MemTable>();
  auto writer = NewMemWriter(*table);
  DSFS_RETURN_IF_ERROR(PackDirectory(src, options, writer.get(), nullptr, nullptr));
  return Store::Open(NewMemReader(*table), store);
}

Status PackToBackend(const std::string& src, const PackOptions& options, const std::string& backend,
                     const std::string& path, std::unique_ptr<Store>* store) {
  std::unique_ptr<KvWriter> writer;
  DSFS_RETURN_IF_ERROR(NewKvWriter(path, backend, KvWriterOptions{}, &writer));
  DSFS_RETURN_IF_ERROR(PackDirectory(src, options, writer.get(), nullptr, nullptr));
  writer.reset();
  return Store::Open(path, StoreOptions{}, store);
}

Status WriteRecords(
    const std::function<Status(const KvWriterOptions&, std::unique_ptr<KvWriter>*)>& open,
    const std::map<std::string, std::string>& kv, bool overwrite) {
  std::unique_ptr<KvWriter> w;
  KvWriterOptions o;
  o.overwrite = overwrite;
  DSFS_RETURN_IF_ERROR(open(o, &w));
  for (const auto& [k, v] : kv) DSFS_RETURN_IF_ERROR(w->Put(k, v));
  return w->Commit();
}

std::string TestBackend() {
  const char* b = std::getenv("DSFS_TEST_BACKEND");
  return b && *b ? b : "lmdb";
}

std::string TestTransport() {
  const char* t = std::getenv("DSFS_TEST_TRANSPORT");
  return t ? t : "";
}

bool KernelMountUnderTest() {
  const char* m = std::getenv("DSFS_TEST_MOUNT");
  return m != nullptr && std::string(m) == "kernel";
}

namespace {
void WriteEnableUring(const std::string& value) {
  std::ofstream out(kEnableUringPath);
  out << value << "\n";
}
}  // namespace

ScopedEnableUring::ScopedEnableUring(bool on) {
  std::ifstream in(kEnableUringPath);
  exists_ = static_cast<bool>(in);
  if (!exists_) return;
  std::getline(in, saved_);
  WriteEnableUring(on ? "Y" : "N");
}

ScopedEnableUring::~ScopedEnableUring() {
  if (exists_) WriteEnableUring(saved_);
}

namespace {
void ListStore(const Store& store, uint32_t dir, const std::string& prefix,
               std::map<std::string, std::string>* out) {
  InodeRecord d;
  ASSERT_TRUE(store.GetInode(dir, &d).ok());
  uint32_t first, count;
  ASSERT_TRUE(store.DirEntries(dir, d, &first, &count).ok());
  for (uint32_t i = first; i < first + count; ++i) {
    InodeRecord r;
    std::string_view name;
    ASSERT_TRUE(store.GetInode(i, &r).ok());
    ASSERT_TRUE(store.GetName(r, &name).ok());
    std::string path = prefix.empty() ? std::string(name) : prefix + "/" + std::string(name);
    if (IsDir(r)) {
      (*out)[path] = "<dir>";
      ListStore(store, i, path, out);
    } else if (IsLink(r)) {
      std::string_view target;
      ASSERT_TRUE(store.ReadLink(r, &target).ok());
      (*out)[path] = "->" + std::string(target);
    } else {
      ReadBuffer buf;
      std::string_view data;
      Status s = store.Read(r, 0, r.size, &buf, &data);
      ASSERT_TRUE(s.ok()) << path << ": " << s.message();
      (*out)[path] = std::string(data);
    }
  }
}
}  // namespace

std::map<std::string, std::string> StoreListing(const Store& store) {
  std::map<std::string, std::string> out;
  ListStore(store, Store::kRootIno, "", &out);
  return out;
}

void WalkTree(const std::string& root, const TreeVisitor& visit) {
  std::vector<std::string> todo = {""};
  while (!todo.empty()) {
    const std::string rel = todo.back();
    todo.pop_back();
    const std::string path = rel.empty() ? root : root + "/" + rel;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      ADD_FAILURE() << "lstat " << path << ": " << std::strerror(errno);
      continue;
    }
    visit(rel, st, path);
    if (!S_ISDIR(st.st_mode)) continue;
    std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(path.c_str()), ::closedir);
    if (!d) {
      ADD_FAILURE() << "opendir " << path << ": " << std::strerror(errno);
      continue;
    }
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d.get())) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(rel.empty() ? name : rel + "/" + name);
    }
    // Visited in name order (the listings are maps; the order only makes failures stable).
    std::sort(names.rbegin(), names.rend());
    todo.insert(todo.end(), names.begin(), names.end());
  }
}

std::map<std::string, std::string> TreeListing(const std::string& dir) {
  std::map<std::string, std::string> out;
  WalkTree(dir, [&](const std::string& rel, const struct stat& st, const std::string& path) {
    if (rel.empty()) return;
    if (S_ISLNK(st.st_mode)) {
      out[rel] = "->" + std::filesystem::read_symlink(path).string();
    } else if (S_ISDIR(st.st_mode)) {
      out[rel] = "<dir>";
    } else {
      out[rel] = ReadFile(path);
    }
  });
  return out;
}

std::string PayloadFile(const std::string& path) {
  if (!std::filesystem::is_directory(path)) return path;
  std::string largest;
  uintmax_t size = 0;
  for (const auto& e : std::filesystem::directory_iterator(path)) {
    if (e.path().extension() == ".sst" && e.file_size() > size) {
      size = e.file_size();
      largest = e.path().string();
    }
  }
  return largest;
}

}  // namespace dsfs::testing
