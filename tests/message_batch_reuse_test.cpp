// MessageBatch reuses its buffer (sluice/message_batch.h): a batch filled
// again as large as before allocates nothing, also past kKeepBytes (`sluice
// get` reads 8192 messages a batch: 1.6 MiB of 200-byte ones), and a batch
// of large messages does not keep their size once batches are small again.
// This binary replaces operator new/delete to count allocations and see
// what is freed.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>

#include "sluice/message_batch.h"

// GCC pairs the free() below with its own idea of operator new.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {

std::size_t g_allocs = 0;
std::size_t g_largest_freed = 0;

}  // namespace

void* operator new(std::size_t n) {
  ++g_allocs;
  if (void* p = std::malloc(n != 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  if (p != nullptr) g_largest_freed = std::max(g_largest_freed, malloc_usable_size(p));
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }

namespace sluice {
namespace {

void fill(MessageBatch& b, std::size_t count, const std::string& payload) {
  b.clear();
  for (std::size_t i = 0; i < count; ++i) b.add(payload).seq = i;
}

TEST(MessageBatchReuseTest, ABatchFilledAgainAsLargeAsBeforeAllocatesNothing) {
  const std::string payload(200, 'x');
  for (const std::size_t count : {100, 8192}) {  // 20 KB, and 1.6 MiB: past kKeepBytes
    MessageBatch b;
    fill(b, count, payload);
    ASSERT_EQ(b.bytes(), count * payload.size());
    const std::size_t before = g_allocs;
    for (int round = 0; round < 20; ++round) fill(b, count, payload);
    EXPECT_EQ(g_allocs - before, 0U) << count << " messages a batch";
    ASSERT_EQ(b.size(), count);
    EXPECT_EQ(b.data(count - 1), payload);
  }
}

TEST(MessageBatchReuseTest, ABatchOfLargeMessagesIsNotKeptOnceBatchesAreSmallAgain) {
  const std::string large(4 * MessageBatch::kKeepBytes, 'L');
  const std::string small(100, 's');
  MessageBatch b;
  fill(b, 2, large);
  g_largest_freed = 0;
  for (int round = 0; round < 100 && g_largest_freed < 2 * large.size(); ++round) {
    fill(b, 10, small);
  }
  EXPECT_GE(g_largest_freed, 2 * large.size());
  EXPECT_EQ(b.data(9), small);
}

}  // namespace
}  // namespace sluice
