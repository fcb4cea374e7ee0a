// The FileSystem calls the embedded store uses (a synced whole-file write,
// a whole-file replace, a rename that never replaces, a tree removal, an
// flock), on the real file system and on the simulated disk: same answers.
#include "log/file_system.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "log/fault_file_system.h"

namespace sluice::log {
namespace {

class FileSystemTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      fault_ = std::make_unique<testutil::FaultFileSystem>("/fault");
      fs_ = fault_.get();
      root_ = "/fault";
    } else {
      fs_ = &posix_file_system();
      root_ = (std::filesystem::temp_directory_path() /
               ("sluice_fs_test_" + std::to_string(::getpid())))
                  .string();
      std::filesystem::remove_all(root_);
      std::filesystem::create_directories(root_);
    }
  }
  void TearDown() override {
    if (!GetParam()) std::filesystem::remove_all(root_);
  }
  FileSystem& fs() { return *fs_; }
  std::string path(const std::string& p) const { return root_ + "/" + p; }

  std::unique_ptr<testutil::FaultFileSystem> fault_;
  FileSystem* fs_ = nullptr;
  std::string root_;
};

TEST_P(FileSystemTest, WriteFileSyncedCreatesNewOnly) {
  ASSERT_TRUE(write_file_synced(fs(), path("a"), "hello\n").ok());
  auto got = read_whole(fs(), path("a"));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "hello\n");
  EXPECT_EQ(write_file_synced(fs(), path("a"), "again").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(*read_whole(fs(), path("a")), "hello\n");
  EXPECT_FALSE(write_file_synced(fs(), path("no/such/dir/a"), "x").ok());
}

TEST_P(FileSystemTest, ReplaceFileSyncedReplacesWholeAndLeavesNoTmp) {
  ASSERT_TRUE(replace_file_synced(fs(), path("n"), "1\n").ok());
  EXPECT_EQ(*read_whole(fs(), path("n")), "1\n");
  ASSERT_TRUE(replace_file_synced(fs(), path("n"), "12345\n").ok());
  EXPECT_EQ(*read_whole(fs(), path("n")), "12345\n");
  ASSERT_TRUE(replace_file_synced(fs(), path("n"), "7\n").ok());
  EXPECT_EQ(*read_whole(fs(), path("n")), "7\n");
  EXPECT_FALSE(fs().exists(path("n.tmp")));
  // A leftover from a crash is replaced, not a reason to fail.
  ASSERT_TRUE(write_file_synced(fs(), path("n.tmp"), "garbage").ok());
  ASSERT_TRUE(replace_file_synced(fs(), path("n"), "8\n").ok());
  EXPECT_EQ(*read_whole(fs(), path("n")), "8\n");
}

TEST_P(FileSystemTest, RenameNoreplaceRefusesAnExistingTarget) {
  ASSERT_TRUE(write_file_synced(fs(), path("a"), "a").ok());
  ASSERT_TRUE(write_file_synced(fs(), path("b"), "b").ok());
  EXPECT_EQ(fs().rename_noreplace(path("a"), path("b")).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(*read_whole(fs(), path("a")), "a");
  EXPECT_EQ(*read_whole(fs(), path("b")), "b");
  ASSERT_TRUE(fs().rename_noreplace(path("a"), path("c")).ok());
  EXPECT_FALSE(fs().exists(path("a")));
  EXPECT_EQ(*read_whole(fs(), path("c")), "a");
  EXPECT_EQ(fs().rename_noreplace(path("a"), path("d")).code(), StatusCode::kNotFound);
}

TEST_P(FileSystemTest, RenameNoreplaceMovesDirectories) {
  ASSERT_TRUE(create_dirs(fs(), path("stage/sub")).ok());
  ASSERT_TRUE(write_file_synced(fs(), path("stage/sub/f"), "x").ok());
  ASSERT_TRUE(fs().create_dir(path("queues")).ok());
  ASSERT_TRUE(fs().rename_noreplace(path("stage"), path("queues/q")).ok());
  EXPECT_TRUE(fs().is_dir(path("queues/q/sub")));
  EXPECT_EQ(*read_whole(fs(), path("queues/q/sub/f")), "x");
  // Onto an existing directory, even an empty one: refused.
  ASSERT_TRUE(fs().create_dir(path("stage2")).ok());
  ASSERT_TRUE(fs().create_dir(path("queues/r")).ok());
  EXPECT_EQ(fs().rename_noreplace(path("stage2"), path("queues/r")).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(fs().rename_noreplace(path("stage2"), path("queues/q")).code(),
            StatusCode::kAlreadyExists);
}

TEST_P(FileSystemTest, RemoveTreeRemovesEverythingAndToleratesMissing) {
  ASSERT_TRUE(create_dirs(fs(), path("t/a/b")).ok());
  ASSERT_TRUE(write_file_synced(fs(), path("t/a/b/f"), "x").ok());
  ASSERT_TRUE(write_file_synced(fs(), path("t/g"), "y").ok());
  ASSERT_TRUE(fs().remove_tree(path("t")).ok());
  EXPECT_FALSE(fs().exists(path("t")));
  EXPECT_TRUE(fs().remove_tree(path("t")).ok());
  ASSERT_TRUE(write_file_synced(fs(), path("file"), "z").ok());
  EXPECT_TRUE(fs().exists(path("file")));
  ASSERT_TRUE(fs().remove_tree(path("file")).ok());
  EXPECT_FALSE(fs().exists(path("file")));
}

TEST_P(FileSystemTest, FlockExcludesASecondOpenInTheSameProcess) {
  auto a = fs().open(path("role.lock"), OpenMode::kCreate);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->try_flock().ok());
  EXPECT_TRUE((*a)->try_flock().ok()) << "the holder may ask again";
  auto b = fs().open(path("role.lock"), OpenMode::kCreate);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->try_flock().code(), StatusCode::kInUse);
  a->reset();  // closing releases it
  EXPECT_TRUE((*b)->try_flock().ok());
}

