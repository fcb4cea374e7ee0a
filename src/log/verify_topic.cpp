// verify_topic: recovery's scan of a topic, reporting damage without
// repairing anything or taking the writer's lock.
#include <string>

#include "log/file_system.h"
#include "log/recovery.h"
#include "log/topic_impl.h"
#include "sluice/log/topic.h"

namespace sluice {

Result<RecoveryReport> verify_topic(const std::string& dir, TopicOptions options) {
  return log::verify_topic(log::posix_file_system(), dir, options);
}

}  // namespace sluice

namespace sluice::log {

Result<RecoveryReport> verify_topic(FileSystem& fs, const std::string& dir,
                                    const TopicOptions& options) {
  if (Status s = validate(options); !s.ok()) return s;
  if (!fs.is_dir(dir)) return Status(StatusCode::kNotFound, "no topic directory " + dir);
  RecoveryReport report;
  auto scan = scan_topic(fs, dir, report);
  if (!scan.ok()) return scan.status();
  return report;
}

}  // namespace sluice::log
