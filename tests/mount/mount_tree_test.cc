// The mounted tree, its source and its shape: listings, seekdir, attributes, lookups and
// symlinks as the kernel serves them, compared with the source entry for entry (mount_tree.h).

#include "tests/support/mount_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernel/kernel_mount.h"
#include "tests/support/mount_util.h"

namespace dsfs::testing {
namespace {

// ---------------------------------------------------------------------------------------------
// Source trees

void MakeSymlink(const std::string& target, const std::string& path) {
  if (::symlink(target.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("symlink " + Printable(path) + ": " + ErrnoName(errno));
  }
}

// Entries of `dir` except "." and "..", with their d_type; `dots` counts "." and "..".
bool ListDir(const std::string& dir, std::map<std::string, unsigned char>* entries, int* dots,
             std::string* error) {
  entries->clear();
  *dots = 0;
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    *error = "opendir " + Printable(dir) + ": " + ErrnoName(errno);
    return false;
  }
  errno = 0;
  while (struct dirent* de = ::readdir(d)) {
    if (std::strcmp(de->d_name, ".") == 0 || std::strcmp(de->d_name, "..") == 0) {
      ++*dots;
      continue;
    }
    if (!entries->emplace(de->d_name, de->d_type).second) {
      *error = "readdir " + Printable(dir) + " returned " + Printable(de->d_name) + " twice";
      ::closedir(d);
      return false;
    }
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) {
    *error = "readdir " + Printable(dir) + ": " + ErrnoName(err);
    return false;
  }
  return true;
}

// Every entry under `root`, found with readdir and described with lstat/readlink.
void WalkTree(const std::string& root, const std::string& rel, Tree* tree) {
  std::string path = Join(root, rel);
  Node node;
  if (::lstat(path.c_str(), &node.st) != 0) {
    throw std::runtime_error("lstat " + Printable(path) + ": " + ErrnoName(errno));
  }
  if (S_ISLNK(node.st.st_mode)) {
    std::string buf(PATH_MAX + 1, '\0');
    ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size());
    if (n < 0) throw std::runtime_error("readlink " + Printable(path) + ": " + ErrnoName(errno));
    node.target = buf.substr(0, static_cast<size_t>(n));
  }
  bool is_dir = S_ISDIR(node.st.st_mode);
  (*tree)[rel] = node;
  if (!is_dir) return;
  for (const std::string& name : DirNames(path)) WalkTree(root, Join(rel, name), tree);
}

// Gives every entry of the tree its own mtime, nanoseconds included, children before their
// directory (creating entries would otherwise move a directory's mtime again).
void SetDistinctTimes(const std::string& root, const std::string& rel, uint64_t* counter) {
  std::string path = Join(root, rel);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) throw std::runtime_error("lstat " + Printable(path));
  if (S_ISDIR(st.st_mode)) {
    for (const std::string& name : DirNames(path)) {
      SetDistinctTimes(root, Join(rel, name), counter);
    }
  }
  uint64_t i = (*counter)++;
  struct timespec ts[2];
  // Spread over years, with nanoseconds that differ in every digit position.
  ts[1].tv_sec = 1'500'000'000 + static_cast<time_t>(i * 7'919);
  ts[1].tv_nsec = static_cast<long>((i * 987'654'321ull + 123'457) % 1'000'000'000ull);
  ts[0] = ts[1];
  if (::utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) {
    throw std::runtime_error("utimensat " + Printable(path) + ": " + ErrnoName(errno));
  }
}

void SetTime(const std::string& path, time_t sec, long nsec) {
  struct timespec ts[2] = {{sec, nsec}, {sec, nsec}};
  if (::utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) {
    throw std::runtime_error("utimensat " + Printable(path) + ": " + ErrnoName(errno));
  }
}