INSTANTIATE_TEST_SUITE_P(Both, FileSystemTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return std::string(p.param ? "Fault" : "Posix");
                         });

// The simulated disk: what a cut leaves of the new calls.
TEST(FaultFileSystemCutTest, RenameNoreplaceIsUndoneWithoutADirectorySync) {
  testutil::FaultFileSystem fs;
  ASSERT_TRUE(fs.create_dir("/fault/d").ok());
  ASSERT_TRUE(write_file_synced(fs, "/fault/d/a", "a").ok());
  ASSERT_TRUE(fs.sync_dir("/fault/d").ok());
  ASSERT_TRUE(fs.sync_dir("/fault").ok());
  ASSERT_TRUE(fs.rename_noreplace("/fault/d/a", "/fault/d/b").ok());
  auto before = fs.after_cut(testutil::CutMode::kDropUnsynced, 0);
  EXPECT_TRUE(before->exists("/fault/d/a"));
  EXPECT_FALSE(before->exists("/fault/d/b"));
  ASSERT_TRUE(fs.sync_dir("/fault/d").ok());
  auto after = fs.after_cut(testutil::CutMode::kDropUnsynced, 0);
  EXPECT_FALSE(after->exists("/fault/d/a"));
  EXPECT_EQ(*read_whole(*after, "/fault/d/b"), "a");
}

TEST(FaultFileSystemCutTest, ReplaceFileSyncedLeavesOldOrNewAtEveryCall) {
  std::uint64_t total = 0;
  {
    testutil::FaultFileSystem fs;
    ASSERT_TRUE(replace_file_synced(fs, "/fault/n", "old\n").ok());
    const std::uint64_t before = fs.calls();
    ASSERT_TRUE(replace_file_synced(fs, "/fault/n", "new!\n").ok());
    total = fs.calls() - before;
  }
  ASSERT_GE(total, 4U);
  for (std::uint64_t k = 1; k <= total + 1; ++k) {
    testutil::FaultFileSystem fs;
    ASSERT_TRUE(replace_file_synced(fs, "/fault/n", "old\n").ok());
    fs.cut_at(fs.calls() + k);
    const bool ok = replace_file_synced(fs, "/fault/n", "new!\n").ok();
    for (auto mode : {testutil::CutMode::kDropUnsynced, testutil::CutMode::kZeroFill,
                      testutil::CutMode::kTorn}) {
      auto image = fs.after_cut(mode, k);
      auto got = read_whole(*image, "/fault/n");
      ASSERT_TRUE(got.ok()) << "cut at " << k;
      EXPECT_TRUE(*got == "old\n" || *got == "new!\n") << "cut at " << k << ": '" << *got << "'";
      if (ok) {
        EXPECT_EQ(*got, "new!\n") << "cut at " << k;
      }
    }
  }
}

TEST(FaultFileSystemCutTest, LocksAndExistsAreNotCounted) {
  testutil::FaultFileSystem fs;
  auto f = fs.open("/fault/l", OpenMode::kCreate);
  ASSERT_TRUE(f.ok());
  const std::uint64_t n = fs.calls();
  ASSERT_TRUE((*f)->try_flock().ok());
  EXPECT_TRUE(fs.exists("/fault/l"));
  EXPECT_EQ(fs.calls(), n);
}

}  // namespace
}  // namespace sluice::log
