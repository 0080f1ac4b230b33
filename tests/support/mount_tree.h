// The mounted tree (MountedTreeTest): one source with every kind of entry and edge case a dataset
// tree may hold, packed in two ways and mounted twice, shared by every test of the suite
// (packing 20,000 files once instead of per test keeps the suite fast). The source, the
// fixture and the checks of the tree's shape are in mount_tree_test.cc, the checks of reads
// in mount_read_test.cc.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/mount_util.h"

namespace dsfs::testing {

// One entry of a tree: its lstat and, for a symlink, its target.
struct Node {
  struct stat st;
  std::string target;
};
// Relative path ("" = the root) -> entry.
using Tree = std::map<std::string, Node>;

inline std::string Join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "/" + b;
}

inline constexpr size_t kManyFiles = 20000;
inline constexpr int kDepth = 40;
inline constexpr size_t kBigRandomBytes = (8u << 20) + 4097;  // over 8 MB, incompressible
inline constexpr size_t kBigTextBytes = (5u << 20) + 333;     // compressible, 80+ chunks of 64K

struct SharedTree {
  TempDir dir;  // first member: destroyed last, after the mounts on it are gone
  // The source lives on a tmpfs when one can be mounted: creating 20,000 files on a busy disk
  // takes seconds, and ctest pays that once per test.
  std::unique_ptr<TmpfsGuard> src_fs;
  std::string src;
  std::string build_notes;
  Tree source;
  std::vector<std::string> stores, mountpoints, pack_output;
  std::vector<std::unique_ptr<MountGuard>> mounts;
  std::string error;  // why the tree could not be built, packed or mounted
};

class MountedTreeTest : public ::testing::TestWithParam<size_t> {
 public:
  static void SetUpTestSuite();

  static void TearDownTestSuite() {
    delete shared_;  // unmounts, ends the daemons, removes the files
    shared_ = nullptr;
  }

 protected:
  void SetUp() override {
    SKIP_UNLESS_CAN_MOUNT();
    ASSERT_NE(shared_, nullptr);
    ASSERT_TRUE(shared_->error.empty()) << shared_->error;
    ASSERT_GT(shared_->mountpoints.size(), GetParam());
    if (!shared_->build_notes.empty()) std::cout << shared_->build_notes;
  }

  const SharedTree& shared() const { return *shared_; }
  const Tree& source() const { return shared_->source; }
  const std::string& src() const { return shared_->src; }
  const std::string& mnt() const { return shared_->mountpoints[GetParam()]; }

  // The regular files of the source at least `min_bytes` long.
  std::vector<std::string> FilesOfAtLeast(uint64_t min_bytes) const {
    std::vector<std::string> out;
    for (const auto& [rel, node] : source()) {
      if (S_ISREG(node.st.st_mode) && static_cast<uint64_t>(node.st.st_size) >= min_bytes) {
        out.push_back(rel);
      }
    }
    return out;
  }

  // The checks; each TEST_P below runs a group of them on one mount (see there why).
  void CheckSourceTreeHasTheIntendedShape();
  void CheckPackReportsWhatItPacked();
  void CheckMountIsAReadOnlyFuseMount();
  void CheckEveryDirectoryListsLikeTheSource();
  void CheckSeekdirResumesAListingOfTwentyThousandEntries();
  void CheckAttributesMatchTheSource();
  void CheckLookupsByPathFindOddAndDeepNames();
  void CheckSymlinksKeepTheirTargets();
  void CheckEveryFileReadsByteForByte();
  void CheckLargeFilesReadInOddSizedPieces();
  void CheckMmapSeesTheSameBytes();
  void CheckPreadAtOddOffsetsCrossesChunkBoundaries();
  void CheckConcurrentReadersSeeTheSameBytes();
  void CheckEveryModificationFailsWithErofs();
  void CheckStatfsDescribesTheStore();

  static SharedTree* shared_;
};

}  // namespace dsfs::testing
