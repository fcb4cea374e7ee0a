// RedisCluster: a real Redis Cluster of N primaries, each with R replicas
// (none by default), on free loopback ports, made as an operator would:
// redis-server --cluster-enabled yes on each, then `redis-cli --cluster
// create`. Stopped with the test. A node can be killed, and with replicas
// the cluster fails over to one of them (node timeout: 1 s).
// Also moves one slot between nodes the way `redis-cli --cluster reshard`
// does (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE), in steps, so a
// test can act while the slot is migrating.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <vector>

#include "testutil/redis_server.h"

extern char** environ;  // NOLINT

namespace sluice::testutil {

class RedisCluster {
 public:
  explicit RedisCluster(int primaries = 3, int replicas = 0) {
    const std::string timeout = replicas > 0 ? "1000" : "5000";
    for (int i = 0; i < primaries * (1 + replicas); ++i) {
      nodes_.push_back(std::make_unique<RedisServer>(
          false, std::vector<std::string>{"cluster-enabled yes", "cluster-config-file nodes.conf",
                                          "cluster-node-timeout " + timeout}));
    }
    std::vector<std::string> args = {"redis-cli", "--cluster", "create"};
    for (const auto& n : nodes_) args.push_back("127.0.0.1:" + std::to_string(n->port()));
    args.insert(args.end(), {"--cluster-replicas", std::to_string(replicas), "--cluster-yes"});
    if (run(args) != 0) throw std::runtime_error("redis-cli --cluster create failed");
    // Every node agrees the cluster is up (an external process's state,
    // polled; no gtest here: benchmarks use this too).
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (const auto& n : nodes_) {
      RawRedis c(n->port());
      for (;;) {
        auto r = c.cmd({"CLUSTER", "INFO"});
        if (r->type == REDIS_REPLY_STRING &&
            std::string_view(r->str, r->len).find("cluster_state:ok") != std::string_view::npos) {
          break;
        }
        if (std::chrono::steady_clock::now() > give_up) {
          throw std::runtime_error("the cluster did not come up");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }

  std::size_t size() const { return nodes_.size(); }
  int port(std::size_t i) const { return nodes_[i]->port(); }
  // Options that reach the cluster through its first node.
  RedisOptions options() const { return nodes_[0]->options(); }

  // SIGKILL one node (a machine that died).
  void kill(std::size_t i) { nodes_[i]->kill(); }
  // SIGSTOP/SIGCONT one node (a machine that hangs, or is cut off, and comes
  // back): its port still accepts connections, nothing answers on them.
  void pause(std::size_t i) {
    nodes_[i]->pause();
    paused_.resize(nodes_.size());
    paused_[i] = true;
  }
  void resume(std::size_t i) {
    nodes_[i]->resume();
    paused_[i] = false;
  }
  // Killed and paused nodes are not asked anything.
  bool running(std::size_t i) const {
    return nodes_[i]->running() && (i >= paused_.size() || !paused_[i]);
  }

  // True once every replica of primary `i` has acknowledged all it was sent
  // (its offset in INFO replication equals the primary's).
  bool replicas_caught_up(std::size_t i) {
    auto r = RawRedis(port(i)).cmd({"INFO", "replication"});
    const std::string info(r->str, r->len);
    const auto field = [&](const std::string& name, std::size_t from = 0) {
      const auto at = info.find(name, from);
      return at == std::string::npos ? std::string() : info.substr(at + name.size(), 32);
    };
    const long long master = std::stoll(field("master_repl_offset:"));
    bool any = false;
    for (std::size_t at = info.find("slave0:"); at != std::string::npos;
         at = info.find("\nslave", at + 1)) {
      const std::string line = info.substr(at, info.find('\n', at + 1) - at);
      const auto off = line.find("offset=");
      if (line.find("state=online") == std::string::npos || off == std::string::npos) return false;
      if (std::stoll(line.substr(off + 7)) != master) return false;
      any = true;
    }
    return any;
  }

  // True once a write to `key` (which primary `i` serves) is acknowledged
  // by a replica (WAIT) that has received writes (its offset past 0): Redis
  // 7 starts streaming to a replica at its first ACK, up to a second after
  // its sync, and until then WAIT may say 0 (or 1 while the offset is
  // still 0). For polling.
  bool replica_acknowledges(std::size_t i, const std::string& key) {
    RawRedis primary(port(i));
    primary.cmd({"SET", key, "probe"});
    if (primary.integer({"WAIT", "1", "100"}) < 1) return false;
    auto r = RawRedis(port(replica_of(i))).cmd({"INFO", "replication"});
    const std::string info(r->str, r->len);
    const auto at = info.find("slave_repl_offset:");
    return at != std::string::npos && std::stoll(info.substr(at + 18)) > 0;
  }

  // The replica of primary `i` (an index), asked of the nodes (ROLE).
  std::size_t replica_of(std::size_t i) {
    for (std::size_t j = 0; j < nodes_.size(); ++j) {
      if (j == i || !running(j)) continue;
      auto r = RawRedis(port(j)).cmd({"ROLE"});  // {"slave", host, port, state, offset}
      if (r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
          std::string_view(r->element[0]->str, r->element[0]->len) == "slave" &&
          r->element[2]->integer == port(i)) {
        return j;
      }
    }
    throw std::runtime_error("node " + std::to_string(i) + " has no replica");
  }

  // The node serving `key` (an index), asked of the node itself; killed
  // nodes are skipped.
  std::size_t node_of(const std::string& key) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (!running(i)) continue;
      RawRedis c(port(i));
      auto r = c.cmd({"EXISTS", key});
      // Not MOVED: it serves the slot (a replica redirects to its primary).
      if (r->type == REDIS_REPLY_INTEGER) return i;
    }
    throw std::runtime_error("no node serves " + key);
  }
  long long slot_of(const std::string& key) {
    return RawRedis(port(0)).integer({"CLUSTER", "KEYSLOT", key});
  }
  std::string id(std::size_t i) {
    auto r = RawRedis(port(i)).cmd({"CLUSTER", "MYID"});
    return {r->str, r->len};
  }

  // Resharding one slot from node `from` to node `to`, in two steps:
  // begin_move marks it migrating/importing and moves its keys (from then
  // on `from` answers ASK for them); end_move gives the slot to `to` on
  // every node (from then on MOVED).
  void begin_move(long long slot, std::size_t from, std::size_t to) {
    const std::string s = std::to_string(slot);
    RawRedis dst(port(to));
    RawRedis src(port(from));
    check(dst.cmd({"CLUSTER", "SETSLOT", s, "IMPORTING", id(from)}));
    check(src.cmd({"CLUSTER", "SETSLOT", s, "MIGRATING", id(to)}));
    for (;;) {
      auto keys = src.cmd({"CLUSTER", "GETKEYSINSLOT", s, "100"});
      if (keys->elements == 0) break;
      std::vector<std::string> argv = {"MIGRATE", "127.0.0.1", std::to_string(port(to)), "", "0",
                                       "5000",    "KEYS"};
      for (std::size_t i = 0; i < keys->elements; ++i) {
        argv.emplace_back(keys->element[i]->str, keys->element[i]->len);
      }
      check(src.cmd(argv));
    }
  }
  void end_move(long long slot, std::size_t to) {
    const std::string owner = id(to);
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      check(RawRedis(port(i)).cmd({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", owner}));
    }
  }

 private:
  static void check(const RawReply& r) {
    if (r->type == REDIS_REPLY_ERROR) {
      throw std::runtime_error("cluster command failed: " + std::string(r->str, r->len));
    }
  }
  // Runs a command to its end, its output discarded; its exit status.
  static int run(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::vector<bool> paused_;
};

}  // namespace sluice::testutil