// Names that a dataset tree may hold and that a careless implementation would mangle.
std::vector<std::string> OddNames() {
  std::vector<std::string> names = {
      "with space.txt",
      " leading space",
      "trailing space ",
      "naïve café.jpg",
      "日本語のファイル名.png",
      "emoji 😀🐈.txt",
      "e\xcc\x81 decomposed",  // "é" as e + combining accent: must stay distinct from...
      "\xc3\xa9 decomposed",   // ...the precomposed "é" (no Unicode normalization)
      "tab\there",
      "back\\slash",
      "quote\"and'apostrophe",
      "#hash%percent&amp",
      "-starts-with-dash",
      ".hidden",
      "..double-dot-prefix",
      "UPPER.TXT",
      "upper.txt",
      std::string(255, 'n'),  // the longest name Linux allows
  };
  return names;
}

// Names only some filesystems accept: a newline and bytes that are not UTF-8.
std::vector<std::string> ByteNames() { return {"new\nline", "bad\xff\xfe bytes", "ctrl\x01\x1f"}; }

// Builds the source tree that the mounted-tree tests read: each kind of entry a dataset tree
// may hold and the edge cases of names, sizes, modes and times. Returns notes on anything the
// underlying filesystem refused.
std::string BuildSourceTree(const std::string& root) {
  std::string notes;
  MakeDir(root, 0755);
  PutFile(root + "/empty.txt", "");
  MakeDir(root + "/empty_dir");
  PutFile(root + "/big_random.bin", RandomBytes(kBigRandomBytes, 1));
  PutFile(root + "/big_text.txt", TextBytes(kBigTextBytes, 2));
  // Sizes at and around the chunk sizes the tests pack with (64K and the default 256K).
  MakeDir(root + "/edges");
  for (size_t n : {size_t{1}, size_t{4095}, size_t{4096}, size_t{65535}, size_t{65536},
                   size_t{65537}, size_t{262143}, size_t{262144}, size_t{262145}}) {
    PutFile(root + "/edges/size_" + std::to_string(n) + ".bin",
            RandomBytes(n, static_cast<uint32_t>(n)));
  }
  PutFile(root + "/edges/zeros_1M.bin", std::string(1 << 20, '\0'));
  // Two names for one file: each is packed as a file of its own.
  if (::link((root + "/edges/size_65537.bin").c_str(), (root + "/edges/hardlink.bin").c_str())) {
    throw std::runtime_error("link: " + ErrnoName(errno));
  }

  std::string deep = root + "/deep";
  MakeDir(deep);
  for (int i = 0; i < kDepth; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "/d%02d", i);
    deep += name;
    MakeDir(deep);
    PutFile(deep + "/level.txt", "level " + std::to_string(i) + "\n");
  }
  PutFile(deep + "/leaf.txt", "the bottom of the tree\n");

  MakeDir(root + "/names");
  for (const auto& n : OddNames()) PutFile(root + "/names/" + n, "file called " + n + "\n");
  MakeDir(root + "/names/dir with space ü");
  PutFile(root + "/names/dir with space ü/inside.txt", "inside\n");
  for (const auto& n : ByteNames()) {
    std::string p = root + "/names/" + n;
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      notes +=
          "the source filesystem refused the name " + Printable(n) + ": " + ErrnoName(errno) + "\n";
      continue;
    }
    ::close(fd);
    PutFile(p, "odd bytes in " + n + "\n");
  }

  // Many small files, as in an image dataset: distinct contents, some empty.
  std::string many = root + "/many";
  MakeDir(many);
  for (size_t i = 0; i < kManyFiles; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "/img_%05zu.dat", i);
    std::string data;
    size_t len = (i * 37) % 300;
    if (i % 1000 != 0) {
      data = "sample " + std::to_string(i) + " ";
      while (data.size() < len) data += static_cast<char>('a' + (i + data.size()) % 26);
    }
    PutFile(many + name, data);
  }

  std::string links = root + "/links";
  MakeDir(links);
  MakeSymlink("../names/with space.txt", links + "/relative_file");
  MakeSymlink("../empty.txt", links + "/relative_empty");
  MakeSymlink("/etc/passwd", links + "/absolute");
  MakeSymlink("no/such/target", links + "/dangling");
  MakeSymlink("../deep/d00", links + "/to_dir");
  MakeSymlink("/", links + "/absolute_dir");
  MakeSymlink("loop", links + "/loop");
  MakeSymlink("naïve café/日本", links + "/utf8_target");
  std::string long_target;
  while (long_target.size() < 3000) long_target += "long/path/component/";
  MakeSymlink(long_target, links + "/long_target");

  std::string modes = root + "/modes";
  MakeDir(modes);
  PutFile(modes + "/private_0600.bin", "private\n", 0600);
  PutFile(modes + "/exec_0755.sh", "#!/bin/sh\necho hi\n", 0755);
  PutFile(modes + "/readonly_0444.txt", "read only\n", 0444);
  PutFile(modes + "/none_0000.txt", "no permissions\n", 0000);
  PutFile(modes + "/group_0640.txt", "group\n", 0640);
  PutFile(modes + "/setuid_4755.bin", "setuid\n", 04755);
  MakeDir(modes + "/dir_0700", 0700);
  MakeDir(modes + "/sticky_1777", 01777);
  MakeDir(modes + "/dir_0555");
  PutFile(modes + "/dir_0555/inside.txt", "inside a 0555 directory\n");
  ::chmod((modes + "/dir_0555").c_str(), 0555);
  PutFile(modes + "/old_1960.txt", "from 1960\n");
  PutFile(modes + "/future_2100.txt", "from 2100\n");

  uint64_t counter = 0;
  SetDistinctTimes(root, "", &counter);
  // Extremes of the mtime range, stored as offsets from the smallest one.
  SetTime(modes + "/old_1960.txt", -315'619'200, 999'999'999);
  SetTime(modes + "/future_2100.txt", 4'102'444'800, 1);
  SetTime(modes, 1'600'000'000, 0);
  return notes;
}

// ---------------------------------------------------------------------------------------------
// The mounted tree

struct Variant {
  const char* name;
  std::vector<std::string> pack_flags;
  std::vector<std::string> mount_flags;
};

const Variant kVariants[] = {
    {"DefaultChunks", {}, {}},
    // Small chunks: every large read crosses many chunk boundaries; several FUSE threads.
    {"Chunk64K", {"--chunk-size", "64K", "--dict-size", "0", "-l", "3"}, {"-o", "threads=4"}},
};

}  // namespace

