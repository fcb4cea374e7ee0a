// Damage for the tests that show what readers and recovery do with it: one
// bit of a file flipped in place, through the real file system.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>

namespace sluice::testutil {

inline void flip_bit(const std::filesystem::path& file, std::uint64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char b = 0;
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x10);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&b, 1);
}

}  // namespace sluice::testutil
