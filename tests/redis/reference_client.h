// ReferenceClient speaks the pressure protocol the way the existing clients
// do (../shared/seeds/pressure-protocol.md as corrected by
// ../shared/pressure-wire-notes.md): one command per round trip, the role
// token popped with BRPOP and held for the whole operation, "0" as every
// token, `stats:` keys, `<host>_pid<pid>` as the id, bound 0 never touching
// :not_full. It exists to check that sluice interoperates with them.
// try_put/try_get are the protocol's non-blocking Put and Get.
// Differences kept on purpose: blocking waits have a timeout (so a broken
// test fails instead of hanging), and a get woken by close re-pushes the
// :closed element it popped (hazard 6 would otherwise make tests flaky).
#pragma once

#include <unistd.h>

#include <array>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "testutil/redis_server.h"

namespace sluice::testutil {

class ReferenceClient {
 public:
  struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  ReferenceClient(int port, std::string name, std::string prefix = "__pressure__")
      : redis_(port), base_(prefix + ":" + name) {
    std::array<char, 256> host{};
    gethostname(host.data(), host.size() - 1);
    id_ = std::string(host.data()) + "_pid" + std::to_string(getpid());
  }

  void create(long long bound) {
    if (redis_.integer({"SETNX", k(":bound"), std::to_string(bound)}) == 0) {
      throw Error("QueueAlreadyExists");
    }
    redis_.cmd({"LPUSH", k(":producer_free"), "0"});
    redis_.cmd({"LPUSH", k(":consumer_free"), "0"});
    redis_.cmd({"LPUSH", k(":not_full"), "0"});
  }

  bool exists() { return redis_.integer({"EXISTS", k(":bound")}) == 1; }

  void put(const std::string& value) {
    must_exist();
    brpop(k(":producer_free"));
    step_hook_("producer token taken");
    redis_.cmd({"SET", k(":producer"), id_});
    if (redis_.integer({"EXISTS", k(":closed")}) == 1) {
      redis_.cmd({"LPUSH", k(":producer_free"), "0"});
      throw Error("QueueClosed");
    }
    const long long bound = std::stoll(redis_.get(k(":bound")));
    if (bound != 0) brpop(k(":not_full"));
    const long long len = redis_.integer({"LPUSH", base_, value});
    if (bound != 0 && len < bound) {
      redis_.cmd({"LPUSH", k(":not_full"), "0"});
      redis_.cmd({"LTRIM", k(":not_full"), "0", "0"});
    }
    redis_.cmd({"INCR", k(":stats:produced_messages")});
    redis_.cmd({"INCRBY", k(":stats:produced_bytes"), std::to_string(value.size())});
    redis_.cmd({"LPUSH", k(":producer_free"), "0"});
  }

  std::string get() {
    must_exist();
    brpop(k(":consumer_free"));
    step_hook_("consumer token taken");
    redis_.cmd({"SET", k(":consumer"), id_});
    std::string value;
    if (redis_.integer({"EXISTS", k(":closed")}) == 1) {
      if (redis_.integer({"LLEN", base_}) == 0) {
        redis_.cmd({"LPUSH", k(":consumer_free"), "0"});
        throw Error("QueueClosed");
      }
      value = brpop(base_).second;
    } else {
      auto [key, v] = brpop(base_, k(":closed"));
      if (key == k(":closed")) {
        redis_.cmd({"LPUSH", k(":closed"), v});  // put back what the wake-up popped
        redis_.cmd({"LPUSH", k(":consumer_free"), "0"});
        throw Error("QueueClosed");
      }
      value = v;
    }
    const long long bound = std::stoll(redis_.get(k(":bound")));
    if (bound != 0 && redis_.integer({"LLEN", base_}) < bound) {
      redis_.cmd({"LPUSH", k(":not_full"), "0"});
      redis_.cmd({"LTRIM", k(":not_full"), "0", "0"});
    }
    redis_.cmd({"INCR", k(":stats:consumed_messages")});
    redis_.cmd({"INCRBY", k(":stats:consumed_bytes"), std::to_string(value.size())});
    redis_.cmd({"LPUSH", k(":consumer_free"), "0"});
    return value;
  }

  // The protocol's Put (Non-Blocking): throws QueueInUse when another
  // producer holds the role, QueueFull when :not_full has no token.
  void try_put(const std::string& value) {
    must_exist();
    if (!rpop(k(":producer_free"))) throw Error("QueueInUse");
    redis_.cmd({"SET", k(":producer"), id_});
    if (redis_.integer({"EXISTS", k(":closed")}) == 1) {
      redis_.cmd({"LPUSH", k(":producer_free"), "0"});
      throw Error("QueueClosed");
    }
    const long long bound = std::stoll(redis_.get(k(":bound")));
    if (bound != 0 && !rpop(k(":not_full"))) {
      redis_.cmd({"LPUSH", k(":producer_free"), "0"});
      throw Error("QueueFull");
    }
    const long long len = redis_.integer({"LPUSH", base_, value});
    if (bound != 0 && len < bound) {
      redis_.cmd({"LPUSH", k(":not_full"), "0"});
      redis_.cmd({"LTRIM", k(":not_full"), "0", "0"});
    }
    redis_.cmd({"INCR", k(":stats:produced_messages")});
    redis_.cmd({"INCRBY", k(":stats:produced_bytes"), std::to_string(value.size())});
    redis_.cmd({"LPUSH", k(":producer_free"), "0"});
  }