SharedTree* MountedTreeTest::shared_ = nullptr;

void MountedTreeTest::SetUpTestSuite() {
  if (!CannotMountReason().empty()) return;
  shared_ = new SharedTree;
  SharedTree& s = *shared_;
  try {
    std::string fs_dir = s.dir / "fs";
    MakeDir(fs_dir);
    s.src_fs = std::make_unique<TmpfsGuard>(fs_dir, "1g");
    if (!s.src_fs->mounted()) {
      s.build_notes += "no tmpfs for the source (" + s.src_fs->error() + "), using the disk\n";
    }
    s.src = fs_dir + "/src";
    s.build_notes += BuildSourceTree(s.src);
    WalkTree(s.src, "", &s.source);
    for (const Variant& v : kVariants) {
      std::string store = s.dir / (std::string(v.name) + ".dsfs");
      std::string mp = s.dir / (std::string("mnt_") + v.name);
      MakeDir(mp);
      std::vector<std::string> args = {"pack", s.src, store};
      args.insert(args.end(), v.pack_flags.begin(), v.pack_flags.end());
      CommandResult r = Dsfs(args, 300);
      if (r.exit_code != 0) {
        s.error += std::string("dsfs pack (") + v.name + ") failed: " + Describe(r) + "\n";
        break;
      }
      s.stores.push_back(store);
      s.pack_output.push_back(r.out);
      auto guard = std::make_unique<MountGuard>(mp);
      r = guard->MountBackground(store, v.mount_flags);
      s.mounts.push_back(std::move(guard));
      if (r.exit_code != 0) {
        s.error += std::string("dsfs mount (") + v.name + ") failed: " + Describe(r) + "\n";
        break;
      }
      s.mountpoints.push_back(mp);
    }
  } catch (const std::exception& e) {
    s.error += std::string("building the source tree failed: ") + e.what() + "\n";
  }
}

