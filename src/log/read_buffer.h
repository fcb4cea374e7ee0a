// ReadBuffer: bytes a pread fills, reused from one read to the next.
// std::string's resize writes every new byte before pread overwrites it:
// a reader process resizing a 1 MiB buffer per look at the writer spent more
// on zeroing (and on faulting in fresh pages) than on the copy itself.
#pragma once

#include <cstddef>
#include <memory>

namespace sluice::log {

class ReadBuffer {
 public:
  // Room for n bytes, contents unspecified (the old ones are gone if it
  // grew); size() becomes n.
  char* take(std::size_t n) {
    if (n > cap_) {
      data_ = std::make_unique_for_overwrite<char[]>(n);
      cap_ = n;
    }
    size_ = n;
    return data_.get();
  }
  // What the read really got (<= size()).
  void shrink(std::size_t n) { size_ = n < size_ ? n : size_; }
  const char* data() const { return data_ ? data_.get() : &empty_; }
  std::size_t size() const { return size_; }

 private:
  static constexpr char empty_ = 0;  // data() of an empty buffer (never null)
  std::unique_ptr<char[]> data_;
  std::size_t cap_ = 0;
  std::size_t size_ = 0;
};

}  // namespace sluice::log