  // The protocol's Get (Non-Blocking): throws QueueInUse when another
  // consumer holds the role, QueueEmpty when there is nothing to get.
  std::string try_get() {
    must_exist();
    if (!rpop(k(":consumer_free"))) throw Error("QueueInUse");
    redis_.cmd({"SET", k(":consumer"), id_});
    auto value = rpop(base_);
    if (!value) {
      const bool closed = redis_.integer({"EXISTS", k(":closed")}) == 1;
      redis_.cmd({"LPUSH", k(":consumer_free"), "0"});
      throw Error(closed ? "QueueClosed" : "QueueEmpty");
    }
    const long long bound = std::stoll(redis_.get(k(":bound")));
    if (bound != 0 && redis_.integer({"LLEN", base_}) < bound) {
      redis_.cmd({"LPUSH", k(":not_full"), "0"});
      redis_.cmd({"LTRIM", k(":not_full"), "0", "0"});
    }
    redis_.cmd({"INCR", k(":stats:consumed_messages")});
    redis_.cmd({"INCRBY", k(":stats:consumed_bytes"), std::to_string(value->size())});
    redis_.cmd({"LPUSH", k(":consumer_free"), "0"});
    return *value;
  }

  void close() {
    must_exist();
    brpop(k(":producer_free"));
    redis_.cmd({"SET", k(":producer"), id_});
    if (redis_.integer({"EXISTS", k(":closed")}) == 1) {
      redis_.cmd({"LPUSH", k(":producer_free"), "0"});
      throw Error("QueueClosed");
    }
    redis_.cmd({"LPUSH", k(":closed"), "0", "0"});
    redis_.cmd({"LPUSH", k(":producer_free"), "0"});
  }

  void del() {
    must_exist();
    redis_.cmd({"DEL", k(":bound")});
    redis_.cmd({"LPUSH", k(":not_full"), "0"});
    redis_.cmd({"LPUSH", k(":closed"), "0", "0"});
    brpop(k(":producer_free"));
    redis_.cmd({"DEL", k(":producer")});
    redis_.cmd({"DEL", k(":producer_free")});
    brpop(k(":consumer_free"));
    redis_.cmd({"DEL", k(":consumer")});
    redis_.cmd({"DEL", k(":consumer_free")});
    redis_.cmd({"DEL", k(":not_full")});
    redis_.cmd({"DEL", k(":closed")});
    redis_.cmd({"DEL", k(":stats:produced_messages"), k(":stats:produced_bytes"),
                k(":stats:consumed_messages"), k(":stats:consumed_bytes")});
    redis_.cmd({"DEL", base_});
  }

  // Takes the producer role and keeps it, as a client blocked inside a put
  // does, until release_producer().
  void hold_producer() {
    brpop(k(":producer_free"));
    redis_.cmd({"SET", k(":producer"), id_});
  }
  void release_producer() { redis_.cmd({"LPUSH", k(":producer_free"), "0"}); }

  const std::string& id() const { return id_; }
  // Called after each role-token pop (tests use it to pause a client there).
  void on_step(std::function<void(const char*)> hook) { step_hook_ = std::move(hook); }

 private:
  std::string k(const char* suffix) const { return base_ + suffix; }
  void must_exist() {
    if (!exists()) throw Error("QueueDoesNotExist");
  }
  std::optional<std::string> rpop(const std::string& key) {
    auto r = redis_.cmd({"RPOP", key});
    if (r->type != REDIS_REPLY_STRING) return std::nullopt;
    return std::string(r->str, r->len);
  }
  std::pair<std::string, std::string> brpop(const std::string& a,
                                            const std::optional<std::string>& b = {}) {
    std::vector<std::string> args = {"BRPOP", a};
    if (b) args.push_back(*b);
    args.push_back("8");
    auto r = redis_.cmd(args);
    if (r->type != REDIS_REPLY_ARRAY) throw Error("reference client: BRPOP timed out on " + a);
    return {std::string(r->element[0]->str, r->element[0]->len),
            std::string(r->element[1]->str, r->element[1]->len)};
  }

  RawRedis redis_;
  std::string base_;
  std::string id_;
  std::function<void(const char*)> step_hook_ = [](const char*) {};
};

}  // namespace sluice::testutil