void MountedTreeTest::CheckSourceTreeHasTheIntendedShape() {
  // Guards the other tests against a source that lost its edge cases (they would pass
  // vacuously): the walk must see all of them.
  size_t files = 0, dirs = 0, links = 0;
  std::set<long> nanos;
  for (const auto& [rel, node] : source()) {
    if (S_ISREG(node.st.st_mode)) ++files;
    if (S_ISDIR(node.st.st_mode)) ++dirs;
    if (S_ISLNK(node.st.st_mode)) ++links;
    nanos.insert(node.st.st_mtim.tv_nsec);
  }
  EXPECT_GT(files, kManyFiles);
  EXPECT_GT(dirs, static_cast<size_t>(kDepth));
  EXPECT_EQ(links, 9u);
  EXPECT_GT(nanos.size(), kManyFiles);
  EXPECT_EQ(source().at("big_random.bin").st.st_size, static_cast<off_t>(kBigRandomBytes));
  EXPECT_TRUE(source().count("names/new\nline")) << "source filesystem refused a newline";
}

void MountedTreeTest::CheckPackReportsWhatItPacked() {
  uint64_t files = 0, dirs = 0, links = 0;
  for (const auto& [rel, node] : source()) {
    if (S_ISREG(node.st.st_mode)) ++files;
    if (S_ISDIR(node.st.st_mode)) ++dirs;
    if (S_ISLNK(node.st.st_mode)) ++links;
  }
  unsigned long long f = 0, d = 0, l = 0;
  const std::string& out = shared().pack_output[GetParam()];
  ASSERT_EQ(
      std::sscanf(out.c_str(), "packed %llu files, %llu directories, %llu symlinks", &f, &d, &l), 3)
      << out;
  EXPECT_EQ(f, files);
  EXPECT_EQ(d, dirs);
  EXPECT_EQ(l, links);
}

void MountedTreeTest::CheckMountIsAReadOnlyFuseMount() {
  std::vector<MountEntry> entries = MountsAt(mnt());
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].mount_options.rfind("ro,", 0), 0u) << entries[0].mount_options;
  if (KernelMountUnderTest()) {
    // EROFS over the image of the daemon's private mount (or a loop device over it), whose
    // stats `dsfs stats` reads: the mount's source is that image, not the store.
    EXPECT_EQ(entries[0].fstype, "erofs");
    std::string stats_path;
    ASSERT_TRUE(KernelStatsPath(mnt(), &stats_path)) << "no private image mount under " << mnt();
    EXPECT_TRUE(entries[0].source.rfind(std::string(kKernelRunDir) + "/", 0) == 0 ||
                entries[0].source.rfind("/dev/loop", 0) == 0)
        << entries[0].source;
    CommandResult r = Dsfs({"stats", mnt()});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_NE(r.out.find("kernel.image_reads"), std::string::npos) << r.out;
  } else {
    EXPECT_EQ(entries[0].fstype, "fuse.dsfs");
    EXPECT_EQ(entries[0].source, shared().stores[GetParam()]);
  }
  ASSERT_EQ(shared().mounts[GetParam()]->daemons().size(), 1u)
      << "expected exactly one daemon process serving " << mnt();
}

