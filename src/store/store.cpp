// QueueStore::open (picks the backend from the location) and name checks.
#include "sluice/store.h"

#include <algorithm>
#include <cctype>

#include "store/dir_store.h"
#ifdef SLUICE_STORE_WITH_REDIS
#include "store/redis_store.h"
#endif

namespace sluice {

Status validate_queue_name(std::string_view name) {
  const bool ok = !name.empty() && name.size() <= 200 && name != "." && name != ".." &&
                  std::all_of(name.begin(), name.end(), [](char ch) {
                    return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '-' ||
                           ch == '_' || ch == '.';
                  });
  if (ok) return Status::Ok();
  return {StatusCode::kInvalidArgument,
          "bad name '" + std::string(name) +
              "': use 1-200 characters of A-Z a-z 0-9 . _ - (not \".\" or \"..\")"};
}

Status validate_channel_name(std::string_view name) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  if (name.starts_with('.')) {
    return {StatusCode::kInvalidArgument,
            "bad channel name '" + std::string(name) + "': must not start with '.'"};
  }
  return Status::Ok();
}

Result<std::unique_ptr<QueueStore>> QueueStore::open(std::string_view location,
                                                     const StoreOptions& options) {
  if (location.starts_with("redis://") || location.starts_with("rediss://")) {
#ifdef SLUICE_STORE_WITH_REDIS
    return store::RedisStore::open(location, options);
#else
    return Status(StatusCode::kInvalidArgument,
                  "this build of sluice has no Redis support (rebuild with "
                  "-DSLUICE_WITH_REDIS=ON); use a directory");
#endif
  }
  std::string_view path = location;
  if (path.starts_with("file:")) {
    path.remove_prefix(5);
  } else if (path.find("://") != std::string_view::npos) {
    return Status(
        StatusCode::kInvalidArgument,
        "store '" + std::string(location) + "': unknown scheme; use a directory path or file:PATH");
  }
  if (path.empty()) {
    return Status(StatusCode::kInvalidArgument, "store location is empty");
  }
  return store::DirStore::open(std::string(path), options);
}

Status QueueReader::beyond(std::uint64_t n, std::uint64_t delivered) {
  return {StatusCode::kInvalidArgument, "ack_prefix(" + std::to_string(n) + "): only " +
                                            std::to_string(delivered) +
                                            " messages were delivered to this reader"};
}

Status QueueReader::get(std::vector<std::string>& out, std::size_t max, const Context& ctx) {
  std::vector<StoreMessage> got;
  Status s = get(got, max, ctx);
  for (StoreMessage& m : got) out.push_back(std::move(m.data));
  return s;
}

Status QueueReader::get_batch(MessageBatch& out, std::size_t max, const Context& ctx) {
  if (max == 0) return {StatusCode::kInvalidArgument, "get: max is 0"};
  std::vector<StoreMessage> got;
  Status s = get(got, max, ctx);
  for (const StoreMessage& m : got) {
    MessageBatch::Entry& e = out.add(m.data, m.id);
    e.seq = m.seq;
    e.time = m.time;
    e.deliveries = m.deliveries;
  }
  return s;
}

}  // namespace sluice
