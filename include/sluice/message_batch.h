// MessageBatch: messages read in one call, their bytes back to back in one
// buffer. A batched read (Channel::next_batch, QueueReader::get_batch) fills
// it without an allocation per message once its two buffers have grown: a
// string per 100-byte message was a third of a consumer's CPU (malloc, the
// copy, free), in C++ and under the Python binding alike.
//
// Thread safety: none (a value type). Views (data(), id()) stay valid until
// the batch is next changed (add, clear) or destroyed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

class MessageBatch {
 public:
  // What is known of one message besides its bytes; the fields are those of
  // StoreMessage (include/sluice/store.h says which backend sets which).
  struct Entry {
    std::size_t offset = 0;  // its data: bytes [offset, offset + size)
    std::size_t size = 0;
    std::size_t id_offset = 0;  // its id (Streams), in the same buffer
    std::size_t id_size = 0;
    std::optional<std::uint64_t> seq;
    std::optional<std::chrono::system_clock::time_point> time;
    std::optional<std::uint32_t> deliveries;
  };

  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const Entry& entry(std::size_t i) const { return entries_[i]; }
  std::string_view data(std::size_t i) const {
    return {bytes_.data() + entries_[i].offset, entries_[i].size};
  }
  std::string_view id(std::size_t i) const {
    return {bytes_.data() + entries_[i].id_offset, entries_[i].id_size};
  }
  // The bytes of every message (and id) held.
  std::size_t bytes() const { return bytes_.size(); }

  // Appends a message (its bytes copied); the caller fills the rest of the
  // returned entry.
  Entry& add(std::string_view data, std::string_view id = {}) {
    Entry& e = entries_.emplace_back();
    e.offset = bytes_.size();
    e.size = data.size();
    bytes_.append(data);
    if (!id.empty()) {
      e.id_offset = bytes_.size();
      e.id_size = id.size();
      bytes_.append(id);
    }
    return e;
  }
  // Empties it. Its buffers keep their capacity while batches use it: past
  // kKeepBytes, the bytes' buffer is freed once kUnderusedClears clears in a
  // row found under a quarter of it used (a batch of large messages does not
  // pin their size for the batch's life). Freeing it at every clear made
  // each batch over kKeepBytes (`sluice get`'s 8192 messages of 130 bytes
  // and more) grow it again, 20-30x the cost of the copies.
  void clear() {
    if (bytes_.capacity() > kKeepBytes && bytes_.size() < bytes_.capacity() / 4) {
      if (++underused_ == kUnderusedClears) {
        std::string().swap(bytes_);
        underused_ = 0;
      }
    } else {
      underused_ = 0;
    }
    bytes_.clear();
    entries_.clear();
  }
  static constexpr std::size_t kKeepBytes = std::size_t{1} << 20;
  static constexpr int kUnderusedClears = 8;

 private:
  std::string bytes_;
  std::vector<Entry> entries_;
  int underused_ = 0;  // clears in a row that found bytes_ mostly unused
};

}  // namespace sluice