void MountedTreeTest::CheckEveryDirectoryListsLikeTheSource() {
  size_t dirs = 0;
  for (const auto& [rel, node] : source()) {
    if (!S_ISDIR(node.st.st_mode)) continue;
    ++dirs;
    std::map<std::string, unsigned char> want, got;
    int want_dots, got_dots;
    std::string error;
    ASSERT_TRUE(ListDir(Join(src(), rel), &want, &want_dots, &error)) << error;
    ASSERT_TRUE(ListDir(Join(mnt(), rel), &got, &got_dots, &error)) << error;
    EXPECT_EQ(got_dots, 2) << "'.' and '..' in /" << Printable(rel);
    std::vector<std::string> missing, extra, wrong_type;
    for (const auto& [name, type] : want) {
      auto it = got.find(name);
      if (it == got.end()) {
        missing.push_back(Printable(name));
      } else if (type != DT_UNKNOWN && it->second != type) {
        wrong_type.push_back(Printable(name) + " (d_type " + std::to_string(it->second) +
                             ", source " + std::to_string(type) + ")");
      }
    }
    for (const auto& [name, type] : got) {
      if (!want.count(name)) extra.push_back(Printable(name));
    }
    auto head = [](const std::vector<std::string>& v) {
      std::string s;
      for (size_t i = 0; i < v.size() && i < 10; ++i) s += "\n  " + v[i];
      return s;
    };
    EXPECT_TRUE(missing.empty()) << missing.size() << " entries of /" << Printable(rel)
                                 << " missing on the mount:" << head(missing);
    EXPECT_TRUE(extra.empty()) << extra.size() << " entries of /" << Printable(rel)
                               << " not in the source:" << head(extra);
    EXPECT_TRUE(wrong_type.empty())
        << "wrong d_type in /" << Printable(rel) << ":" << head(wrong_type);
  }
  EXPECT_GT(dirs, static_cast<size_t>(kDepth));
}

void MountedTreeTest::CheckSeekdirResumesAListingOfTwentyThousandEntries() {
  std::string dir = mnt() + "/many";
  DIR* d = ::opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << ErrnoName(errno);
  std::vector<std::pair<long, std::string>> entries;  // telldir before each entry, its name
  for (;;) {
    long pos = ::telldir(d);
    struct dirent* de = ::readdir(d);
    if (!de) break;
    entries.emplace_back(pos, de->d_name);
  }
  ASSERT_EQ(entries.size(), kManyFiles + 2);
  for (size_t start : {size_t{1}, size_t{2}, size_t{777}, kManyFiles / 2, kManyFiles + 1}) {
    ::seekdir(d, entries[start].first);
    size_t i = start;
    while (struct dirent* de = ::readdir(d)) {
      ASSERT_LT(i, entries.size()) << "after seekdir to entry " << start;
      ASSERT_EQ(de->d_name, entries[i].second) << "entry " << i << " after seekdir to " << start;
      ++i;
    }
    EXPECT_EQ(i, entries.size()) << "after seekdir to entry " << start;
  }
  ::rewinddir(d);
  size_t again = 0;
  while (::readdir(d)) ++again;
  EXPECT_EQ(again, entries.size());
  ::closedir(d);
}

namespace {
// The permission bits of `rel` the mount shows of the source's. Without allow_other a classic
// mount lets only the mounting user in (the kernel's FUSE check), with the root's stored mode;
// EROFS applies the modes in the image, so a -o kernel mount shows its root without group and
// other bits instead (kernel/kernel_mount.cc, PrivateRootTree): the same access, another mode.
mode_t RootModeBits(const std::string& rel) {
  return rel.empty() && KernelMountUnderTest() ? 07700 : 07777;
}
}  // namespace

