#include "tests/support/erofs_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <iostream>

#include "store/codec.h"
#include "store/format.h"

namespace dsfs::erofs::testing {
namespace {

std::string ContentKey(std::string_view bytes) {
  if (bytes.size() <= 256) return std::string(bytes);
  return "#" + std::to_string(bytes.size()) + ":" +
         std::to_string(std::hash<std::string_view>()(bytes));
}

std::string Describe(const Compare& c, uint32_t mode, uint32_t uid, uint32_t gid, int64_t ms,
                     uint32_t mns, uint64_t size, uint64_t nlink, const std::string& content) {
  char buf[160];
  const uint32_t type = mode & 0170000;
  std::snprintf(buf, sizeof(buf), "%s", type == kDir ? "dir" : type == kLink ? "link" : "file");
  std::string s = buf;
  if (c.mode && !(c.extracted && type == kLink)) {
    s += " mode=" + std::to_string(mode & (c.extracted ? 01777 : 07777));
  }
  if (c.owner) s += " uid=" + std::to_string(uid) + " gid=" + std::to_string(gid);
  if (c.mtime) s += " mtime=" + std::to_string(ms) + "." + std::to_string(mns);
  if (type != kDir) s += " size=" + std::to_string(size);
  s += " nlink=" + std::to_string(nlink);
  return s + " " + content;
}

void ListNode(const Node& n, const std::string& path, const Compare& c,
              std::map<std::string, std::string>* out) {
  const uint32_t type = n.mode & 0170000;
  uint64_t nlink = 1;
  if (type == kDir) {
    nlink = 2;
    for (const Node& k : n.children) nlink += (k.mode & 0170000) == kDir;
  }
  const uint64_t size = n.sparse_size ? n.sparse_size : n.data.size();
  const std::string content = type == kDir ? "" : n.sparse_size ? "sparse" : ContentKey(n.data);
  if (!path.empty() || c.root) {
    (*out)[path] = Describe(c, n.mode, n.uid, n.gid, n.mtime_s, n.mtime_ns, size, nlink, content);
  }
  for (const Node& k : n.children) ListNode(k, path.empty() ? k.name : path + "/" + k.name, c, out);
}

}  // namespace

std::map<std::string, std::string> ListFake(const Node& root, const Compare& c) {
  std::map<std::string, std::string> out;
  ListNode(root, "", c, &out);
  return out;
}

std::map<std::string, std::string> ListDisk(const std::string& dir, const Compare& c,
                                            const Adjust& adjust) {
  std::map<std::string, std::string> out;
  dsfs::testing::WalkTree(
      dir, [&](const std::string& rel, const struct stat& real, const std::string& full) {
        struct stat st = real;
        if (adjust) adjust(&st);
        std::string content;
        const uint32_t type = st.st_mode & 0170000;
        if (type == kLink) {
          std::string target(st.st_size + 1, '\0');
          ssize_t n = ::readlink(full.c_str(), target.data(), target.size());
          EXPECT_EQ(n, st.st_size) << full;
          target.resize(std::max<ssize_t>(n, 0));
          content = ContentKey(target);
        } else if (type == kReg) {
          if (static_cast<uint64_t>(st.st_size) > kSparseThreshold) {
            content = "sparse";
          } else {
            content = ContentKey(dsfs::testing::ReadFile(full));
          }
        }
        if (!rel.empty() || c.root) {
          out[rel] =
              Describe(c, st.st_mode, st.st_uid, st.st_gid, st.st_mtim.tv_sec,
                       static_cast<uint32_t>(st.st_mtim.tv_nsec), st.st_size, st.st_nlink, content);
        }
      });
  return out;
}

// Reports the first few differences between two listings.
void ExpectSameListing(const std::map<std::string, std::string>& want,
                       const std::map<std::string, std::string>& got, const std::string& what) {
  EXPECT_EQ(want.size(), got.size()) << what;
  int shown = 0;
  for (const auto& [path, desc] : want) {
    auto it = got.find(path);
    if (it == got.end()) {
      ADD_FAILURE() << what << ": missing " << path;
    } else if (it->second != desc) {
      ADD_FAILURE() << what << ": " << path << "\n  want " << desc << "\n  got  " << it->second;
    } else {
      continue;
    }
    if (++shown == 10) return;
  }
  for (const auto& [path, desc] : got) {
    if (!want.count(path) && shown++ < 10) ADD_FAILURE() << what << ": extra " << path;
  }
}

// Streams the whole image to `path` in 1 MiB reads; all-zero stretches are left as holes.
void WriteImage(const Image& image, const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  std::vector<char> buf(1 << 20);
  for (uint64_t off = 0; off < image.size_bytes(); off += buf.size()) {
    const size_t n = std::min<uint64_t>(buf.size(), image.size_bytes() - off);
    Status s = image.Read(off, n, buf.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    const bool zero = std::all_of(buf.begin(), buf.begin() + n, [](char ch) { return ch == 0; });
    if (!zero) {
      ASSERT_EQ(::pwrite(fd, buf.data(), n, off), static_cast<ssize_t>(n));
    }
  }
  ASSERT_EQ(::ftruncate(fd, image.size_bytes()), 0);
  ::close(fd);
}

// erofs-utils 1.9 (../shared/tools/build-erofs-utils.sh installs it as fsck.erofs-1.9) knows
// every feature the images use (fragments, zstd); Debian 12's 1.5 the uncompressed ones.
const std::string& FsckBinary() {
  static const std::string bin = [] {
    const std::string v19 = "/usr/local/bin/fsck.erofs-1.9";
    if (::access(v19.c_str(), X_OK) == 0 && RunCommand({v19, "-V"}).exit_code == 0) return v19;
    return std::string("fsck.erofs");
  }();
  return bin;
}

bool HaveFsck() { return RunCommand({FsckBinary(), "-V"}).exit_code == 0; }

bool FsckKnowsCompressed() { return FsckBinary().find("1.9") != std::string::npos; }

FakePacked::FakePacked(const FakeTree& tree, uint64_t max_file, uint64_t extent_bytes) {
  dsfs::PayloadEncoder enc(3, nullptr);
  enc.SetMaxBlockBytes(dsfs::kSolidBlockBytes);
  std::vector<std::string> files;
  std::vector<std::vector<uint32_t>> extents(1);
  std::vector<uint64_t> bytes(1, 0);
  for (uint32_t ino = 0; ino < tree.inode_count(); ino++) {
    ImageInode attr;
    EXPECT_TRUE(tree.GetInode(ino, &attr).ok());
    if ((attr.mode & 0170000) != kReg || attr.size == 0 || attr.size > max_file) continue;
    if (bytes.back() >= extent_bytes) {
      extents.emplace_back();
      bytes.push_back(0);
    }
    extents.back().push_back(ino);
    bytes.back() += attr.size;
  }
  if (extents.size() > 1 && bytes.back() < extent_bytes) {
    for (uint32_t ino : extents.back()) extents[extents.size() - 2].push_back(ino);
    extents.pop_back();
  }
  for (const auto& inos : extents) {
    if (inos.empty()) continue;
    dsfs::GroupBuilder g;
    uint64_t off = 0;
    for (uint32_t ino : inos) {
      ImageInode attr;
      EXPECT_TRUE(tree.GetInode(ino, &attr).ok());
      std::string data(attr.size, '\0');
      EXPECT_TRUE(tree.ReadData(ino, 0, data.size(), data.data()).ok());
      g.Add(data);
      where_[ino] = {frames_.size(), off};
      off += attr.size;
    }
    const uint32_t count = g.count();
    std::string record;
    EXPECT_TRUE(enc.EncodeKernelGroup(g.Finish(), &record).ok());
    frames_.push_back(record.substr(sizeof(dsfs::PayloadHeader) + 4 + 4 * count));
    decoded_.push_back(off);
  }
}

Status FakePacked::ForEachExtent(
    const std::function<Status(uint64_t decoded, uint32_t frame)>& fn) const {
  for (size_t e = 0; e < frames_.size(); e++) {
    DSFS_RETURN_IF_ERROR(fn(decoded_[e], static_cast<uint32_t>(frames_[e].size())));
  }
  return Status::OK();
}

Status FakePacked::ReadFrame(uint64_t e, uint64_t offset, size_t len, char* dst) const {
  if (e >= frames_.size() || offset + len > frames_[e].size()) {
    ADD_FAILURE() << "frame read out of range";
    return Status::InvalidArgument("out of range");
  }
  std::memcpy(dst, frames_[e].data() + offset, len);
  return Status::OK();
}

Status FakePacked::FragmentOf(uint32_t ino, uint64_t* e, uint64_t* offset) const {
  auto it = where_.find(ino);
  if (it == where_.end()) {
    ADD_FAILURE() << "inode " << ino << " is no fragment here";
    return Status::InvalidArgument("no fragment");
  }
  *e = it->second.first;
  *offset = it->second.second;
  return Status::OK();
}

// fsck.erofs IMG, extracting into `extract` unless it is empty.
void Fsck(const std::string& image, const std::string& extract) {
  std::vector<std::string> argv{FsckBinary()};
  // erofs-utils 1.9 extracts into a directory that exists (1.5 made it).
  if (!extract.empty()) ::mkdir(extract.c_str(), 0755);
  if (!extract.empty()) argv.push_back("--extract=" + extract);
  argv.push_back(image);
  auto r = RunCommand(argv, 300);
  EXPECT_EQ(r.exit_code, 0) << FsckBinary() << " " << image << "\n" << r.out << r.err;
}

// Why the kernel cannot be tried here ("" if it can).
std::string KernelUnavailable() {
  if (::geteuid() != 0) return "not root";
  std::ifstream f("/proc/filesystems");
  std::string line;
  while (std::getline(f, line)) {
    if (line.find("erofs") != std::string::npos) return "";
  }
  return "the kernel has no EROFS (/proc/filesystems)";
}

// Builds the image of `tree`, streams it, runs fsck.erofs (extracting and comparing with
// `extracted_want` if given) and mounts it to compare with `mounted_want`. `check_mount` runs
// more checks on the mounted directory.
void CheckImage(const ImageTree& tree, const ImageOptions& options,
                const std::map<std::string, std::string>* extracted_want, const Compare& extracted,
                const std::map<std::string, std::string>& mounted_want, const Compare& mounted,
                const std::function<void(const std::string&)>& check_mount) {
  std::unique_ptr<Image> image;
  Status s = Image::Build(&tree, options, &image);
  ASSERT_TRUE(s.ok()) << s.ToString();
  TempDir tmp;
  const std::string img = tmp / "image.erofs";
  ASSERT_NO_FATAL_FAILURE(WriteImage(*image, img));
  if (options.packed && !FsckKnowsCompressed()) {
    std::cout << "[  NOTE    ] " << FsckBinary()
              << " reads no compressed image (shared/tools/build-erofs-utils.sh installs "
                 "fsck.erofs-1.9): fsck check SKIPPED\n";
  } else if (options.packed && HaveFsck()) {
    // fsck.erofs 1.9.3 --extract=DIR tries to extract the packed inode too (into DIR itself:
    // "File exists"): --extract alone decompresses and checks every file, the kernel mount
    // below compares the bytes.
    auto r = RunCommand({FsckBinary(), "--extract", img}, 300);
    EXPECT_EQ(r.exit_code, 0) << FsckBinary() << " --extract " << img << "\n" << r.out << r.err;
  } else if (HaveFsck()) {
    if (extracted_want) {
      const std::string out = tmp / "extracted";
      Fsck(img, out);
      // Not root, fsck.erofs extracts modes as they are (with the umask): make mode-0 files
      // readable to compare their bytes (modes are not compared then) and to remove them.
      if (::geteuid() != 0) RunCommand({"chmod", "-R", "u+rwX", out});
      ExpectSameListing(*extracted_want, ListDisk(out, extracted), "fsck.erofs --extract");
    } else {
      Fsck(img);
    }
  } else {
    std::cout << "[  NOTE    ] fsck.erofs not installed (scripts/setup.sh): fsck check SKIPPED\n";
  }
  const std::string why = KernelUnavailable();
  if (!why.empty()) {
    std::cout << "[  NOTE    ] kernel mount SKIPPED: " << why << "\n";
    return;
  }
  const std::string mnt = tmp / "mnt";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0755), 0);
  KernelMount m;
  bool skip;
  const std::string err = m.Mount(img, mnt, &skip);
  if (skip) {
    std::cout << "[  NOTE    ] kernel mount SKIPPED: " << err << "\n";
    return;
  }
  ASSERT_EQ(err, "");
  ExpectSameListing(mounted_want, ListDisk(mnt, mounted), "kernel mount");
  if (check_mount) check_mount(mnt);
}

void CheckFake(const Node& root, const ImageOptions& options,
               const std::function<void(const std::string&)>& check_mount, bool extract) {
  FakeTree tree(&root);
  // fsck.erofs 1.5 extracts names, types, bytes, modes and owners (as root), not mtimes.
  Compare ex;
  ex.mtime = false;
  ex.root = false;
  ex.extracted = true;
  ex.owner = ex.mode = ::geteuid() == 0;
  const auto extracted_want = ListFake(root, ex);
  CheckImage(tree, options, extract ? &extracted_want : nullptr, ex, ListFake(root, Compare{}),
             Compare{}, check_mount);
}

}  // namespace dsfs::erofs::testing