void MountedTreeTest::CheckAttributesMatchTheSource() {
  std::vector<std::string> mismatches;
  auto differ = [&](const std::string& rel, const std::string& what, auto got, auto want) {
    if (got == want) return;
    std::ostringstream m;
    m << "/" << Printable(rel) << ": " << what << " is " << got << ", source has " << want;
    mismatches.push_back(m.str());
  };
  for (const auto& [rel, node] : source()) {
    std::string path = Join(mnt(), rel);
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      mismatches.push_back("/" + Printable(rel) + ": lstat: " + ErrnoName(errno));
      continue;
    }
    const struct stat& want = node.st;
    differ(rel, "file type", st.st_mode & S_IFMT, want.st_mode & S_IFMT);
    char got_bits[16], want_bits[16];
    std::snprintf(got_bits, sizeof(got_bits), "0%o", st.st_mode & 07777);
    std::snprintf(want_bits, sizeof(want_bits), "0%o", want.st_mode & RootModeBits(rel));
    differ(rel, "permission bits", std::string(got_bits), std::string(want_bits));
    if (!S_ISDIR(want.st_mode)) differ(rel, "size", st.st_size, want.st_size);
    // Links: a classic mount shows one for every entry (a directory too, as btrfs does: tools
    // then assume nothing from it; a hard link is packed as a file of its own). EROFS keeps
    // what the image says: a directory's 2 + its subdirectories, as the source filesystem
    // has, and one for the rest. (st_blocks and st_blksize differ between the two as well and
    // are not compared: they describe each mount's own storage.)
    differ(rel, "link count", st.st_nlink,
           S_ISDIR(want.st_mode) && KernelMountUnderTest() ? want.st_nlink : nlink_t{1});
    differ(rel, "mtime seconds", st.st_mtim.tv_sec, want.st_mtim.tv_sec);
    differ(rel, "mtime nanoseconds", st.st_mtim.tv_nsec, want.st_mtim.tv_nsec);
    // Every entry is shown as the mounting user's (root here).
    differ(rel, "uid", st.st_uid, ::getuid());
    differ(rel, "gid", st.st_gid, ::getgid());
  }
  std::string head;
  for (size_t i = 0; i < mismatches.size() && i < 20; ++i) head += "\n  " + mismatches[i];
  EXPECT_TRUE(mismatches.empty()) << mismatches.size() << " attribute mismatches, first:" << head;
  // The mountpoint itself shows the source root.
  struct stat root;
  ASSERT_EQ(::stat(mnt().c_str(), &root), 0);
  EXPECT_EQ(root.st_mode, source().at("").st.st_mode & (S_IFMT | RootModeBits("")));
  EXPECT_EQ(root.st_mtim.tv_nsec, source().at("").st.st_mtim.tv_nsec);
}

void MountedTreeTest::CheckLookupsByPathFindOddAndDeepNames() {
  for (const auto& n : OddNames()) {
    struct stat st;
    std::string p = mnt() + "/names/" + n;
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << Printable(p) << ": " << ErrnoName(errno);
  }
  std::string both_e = mnt() + "/names/";
  struct stat a, b;
  ASSERT_EQ(::stat((both_e + "e\xcc\x81 decomposed").c_str(), &a), 0);
  ASSERT_EQ(::stat((both_e + "\xc3\xa9 decomposed").c_str(), &b), 0);
  EXPECT_NE(a.st_ino, b.st_ino) << "two differently encoded names must be two files";

  std::string deep = mnt() + "/deep";
  for (int i = 0; i < kDepth; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "/d%02d", i);
    deep += name;
  }
  std::string data, error;
  ASSERT_TRUE(ReadAll(deep + "/leaf.txt", &data, &error)) << error;
  EXPECT_EQ(data, "the bottom of the tree\n");

  // Walking down with chdir-like relative lookups from an open directory.
  int fd = ::open((mnt() + "/deep").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < kDepth; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "d%02d", i);
    int next = ::openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(next, 0) << "level " << i << ": " << ErrnoName(errno);
    ::close(fd);
    fd = next;
  }
  struct stat leaf;
  EXPECT_EQ(::fstatat(fd, "leaf.txt", &leaf, 0), 0);
  // ".." leads back up through the store's parent links.
  struct stat up, want_up;
  EXPECT_EQ(::fstatat(fd, "../../level.txt", &up, 0), 0);
  ASSERT_EQ(::stat((deep + "/../../level.txt").c_str(), &want_up), 0);
  EXPECT_EQ(up.st_ino, want_up.st_ino);
  ::close(fd);

  struct stat st;
  errno = 0;
  EXPECT_EQ(::stat((mnt() + "/many/img_20000.dat").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  errno = 0;
  EXPECT_EQ(::stat((mnt() + "/no such entry").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  errno = 0;
  EXPECT_EQ(::stat((mnt() + "/empty.txt/below").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOTDIR);
}

void MountedTreeTest::CheckSymlinksKeepTheirTargets() {
  size_t links = 0;
  for (const auto& [rel, node] : source()) {
    if (!S_ISLNK(node.st.st_mode)) continue;
    ++links;
    std::string path = Join(mnt(), rel);
    std::string buf(PATH_MAX + 1, '\0');
    ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size());
    ASSERT_GE(n, 0) << Printable(path) << ": " << ErrnoName(errno);
    EXPECT_EQ(buf.substr(0, static_cast<size_t>(n)), node.target) << Printable(rel);
  }
  EXPECT_EQ(links, 9u);

  // Following them behaves as on the source.
  std::string data, want, error;
  ASSERT_TRUE(ReadAll(mnt() + "/links/relative_file", &data, &error)) << error;
  EXPECT_EQ(data, "file called with space.txt\n");
  struct stat st;
  ASSERT_EQ(::stat((mnt() + "/links/to_dir").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(DirNames(mnt() + "/links/to_dir"), DirNames(src() + "/deep/d00"));
  ASSERT_TRUE(ReadAll(mnt() + "/links/to_dir/level.txt", &data, &error)) << error;
  EXPECT_EQ(data, "level 0\n");
  ASSERT_TRUE(ReadAll(mnt() + "/links/absolute", &data, &error)) << error;  // leaves the mount
  ASSERT_TRUE(ReadAll("/etc/passwd", &want, &error)) << error;
  EXPECT_EQ(data, want);
  errno = 0;
  EXPECT_EQ(::stat((mnt() + "/links/dangling").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  errno = 0;
  EXPECT_EQ(::stat((mnt() + "/links/loop").c_str(), &st), -1);
  EXPECT_EQ(errno, ELOOP);
  // readlink of something that is not a symlink.
  char small[16];
  errno = 0;
  EXPECT_EQ(::readlink((mnt() + "/empty.txt").c_str(), small, sizeof(small)), -1);
  EXPECT_EQ(errno, EINVAL);
}

namespace {

// The checks run in three groups per packing rather than one test each: ctest runs every test
// in a process of its own, and building, packing and mounting the 20,000-file tree is most of
// a test's time.
TEST_P(MountedTreeTest, TreeLooksLikeTheSource) {
  {
    SCOPED_TRACE("source tree shape");
    CheckSourceTreeHasTheIntendedShape();
  }
  {
    SCOPED_TRACE("pack summary");
    CheckPackReportsWhatItPacked();
  }
  {
    SCOPED_TRACE("mount entry");
    CheckMountIsAReadOnlyFuseMount();
  }
  {
    SCOPED_TRACE("directory listings");
    CheckEveryDirectoryListsLikeTheSource();
  }
  {
    SCOPED_TRACE("seekdir");
    CheckSeekdirResumesAListingOfTwentyThousandEntries();
  }
  {
    SCOPED_TRACE("attributes");
    CheckAttributesMatchTheSource();
  }
  {
    SCOPED_TRACE("lookups");
    CheckLookupsByPathFindOddAndDeepNames();
  }
  {
    SCOPED_TRACE("symlinks");
    CheckSymlinksKeepTheirTargets();
  }
}

INSTANTIATE_TEST_SUITE_P(Packings, MountedTreeTest, ::testing::Range<size_t>(0, 2),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(kVariants[info.param].name);
                         });

}  // namespace
}  // namespace dsfs::testing
