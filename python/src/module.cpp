// sluice._sluice: the pybind11 extension under the `sluice` package
// (python/sluice/__init__.py adds the exceptions, the dataclasses and the
// asyncio form, and re-exports these classes).
//
// Blocking: every call into the store releases the GIL. A call that may wait
// (writer, reader, put, get, close, seek, purge) runs in slices of at most
// kSlice, each a Context whose deadline is the earlier of the caller's and
// the slice's end; between slices it takes the GIL back and calls
// PyErr_CheckSignals(), so Ctrl-C in the main thread raises
// KeyboardInterrupt within a slice. A slice that ends is a clean stop in the
// store's contract: a put has enqueued exactly `done` messages (the next
// slice goes on from there; an interrupt reports them as `.enqueued`), a get
// that timed out returned nothing. Other threads end by their timeout or by
// a Cancel (a std::stop_source in every slice's Context).
// Fork: a Store, Writer or Reader belongs to the process that made it. In a
// child made by fork() every call raises sluice.Error, and the child never
// runs their destructors (which would give back the parent's roles and
// messages, or talk on the parent's Redis connection): they are leaked.
// Thread safety: a Store may be shared by threads. A Writer too: puts from
// several threads are combined into one store put (Writer's comment). A
// Reader is serialised by a mutex of its own (a second thread waits its
// turn; a get's wait for it ends by its timeout, cancel or a signal), but
// a get waiting for messages steps aside for ack, release and leave.
#include <pthread.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <structmember.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "sluice/context.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace py = pybind11;

namespace sluice::python {
namespace {

using Clock = Context::Clock;
constexpr auto kSlice = std::chrono::milliseconds(50);

// Set by sluice/__init__.py (_sluice._setup): the exception classes by
// status code name ("closed", "not_found", ...; "" is the base class) and
// the dataclasses stat() and seek() return.
py::dict& registry() {
  static auto* d = new py::dict();  // never destroyed: outlives the interpreter's teardown
  return *d;
}

// sluice.Error.
py::object base_error() {
  py::dict& r = registry();
  if (r.contains("")) return r[""];
  return py::reinterpret_borrow<py::object>(PyExc_RuntimeError);  // before _setup
}

py::object error_class(StatusCode code) {
  py::dict& r = registry();
  const std::string name(status_code_name(code));
  if (r.contains(name)) return r[name.c_str()];
  return base_error();
}

// Raises the exception for `s`, its message prefixed with `what` (e.g.
// "queue 'q'") unless the store's message names it already, as the command
// words it. `attrs` are set on the exception object.
[[noreturn]] void raise_status(const Status& s, std::string_view what, py::dict attrs = {},
                               py::object cls = py::none()) {
  std::string msg =
      s.message().empty() ? std::string(status_code_name(s.code())) : std::string(s.message());
  if (!what.empty() && msg.find(what) == std::string::npos) msg = std::string(what) + ": " + msg;
  if (cls.is_none()) cls = error_class(s.code());
  py::object exc = cls(msg);
  exc.attr("code") = py::str(std::string(status_code_name(s.code())));
  for (auto item : attrs) exc.attr(item.first) = item.second;
  PyErr_SetObject(cls.ptr(), exc.ptr());
  throw py::error_already_set();
}

std::string queue_label(std::string_view name) { return "queue '" + std::string(name) + "'"; }

// A pending Python exception (KeyboardInterrupt from PyErr_CheckSignals)
// with `attrs` set on it, thrown on.
[[noreturn]] void rethrow_with(const py::dict& attrs) {
  py::error_already_set e;
  for (auto item : attrs) {
    if (PyObject_SetAttr(e.value().ptr(), item.first.ptr(), item.second.ptr()) != 0) PyErr_Clear();
  }
  throw e;
}

// The cancel handle: sluice.Cancel.
struct Cancel {
  std::stop_source source;
};

// Set (with the thread that runs them) by an atexit callback, which Python
// runs before it starts finalizing, once only daemon threads are left.
std::atomic<bool> g_exiting{false};
std::atomic<pthread_t> g_exit_thread{};
// Threads between their look at g_exiting and having the GIL back: the exit
// waits for them (they may have looked just before it was set, and CPython
// ends a thread that asks for the GIL once finalizing has begun).
std::atomic<int> g_restoring{0};

// Releases the GIL for its scope, as py::gil_scoped_release does, except on
// the way back while the interpreter exits: a daemon thread blocked in a get
// or put then waits here for the process to end. CPython would end it with
// pthread_exit, whose forced unwind through a noexcept destructor calls
// std::terminate (the process aborted at exit); CPython 3.14 itself parks
// such threads the same way. The thread running the exit takes the GIL back.
class NoGil {
 public:
  NoGil() : state_(PyEval_SaveThread()) {}
  ~NoGil() {
    if (g_exiting.load() && pthread_equal(g_exit_thread.load(), pthread_self()) != 0) {
      PyEval_RestoreThread(state_);  // the thread running the exit
      return;
    }
    g_restoring.fetch_add(1);
    if (g_exiting.load()) {
      g_restoring.fetch_sub(1);
      for (;;) pause();
    }
    PyEval_RestoreThread(state_);
    g_restoring.fetch_sub(1);
  }
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;

 private:
  PyThreadState* state_;
};

// How long a call may wait, and what may stop it.
struct Call {
  std::optional<Clock::time_point> deadline;
  std::stop_token token;
};

Call call_of(const std::optional<double>& timeout, const Cancel* cancel) {
  Call c;
  if (timeout) {
    if (std::isnan(*timeout)) throw py::value_error("timeout is NaN");
    c.deadline = Context::deadline_in(std::chrono::duration<double>(*timeout));
  }
  if (cancel != nullptr) c.token = cancel->source.get_token();
  return c;
}

// Runs `attempt(ctx)` without the GIL in slices (see the file comment) until
// it gives something other than kDeadlineExceeded or kInUse (a role still
// held) or the caller's deadline passes. A signal handler's exception is
// thrown on, with `on_interrupt()`'s attributes set on it.
template <class F, class G>
Status sliced(const Call& call, F&& attempt, G&& on_interrupt) {
  for (;;) {
    const Clock::time_point end = Clock::now() + kSlice;
    const bool last = call.deadline && *call.deadline <= end;
    const Context ctx(call.token, last ? *call.deadline : end);
    Status s;
    {
      NoGil nogil;
      s = attempt(ctx);
    }
    if (last || s.ok()) return s;
    if (s.code() != StatusCode::kDeadlineExceeded && s.code() != StatusCode::kInUse) return s;
    if (PyErr_CheckSignals() != 0) rethrow_with(on_interrupt());
  }
}
template <class F>
Status sliced(const Call& call, F&& attempt) {
  return sliced(call, std::forward<F>(attempt), [] { return py::dict(); });
}

// This process's id, kept by a fork handler (getpid() is a system call, and
// every call checks it).
std::atomic<pid_t>& process_id() {
  static std::atomic<pid_t> pid{getpid()};
  return pid;
}
pid_t this_pid() { return process_id().load(std::memory_order_relaxed); }

// One process owns each object (see the file comment).
void check_pid(pid_t pid, const char* what) {
  if (this_pid() == pid) return;
  PyErr_SetString(base_error().ptr(),
                  (std::string("this ") + what + " was opened in process " + std::to_string(pid) +
                   " and cannot be used in process " + std::to_string(this_pid()) +
                   ", made from it by fork(); open a new sluice.Store in the child")
                      .c_str());
  throw py::error_already_set();
}

// Takes `mu` without holding the GIL while it waits (its holder may need the
// GIL between slices).
template <class Mutex>
std::unique_lock<Mutex> take(Mutex& mu) {
  std::unique_lock<Mutex> lock(mu, std::try_to_lock);
  if (!lock.owns_lock()) {
    NoGil nogil;
    lock.lock();
  }
  return lock;
}

// A message as Python sees it: sluice.Message, a plain CPython type rather
// than a pybind11 class. A pybind11 instance costs ~250 ns to make and free
// (its instance registry, holder and type lookups: a third of get_many's
// time per message); this one is one allocation, plus its bytes. The
// numbers (seq, time, deliveries) are kept as C values and made into Python
// objects only when read: a float per message for `time` cost a consumer of
// lists of 100 ~6% once the embedded store gave append times. Its object
// fields are immutable atoms (bytes, str), so it cannot be part of a cycle
// and is not tracked by the garbage collector.
#if PY_VERSION_HEX < 0x030A0000
#error "sluice's module needs Python 3.10 or later (Py_TPFLAGS_DISALLOW_INSTANTIATION)"
#endif
struct MessageObject {
  PyObject ob_base;   // PyObject_HEAD
  PyObject* data;     // bytes
  PyObject* channel;  // str
  PyObject* id;       // str (Streams entry id), or null
  std::uint64_t seq;  // the log's seq, if has & kSeq
  double time;        // seconds since the epoch, if has & kTime
  std::uint64_t deliveries;
  unsigned has;  // kSeq | kTime | kDeliveries
};
constexpr unsigned kHasSeq = 1, kHasTime = 2, kHasDeliveries = 4;

PyTypeObject* g_message_type = nullptr;  // made once, at import; never freed

void message_dealloc(PyObject* self) {
  auto* m = reinterpret_cast<MessageObject*>(self);
  Py_XDECREF(m->data);
  Py_XDECREF(m->channel);
  Py_XDECREF(m->id);
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);  // a heap type: each instance holds a reference to it
}

PyObject* message_seq(PyObject* self, void* /*closure*/) {
  auto* m = reinterpret_cast<MessageObject*>(self);
  if (m->id != nullptr) return Py_NewRef(m->id);
  if ((m->has & kHasSeq) != 0) return PyLong_FromUnsignedLongLong(m->seq);
  Py_RETURN_NONE;
}
PyObject* message_time(PyObject* self, void* /*closure*/) {
  auto* m = reinterpret_cast<MessageObject*>(self);
  if ((m->has & kHasTime) != 0) return PyFloat_FromDouble(m->time);
  Py_RETURN_NONE;
}
PyObject* message_deliveries(PyObject* self, void* /*closure*/) {
  auto* m = reinterpret_cast<MessageObject*>(self);
  if ((m->has & kHasDeliveries) != 0) return PyLong_FromUnsignedLongLong(m->deliveries);
  Py_RETURN_NONE;
}

PyObject* message_repr(PyObject* self) {
  auto* m = reinterpret_cast<MessageObject*>(self);
  PyObject* seq = message_seq(self, nullptr);
  if (seq == nullptr) return nullptr;
  PyObject* r =
      PyUnicode_FromFormat("Message(seq=%R, channel=%R, data=%R)", seq, m->channel, m->data);
  Py_DECREF(seq);
  return r;
}

PyObject* message_bytes(PyObject* self, PyObject* /*unused*/) {
  PyObject* data = reinterpret_cast<MessageObject*>(self)->data;
  Py_INCREF(data);
  return data;
}

PyTypeObject* make_message_type() {
  static PyMemberDef members[] = {
      {"data", T_OBJECT_EX, offsetof(MessageObject, data), READONLY, "The bytes."},
      {"channel", T_OBJECT_EX, offsetof(MessageObject, channel), READONLY,
       "The channel it was read from."},
      {nullptr, 0, 0, 0, nullptr}};
  static PyGetSetDef getset[] = {
      {"seq", message_seq, nullptr,
       "int: its seq in the embedded log; str: the entry id on a Redis Streams topic; None on a "
       "pressure queue.",
       nullptr},
      {"time", message_time, nullptr,
       "When it was put (seconds since the epoch), where the backend knows it; else None.",
       nullptr},
      {"deliveries", message_deliveries, nullptr,
       "Deliveries to the channel, this one included (Streams topics); else None.", nullptr},
      {nullptr, nullptr, nullptr, nullptr, nullptr}};
  static PyMethodDef methods[] = {{"__bytes__", message_bytes, METH_NOARGS, "The bytes."},
                                  {nullptr, nullptr, 0, nullptr}};
  static PyType_Slot slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(message_dealloc)},
                                {Py_tp_repr, reinterpret_cast<void*>(message_repr)},
                                {Py_tp_members, members},
                                {Py_tp_getset, getset},
                                {Py_tp_methods, methods},
                                {Py_tp_doc, const_cast<char*>("A message a reader got.")},
                                {0, nullptr}};
  static PyType_Spec spec = {"sluice.Message", sizeof(MessageObject), 0,
                             Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, slots};
  PyObject* type = PyType_FromSpec(&spec);
  if (type == nullptr) throw py::error_already_set();
  return reinterpret_cast<PyTypeObject*>(type);
}

// A new reference, or throws (the Python error set).
PyObject* checked(PyObject* o) {
  if (o == nullptr) throw py::error_already_set();
  return o;
}

// A sluice.Message of data, id (Streams) and what the entry knows.
py::object make_message(std::string_view data_bytes, std::string_view id_chars,
                        const std::optional<std::uint64_t>& seq,
                        const std::optional<std::chrono::system_clock::time_point>& time,
                        const std::optional<std::uint32_t>& deliveries, const py::object& channel) {
  // Each field owned here until the message takes it (an exception frees it).
  auto field = [](PyObject* o) { return py::reinterpret_steal<py::object>(checked(o)); };
  py::object data = field(
      PyBytes_FromStringAndSize(data_bytes.data(), static_cast<Py_ssize_t>(data_bytes.size())));
  py::object id;
  if (!seq && !id_chars.empty()) {
    id = field(
        PyUnicode_FromStringAndSize(id_chars.data(), static_cast<Py_ssize_t>(id_chars.size())));
  }
  auto* o = PyObject_New(MessageObject, g_message_type);
  if (o == nullptr) throw py::error_already_set();
  o->data = data.release().ptr();
  o->channel = py::object(channel).release().ptr();
  o->id = id ? id.release().ptr() : nullptr;
  o->has = 0;
  o->seq = seq.value_or(0);
  if (seq) o->has |= kHasSeq;
  o->time = time ? std::chrono::duration<double>(time->time_since_epoch()).count() : 0.0;
  if (time) o->has |= kHasTime;
  o->deliveries = deliveries.value_or(0);
  if (deliveries) o->has |= kHasDeliveries;
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(o));
}

py::object to_python(const StoreMessage& m, const py::object& channel) {
  return make_message(m.data, m.id, m.seq, m.time, m.deliveries, channel);
}

py::object to_python(const MessageBatch& b, std::size_t i, const py::object& channel) {
  const MessageBatch::Entry& e = b.entry(i);
  return make_message(b.data(i), b.id(i), e.seq, e.time, e.deliveries, channel);
}

// Bytes for a put: a view of bytes or str (immutable, so no copy: the
// caller keeps the object alive), else a copy of any buffer.
struct Payloads {
  std::vector<std::string_view> views;
  std::deque<std::string> copies;  // a deque: views into it stay valid as it grows
  std::size_t bytes = 0;
};

void add_payload(Payloads& p, const py::handle& o) {
  PyObject* obj = o.ptr();
  if (PyBytes_Check(obj)) {
    p.views.emplace_back(PyBytes_AS_STRING(obj), static_cast<std::size_t>(PyBytes_GET_SIZE(obj)));
  } else if (PyUnicode_Check(obj)) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(obj, &n);
    if (s == nullptr) throw py::error_already_set();
    p.views.emplace_back(s, static_cast<std::size_t>(n));
  } else if (PyObject_CheckBuffer(obj)) {
    // Any layout (a strided or reversed memoryview, a numpy slice): copied
    // in C order, as bytes(obj) would be.
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_FULL_RO) != 0) throw py::error_already_set();
    std::string& c = p.copies.emplace_back(static_cast<std::size_t>(view.len), '\0');
    const int rc = PyBuffer_ToContiguous(c.data(), &view, view.len, 'C');
    PyBuffer_Release(&view);
    if (rc != 0) {
      p.copies.pop_back();
      throw py::error_already_set();
    }
    p.views.emplace_back(c);
  } else {
    throw py::type_error(std::string("a message is bytes or str (or a bytes-like object), not ") +
                         Py_TYPE(obj)->tp_name);
  }
  p.bytes += p.views.back().size();
}

// The producer role, shared by the program's threads. Puts that arrive
// while another is in the store are combined: the next put takes every one
// waiting and makes them one store put (the log's group commit: one
// fdatasync for all of them), in arrival order, then each caller gets its
// own result. A put whose caller gives up while it waits its turn
// (timeout, cancel, Ctrl-C) is withdrawn with nothing more enqueued (an
// earlier, stopped group put may have put some of it: its `done`); one given
// up while in a group put stops that put (the store's cancellation: exactly
// `done` messages enqueued), is told how many of its own went in, and the
// others of the group carry on in the next. An error of the store (closed,
// I/O, Redis) ends every put of the group, each with its own `enqueued`.
class Writer {
 public:
  Writer(std::unique_ptr<QueueWriter> w, std::string name)
      : w_(std::move(w)), name_(std::move(name)), pid_(this_pid()) {
    max_bytes_ = w_->max_message_bytes();
  }
  ~Writer() {
    if (this_pid() != pid_) (void)w_.release();  // the parent's: see the file comment
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // put and put_many: `items` is one message (as_one) or an iterable.
  std::size_t put(const py::object& items, bool as_one, const std::optional<double>& timeout,
                  const Cancel* cancel) {
    check_pid(pid_, "Writer");
    const Call call = call_of(timeout, cancel);
    std::size_t enqueued = 0;
    constexpr std::size_t kBatch = 1024;  // messages per store call
    constexpr std::size_t kBatchBytes = std::size_t{4} << 20;
    Payloads p;
    std::vector<py::object> keep;  // the batch's objects, alive while viewed
    auto flush = [&] {
      std::span<const std::string_view> batch(p.views);
      // A message over the limit: those before it go in, then the error.
      std::size_t ok = 0;
      while (ok < batch.size() && batch[ok].size() <= max_bytes_) ++ok;
      if (ok > 0) enqueued += put_grouped(batch.first(ok), call, enqueued);
      if (ok < batch.size()) {
        py::dict d;
        d["enqueued"] = enqueued;
        d["in_doubt"] = 0;
        raise_status(
            Status(StatusCode::kInvalidArgument,
                   queue_label(name_) + ": message too large: " + std::to_string(batch[ok].size()) +
                       " bytes, limit " + std::to_string(max_bytes_)),
            queue_label(name_), d, registry()["too_large"]);
      }
      p.views.clear();
      p.copies.clear();
      p.bytes = 0;
      keep.clear();
    };
    if (as_one) {
      add_payload(p, items);
      flush();
      return enqueued;
    }
    if (PyBytes_Check(items.ptr()) || PyUnicode_Check(items.ptr())) {
      throw py::type_error("put_many takes an iterable of messages; for one message, use put");
    }
    // An item that is not a message, or an iterable that raises: the
    // messages before it go in (as before one too large), then its error,
    // with `.enqueued` (earlier batches may be in the queue already).
    auto bad_item = [&](py::error_already_set& e) {
      if (!p.views.empty()) flush();  // a store error here carries its own counts
      PyObject* exc = e.value().ptr();
      if (PyObject_SetAttrString(exc, "enqueued", py::int_(enqueued).ptr()) != 0 ||
          PyObject_SetAttrString(exc, "in_doubt", py::int_(0).ptr()) != 0) {
        PyErr_Clear();
      }
      throw std::move(e);
    };
    bool flushing = false;  // flush()'s own errors pass through untouched
    try {
      for (py::handle item : items) {
        keep.push_back(py::reinterpret_borrow<py::object>(item));
        add_payload(p, item);
        if (p.views.size() >= kBatch || p.bytes >= kBatchBytes) {
          flushing = true;
          flush();
          flushing = false;
        }
      }
    } catch (py::error_already_set& e) {
      if (flushing) throw;
      bad_item(e);
    } catch (py::builtin_exception& e) {
      if (flushing) throw;
      e.set_error();
      py::error_already_set err;
      bad_item(err);
    }
    if (!p.views.empty()) flush();
    return enqueued;
  }

  void close_queue() {
    check_pid(pid_, "Writer");  // before the lock: a child may inherit it locked
    auto lock = take(store_mu_);
    QueueWriter& w = live();
    Status s;
    {
      NoGil nogil;
      s = w.close();
    }
    if (!s.ok()) raise_status(s, queue_label(name_));
  }

  void leave() {
    check_pid(pid_, "Writer");
    auto lock = take(store_mu_);
    std::unique_ptr<QueueWriter> w = std::move(w_);
    NoGil nogil;
    w.reset();
  }

  std::size_t max_message_bytes() {
    live();
    return max_bytes_;
  }
  double blocked_seconds() {
    check_pid(pid_, "Writer");
    auto lock = take(store_mu_);
    return live().blocked_seconds();
  }
  bool open() const { return w_ != nullptr; }
  const std::string& name() const { return name_; }

 private:
  // One caller's put, waiting its turn or in a group put. Guarded by mu_.
  struct Request {
    std::span<const std::string_view> msgs;  // what is left of it
    std::size_t done = 0;                    // enqueued
    std::size_t in_doubt = 0;
    bool taken = false;  // in the group put in progress
    bool finished = false;
    bool abandoned = false;  // its caller gave up while taken
    StatusCode gave_up = StatusCode::kOk;
    Status status;
  };

  QueueWriter& live() {
    check_pid(pid_, "Writer");
    if (!w_) {
      PyErr_SetString(base_error().ptr(),
                      ("the writer of " + queue_label(name_) + " has left its role").c_str());
      throw py::error_already_set();
    }
    return *w_;
  }

  static void finish(Request& r, Status s) {
    r.finished = true;
    r.taken = false;
    r.status = std::move(s);
  }

  // Gives up `r` (its caller's deadline, cancel or signal); with mu_ held.
  // Waiting its turn: withdrawn. Taken: the group put is stopped, and r
  // finishes when the leader hands out the results.
  void give_up(Request& r, StatusCode code) {
    if (r.finished) return;
    if (!r.taken) {
      std::erase(queue_, &r);
      finish(r, code);
      return;
    }
    r.abandoned = true;
    r.gave_up = code;
    group_stop_.request_stop();
  }

  // Puts `msgs` in turn (see the class comment); how many went in, else raises.
  std::size_t put_grouped(std::span<const std::string_view> msgs, const Call& call,
                          std::size_t before) {
    Request r;
    r.msgs = msgs;
    {
      auto lk = take(mu_);
      if (busy_ && leader_ == std::this_thread::get_id()) {
        // A signal handler, run between the slices of this thread's group
        // put, putting on the same writer: it would wait for itself.
        lk.unlock();
        PyErr_SetString(base_error().ptr(),
                        ("the writer of " + queue_label(name_) +
                         " is in a put of this thread already (called from a signal handler?)")
                            .c_str());
        throw py::error_already_set();
      }
      queue_.push_back(&r);
    }
    arrive_.notify_one();
    for (;;) {
      bool lead = false;
      {
        auto lk = take(mu_);
        if (!r.finished && busy_) {
          NoGil nogil;
          const Clock::time_point now = Clock::now();
          Clock::time_point until = now + kSlice;
          // Before the deadline, wake at it; after (given up, waiting for
          // the leader to stop), by slices.
          if (call.deadline && *call.deadline > now) until = std::min(until, *call.deadline);
          cv_.wait_until(lk, until, [&] { return r.finished || !busy_; });
        }
        if (r.finished) break;
        if (!busy_) {
          busy_ = true;
          leader_ = std::this_thread::get_id();
          lead = true;
        } else if (call.token.stop_requested()) {
          give_up(r, StatusCode::kCancelled);
        } else if (call.deadline && Clock::now() >= *call.deadline) {
          give_up(r, StatusCode::kDeadlineExceeded);
        }
      }
      if (lead) {
        // Then, its own put done, a few rounds more of the puts that came
        // meanwhile (their callers are waiting already: this batches them
        // more than a hand-over would), each within one slice.
        bool more = lead_group(r, call, before, kHelpRounds > 0);
        for (int round = 1; more; ++round) {
          const Call help{Clock::now() + kSlice, {}};
          more = lead_group(r, help, before, round < kHelpRounds);
        }
        continue;
      }
      if (PyErr_CheckSignals() != 0) {
        py::error_already_set e;
        {
          auto lk = take(mu_);
          give_up(r, StatusCode::kCancelled);
          NoGil nogil;
          cv_.wait(lk, [&] { return r.finished; });
        }
        if (PyObject_SetAttrString(e.value().ptr(), "enqueued", py::int_(before + r.done).ptr()) !=
                0 ||
            PyObject_SetAttrString(e.value().ptr(), "in_doubt", py::int_(0).ptr()) != 0) {
          PyErr_Clear();
        }
        throw e;
      }
    }
    if (!r.status.ok()) raise_put(r, before);
    return r.done;
  }

  [[noreturn]] void raise_put(const Request& r, std::size_t before) {
    Status s = r.status;
    if (s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kCancelled) {
      s = Status(s.code(), queue_label(name_) + ": put " +
                               (s.code() == StatusCode::kCancelled ? "cancelled" : "timed out") +
                               " waiting for room under the bound; " +
                               std::to_string(before + r.done) + " message(s) enqueued");
    }
    py::dict d;
    d["enqueued"] = before + r.done;
    d["in_doubt"] = r.in_doubt;
    raise_status(s, queue_label(name_), d);
  }

  // The leader: one store put of every request waiting (`self` among them),
  // then the results handed out. Called with busy_ set; clears it.
  // Returns true, busy_ still set, to lead another round: `may_help`, its own
  // request done, the put whole, and more waiting.
  bool lead_group(Request& self, const Call& call, std::size_t before, bool may_help) {
    {
      auto lk = take(mu_);
      // Gathering: when the last group was larger than what waits now, the
      // others are on their way back with their next put (woken, taking
      // the GIL): wait for them a little, at most kGather (less than a
      // sync), to share this sync. A single thread never waits here.
      if (last_group_ > queue_.size()) {
        NoGil nogil;
        arrive_.wait_for(lk, kGather, [&] { return queue_.size() >= last_group_; });
      }
      group_.assign(queue_.begin(), queue_.end());
      last_group_ = group_.size();
      if (group_.empty()) {  // a helper round whose requests were all withdrawn
        busy_ = false;
        cv_.notify_all();
        return false;
      }
      queue_.clear();
      for (Request* q : group_) q->taken = true;
      group_stop_ = std::stop_source();
    }
    views_.clear();
    for (Request* q : group_) views_.insert(views_.end(), q->msgs.begin(), q->msgs.end());
    const std::span<const std::string_view> all(views_);
    std::size_t done = 0;
    std::size_t in_doubt = 0;
    Status s;
    std::optional<py::error_already_set> interrupted;
    {
      std::stop_source group;
      {
        auto lk = take(mu_);
        group = group_stop_;
      }
      std::stop_callback own(call.token, [group]() mutable { group.request_stop(); });
      const Call in_group{call.deadline, group.get_token()};
      if (this_pid() != pid_) {
        s = Status(StatusCode::kInternal,
                   "the writer of " + queue_label(name_) + " was opened before a fork");
      } else {
        try {
          s = sliced(in_group, [&](const Context& ctx) {
            // Taken per slice, not for the whole put: close(), leave() and
            // blocked_seconds from another thread (or a signal handler run
            // between slices) get in while a put waits at the bound.
            std::lock_guard lock(store_mu_);
            if (!w_) {
              return Status(StatusCode::kInternal,
                            "the writer of " + queue_label(name_) + " has left its role");
            }
            std::size_t d = 0;
            Status st = w_->put(all.subspan(done), ctx, &d);
            done += d;
            in_doubt = w_->in_doubt();
            return st;
          });
        } catch (py::error_already_set& e) {
          interrupted.emplace(std::move(e));
        }
      }
    }
    const bool stopped = interrupted || call.token.stop_requested() ||
                         (call.deadline && Clock::now() >= *call.deadline);
    const bool soft = interrupted || s.code() == StatusCode::kCancelled ||
                      s.code() == StatusCode::kDeadlineExceeded;
    {
      auto lk = take(mu_);
      std::vector<Request*> again;
      std::size_t left = done;
      std::size_t doubt = in_doubt;  // the messages right after the `done` ones
      for (Request* q : group_) {
        const std::size_t n = std::min(left, q->msgs.size());
        q->done += n;
        q->msgs = q->msgs.subspan(n);
        left -= n;
        q->taken = false;
        const std::size_t d = std::min(doubt, q->msgs.size());  // its share of them
        doubt -= d;
        if (q->msgs.empty()) {
          finish(*q, Status::Ok());
        } else if (!soft || d > 0) {  // in doubt: never put again
          q->in_doubt = d;
          finish(*q, s);
        } else if (q == &self && stopped) {
          // By its own stop: s is kCancelled when another's giving up
          // stopped the put and this one's deadline passed meanwhile.
          finish(*q, interrupted || call.token.stop_requested() ? StatusCode::kCancelled
                                                                : StatusCode::kDeadlineExceeded);
        } else if (q->abandoned) {
          finish(*q, q->gave_up);
        } else {
          again.push_back(q);  // stopped by another's giving up: the next put takes it
        }
      }
      queue_.insert(queue_.begin(), again.begin(), again.end());
      group_.clear();
      const bool again_lead = may_help && !interrupted && s.ok() && self.finished &&
                              self.status.ok() && !queue_.empty();
      busy_ = again_lead;
      cv_.notify_all();
      if (again_lead) return true;
    }
    if (interrupted) {
      py::error_already_set e = std::move(*interrupted);
      if (PyObject_SetAttrString(e.value().ptr(), "enqueued", py::int_(before + self.done).ptr()) !=
              0 ||
          PyObject_SetAttrString(e.value().ptr(), "in_doubt", py::int_(0).ptr()) != 0) {
        PyErr_Clear();
      }
      throw e;
    }
    return false;
  }

  static constexpr int kHelpRounds = 4;
  static constexpr auto kGather = std::chrono::microseconds(200);
  std::mutex store_mu_;             // one call into w_ at a time
  std::mutex mu_;                   // the requests: queue_, busy_, group_stop_, each Request
  std::condition_variable cv_;      // a request finished, or the leader left
  std::condition_variable arrive_;  // a request came (for the gathering leader)
  std::size_t last_group_ = 0;      // the last group's size
  std::deque<Request*> queue_;      // waiting their turn, in arrival order
  bool busy_ = false;               // a leader is putting a group
  std::thread::id leader_;          // which thread (while busy_)
  std::stop_source group_stop_;
  std::vector<Request*> group_;          // the leader's (busy_)
  std::vector<std::string_view> views_;  // the leader's (busy_)
  std::unique_ptr<QueueWriter> w_;
  std::string name_;
  pid_t pid_;
  std::size_t max_bytes_ = 0;
};

class Reader {
 public:
  Reader(std::unique_ptr<QueueReader> r, std::string name, std::string channel,
         std::size_t prefetch)
      : r_(std::move(r)),
        name_(std::move(name)),
        channel_(std::move(channel)),
        channel_py_(py::str(channel_)),
        prefetch_(prefetch),
        pid_(this_pid()) {
    publish();
  }
  ~Reader() {
    if (this_pid() != pid_) (void)r_.release();  // the parent's: see the file comment
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // The next message, or None once the queue is closed and this channel
  // drained. Timeout if `timeout` passes first.
  py::object next(const std::optional<double>& timeout, const Cancel* cancel) {
    const Call call = call_of(timeout, cancel);
    auto lock = enter(call);
    live();
    if (pos_ == buf_.size() && !fill(prefetch_, call, lock)) return py::none();
    return to_python(buf_, pos_++, channel_py_);
  }

  // asyncio's halves of next(): fetch without handing out (false at the
  // end), then hand out what is fetched (None if nothing is).
  bool wait(const Cancel* cancel) {
    const Call call = call_of(std::nullopt, cancel);
    auto lock = enter(call);
    live();
    return pos_ < buf_.size() || fill(prefetch_, call, lock);
  }
  // take_fetched runs in the event loop, so it never waits for the reader:
  // while another thread is in a call on it (another task's wait()), it
  // says None, and the task waits its turn in wait(), in a thread.
  py::object take_fetched() {
    check_enter();
    std::unique_lock<std::timed_mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return py::none();
    const Entered entered(std::move(lock), *this);
    live();
    if (pos_ == buf_.size()) return py::none();
    return to_python(buf_, pos_++, channel_py_);
  }

  // 1..n messages (what is fetched already first, without waiting); [] at
  // the end.
  py::list get_many(std::size_t n, const std::optional<double>& timeout, const Cancel* cancel) {
    if (n == 0) throw py::value_error("get_many: n must be at least 1");
    const Call call = call_of(timeout, cancel);
    auto lock = enter(call);
    live();
    if (pos_ == buf_.size() && !fill(n, call, lock)) return py::list();
    const std::size_t k = std::min(n, buf_.size() - pos_);
    py::list out(k);
    for (std::size_t i = 0; i < k; ++i, ++pos_) {
      PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i),
                      to_python(buf_, pos_, channel_py_).release().ptr());
    }
    return out;
  }

  // Acknowledges every message handed out so far (not those fetched and not
  // yet handed out). Returns how many are acknowledged in all. A get
  // another thread has waiting for messages (an asyncio task's aget) steps
  // aside for it (see fill): an event loop calling ack() is not held up.
  std::uint64_t ack() {
    auto lock = enter_before_get();
    QueueReader& r = live();
    const std::uint64_t n = r.delivered() - (buf_.size() - pos_);
    Status s;
    {
      NoGil nogil;
      s = r.ack_prefix(n);
    }
    if (!s.ok()) raise_status(s, queue_label(name_));
    return r.acked();
  }

  void release() {
    auto lock = enter_before_get();
    QueueReader& r = live();
    Status s;
    {
      NoGil nogil;
      s = r.release();
    }
    buf_.clear();
    pos_ = 0;
    ended_ = false;  // what it gave back comes before the end (kClosed) again
    if (!s.ok()) raise_status(s, queue_label(name_));
  }

  // Also ends a get another thread has waiting for messages (an asyncio
  // task's aget, typically) within one slice: leaving the with block must
  // not wait for a message that may never come (it stalled the event loop).
  // A leave() refused (a signal handler's, inside this thread's own call;
  // a forked child's) must not set leaving_: it would end that get, and
  // every later one, as if the reader had left.
  void leave() {
    check_enter();
    leaving_.store(true);
    auto lock = enter_before_get();
    std::unique_ptr<QueueReader> r = std::move(r_);
    buf_ = MessageBatch();  // its buffers too: a left reader reads no more
    pos_ = 0;
    NoGil nogil;
    r.reset();  // gives back what is held
  }

  // The counters as the last call on the reader left them, read without
  // taking it: a get another thread (an asyncio task's aget) has waiting
  // for a message holds it, and changes none of them until it hands out.
  std::uint64_t delivered() {
    published();
    return delivered_.load();
  }
  std::uint64_t acked() {
    published();
    return acked_.load();
  }
  std::uint64_t skipped_damaged() {
    published();
    return skipped_damaged_.load();
  }
  bool open() const { return r_ != nullptr; }
  bool ended() const { return ended_; }
  const std::string& name() const { return name_; }
  const std::string& channel() const { return channel_; }

 private:
  // Held for one call: mu_, and which thread holds it.
  class Entered {
   public:
    Entered(std::unique_lock<std::timed_mutex> lock, Reader& reader)
        : lock_(std::move(lock)), reader_(reader) {
      reader_.owner_.store(std::this_thread::get_id());
    }
    ~Entered() {
      if (lock_.owns_lock()) reader_.publish();  // not if step_aside could not take it back
      reader_.owner_.store({});
    }
    // fill's get steps aside: the calls waiting in enter_before_get have the
    // reader, then this takes it back as a get waits its turn (which may
    // raise: timeout, cancel, a signal, leave()).
    void step_aside(const Call& call) {
      reader_.publish();
      reader_.owner_.store({});
      lock_.unlock();
      {
        NoGil nogil;
        std::atomic<int>& waiting = reader_.before_get_;
        for (int n = waiting.load(); n > 0; n = waiting.load()) waiting.wait(n);
      }
      lock_ = reader_.lock_for(call);
      reader_.owner_.store(std::this_thread::get_id());
    }
    Entered(const Entered&) = delete;
    Entered& operator=(const Entered&) = delete;

   private:
    std::unique_lock<std::timed_mutex> lock_;
    Reader& reader_;
  };

  // With mu_ held: the counters the properties read.
  void publish() {
    if (!r_) {
      left_.store(true);
      return;
    }
    delivered_.store(r_->delivered() - (buf_.size() - pos_));
    acked_.store(r_->acked());
    skipped_damaged_.store(r_->skipped_damaged());
  }
  void published() {
    check_pid(pid_, "Reader");
    if (left_.load()) live();  // raises: the role is left
  }

  // Takes the reader for one call. The fork check comes first: a child may
  // inherit mu_ locked by a parent thread that was in a get. A call from a
  // signal handler that runs (between slices) inside this thread's own call
  // on the reader gets an error, not a deadlock.
  Entered enter() {
    check_enter();
    return Entered(take(mu_), *this);
  }
  // enter() for a get, whose wait for its turn (while another thread's get
  // waits for messages) ends as its own wait would: by its timeout, its
  // cancel or a signal handler's exception, checked between slices.
  Entered enter(const Call& call) {
    check_enter();
    return Entered(lock_for(call), *this);
  }
  std::unique_lock<std::timed_mutex> lock_for(const Call& call) {
    std::unique_lock<std::timed_mutex> lock(mu_, std::try_to_lock);
    while (!lock.owns_lock()) {
      if (leaving_.load()) raise_left();
      const Clock::time_point now = Clock::now();
      if (call.token.stop_requested()) {
        raise_status(Status(StatusCode::kCancelled, queue_label(name_) + ": get cancelled"),
                     queue_label(name_));
      }
      if (call.deadline && *call.deadline <= now) {
        raise_status(Status(StatusCode::kDeadlineExceeded,
                            queue_label(name_) +
                                ": get timed out waiting for another thread's call on the reader"),
                     queue_label(name_));
      }
      Clock::time_point until = now + kSlice;
      if (call.deadline && *call.deadline < until) until = *call.deadline;
      {
        NoGil nogil;
        (void)lock.try_lock_until(until);
      }
      if (!lock.owns_lock() && PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    return lock;
  }
  // enter() for ack, release and leave: a get another thread has waiting for
  // messages (fetch_stop_) stops its wait and steps aside for them, then
  // goes on (fill), rather than keep them (and an event loop calling them)
  // waiting until a message comes.
  Entered enter_before_get() {
    check_enter();
    before_get_.fetch_add(1);
    struct Done {
      std::atomic<int>& n;
      ~Done() {
        n.fetch_sub(1);
        n.notify_all();
      }
    } done{before_get_};
    {
      std::lock_guard g(fetch_mu_);
      if (fetch_stop_) fetch_stop_->request_stop();
    }
    return Entered(take(mu_), *this);
  }
  [[noreturn]] void raise_left() {
    PyErr_SetString(
        base_error().ptr(),
        ("the reader of " + queue_label(name_) + " left its role while this get waited").c_str());
    throw py::error_already_set();
  }
  void check_enter() {
    check_pid(pid_, "Reader");
    if (owner_.load() == std::this_thread::get_id()) {
      PyErr_SetString(base_error().ptr(),
                      ("the reader of " + queue_label(name_) +
                       " is in a call of this thread already (called from a signal handler?)")
                          .c_str());
      throw py::error_already_set();
    }
  }

  QueueReader& live() {
    check_pid(pid_, "Reader");
    if (!r_) {
      PyErr_SetString(base_error().ptr(),
                      ("the reader of " + queue_label(name_) + " has left its role").c_str());
      throw py::error_already_set();
    }
    return *r_;
  }

  // Fetches up to `max` into the (handed-out) buffer; false at the end.
  // Stepping aside (enter_before_get) between store gets, which return
  // nothing when stopped: what was handed out before is all the reader
  // holds, and the wait goes on with the caller's deadline.
  bool fill(std::size_t max, const Call& call, Entered& entered) {
    if (ended_) return false;
    buf_.clear();
    pos_ = 0;
    Status s;
    for (;;) {
      std::stop_source fetch;
      struct Published {
        Reader& r;
        explicit Published(Reader& reader, const std::stop_source& f) : r(reader) {
          std::lock_guard g(r.fetch_mu_);
          r.fetch_stop_ = f;
        }
        ~Published() {
          std::lock_guard g(r.fetch_mu_);
          r.fetch_stop_.reset();
        }
      };
      {
        const Published published(*this, fetch);
        if (before_get_.load() > 0) fetch.request_stop();
        const std::stop_callback own(call.token, [&fetch] { fetch.request_stop(); });
        s = sliced(Call{call.deadline, fetch.get_token()}, [&](const Context& ctx) {
          if (leaving_.load()) return Status(StatusCode::kCancelled);
          return r_->get_batch(buf_, max, ctx);
        });
      }
      if (s.code() != StatusCode::kCancelled || leaving_.load() || call.token.stop_requested()) {
        break;
      }
      entered.step_aside(call);
      if (leaving_.load() || !r_) raise_left();
      // Another thread's get may have had its turn meanwhile.
      if (pos_ < buf_.size()) return true;
      if (ended_) return false;
      buf_.clear();
      pos_ = 0;
    }
    if (s.code() == StatusCode::kCancelled && leaving_.load()) raise_left();
    if (s.code() == StatusCode::kClosed) {
      ended_ = true;
      return false;
    }
    if (s.code() == StatusCode::kDeadlineExceeded) {
      s = Status(s.code(),
                 queue_label(name_) + ": get timed out: no message on channel '" + channel_ + "'");
    } else if (s.code() == StatusCode::kCancelled) {
      s = Status(s.code(), queue_label(name_) + ": get cancelled");
    }
    if (!s.ok()) raise_status(s, queue_label(name_));
    return true;
  }

  std::atomic<bool> leaving_{false};            // leave() called: a get waiting ends
  std::atomic<int> before_get_{0};              // calls in enter_before_get
  std::mutex fetch_mu_;                         // fetch_stop_
  std::optional<std::stop_source> fetch_stop_;  // stops the store get fill waits in
  std::timed_mutex mu_;                   // timed: a get waits for its turn in slices (enter(call))
  std::atomic<std::thread::id> owner_{};  // the thread holding mu_
  std::atomic<bool> left_{false};         // r_ gone (published)
  std::atomic<std::uint64_t> delivered_{0}, acked_{0}, skipped_damaged_{0};  // published
  std::unique_ptr<QueueReader> r_;
  std::string name_;
  std::string channel_;
  py::object channel_py_;
  std::size_t prefetch_;
  pid_t pid_;
  MessageBatch buf_;  // fetched; buf_[pos_..] not handed out yet
  std::size_t pos_ = 0;
  bool ended_ = false;
};

class Store {
 public:
  Store(const std::string& location, const std::string& durability, const std::string& redis_prefix,
        const std::string& redis_stream_prefix, bool create_if_missing)
      : location_(location), pid_(this_pid()) {
    StoreOptions o;
    if (durability == "sync") {
      o.durability = StoreDurability::kSync;
    } else if (durability == "nosync") {
      o.durability = StoreDurability::kNoSync;
    } else {
      throw py::value_error("durability is 'sync' or 'nosync', not '" + durability + "'");
    }
    o.redis_prefix = redis_prefix;
    o.redis_stream_prefix = redis_stream_prefix;
    o.create_if_missing = create_if_missing;
    Result<std::unique_ptr<QueueStore>> s = Status();
    {
      NoGil nogil;
      s = QueueStore::open(location, o);
    }
    if (!s.ok()) raise_status(s.status(), "store " + location);
    store_ = std::shared_ptr<QueueStore>(std::move(*s));
  }
  ~Store() {
    if (this_pid() != pid_) {  // the parent's: see the file comment
      new std::shared_ptr<QueueStore>(std::move(store_));
    }
  }
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  void create(const std::string& name, std::uint64_t bound, bool stream, double max_age,
              std::uint32_t replicas) {
    QueueSpec spec{.bound = bound, .kind = stream ? QueueKind::kStream : QueueKind::kDefault};
    if (!(max_age >= 0)) throw py::value_error("max_age must be >= 0 seconds");
    spec.max_age =
        std::chrono::ceil<std::chrono::milliseconds>(std::chrono::duration<double>(max_age));
    spec.replicas = replicas;
    check(blocking([&] { return live().create(name, spec); }), name);
  }

  void remove(const std::string& name) {
    check(blocking([&] { return live().remove(name); }), name);
  }

  void close(const std::string& name, const std::optional<double>& timeout, const Cancel* cancel) {
    QueueStore& s = live();
    check(sliced(call_of(timeout, cancel), [&](const Context& ctx) { return s.close(name, ctx); }),
          name);
  }

  std::vector<std::string> ls() {
    Result<std::vector<std::string>> r = Status();
    {
      QueueStore& s = live();
      NoGil nogil;
      r = s.list();
    }
    if (!r.ok()) raise_status(r.status(), "store " + location_);
    return std::move(*r);
  }

  py::object stat(const std::string& name) {
    Result<QueueInfo> r = Status();
    {
      QueueStore& s = live();
      NoGil nogil;
      r = s.stat(name);
    }
    if (!r.ok()) raise_status(r.status(), queue_label(name));
    const QueueInfo& i = *r;
    auto opt = [](const std::optional<std::uint64_t>& v) {
      return v ? py::object(py::int_(*v)) : py::object(py::none());
    };
    py::list chans;
    py::object channel_info = registry()["ChannelInfo"];
    for (const ChannelInfo& c : i.channel_info) {
      chans.append(channel_info(c.name, c.lag, c.pending, c.dead_lettered, c.purged));
    }
    const auto ms = i.max_age.count();
    py::object max_age = ms % 1000 == 0 ? py::object(py::int_(ms / 1000))
                                        : py::object(py::float_(static_cast<double>(ms) / 1000.0));
    return registry()["QueueInfo"](
        py::arg("name") = i.name, py::arg("bound") = i.bound, py::arg("closed") = i.closed,
        py::arg("length") = i.length, py::arg("waiting") = opt(i.waiting),
        py::arg("in_flight") = opt(i.in_flight), py::arg("produced") = i.produced,
        py::arg("consumed") = i.consumed, py::arg("produced_bytes") = opt(i.produced_bytes),
        py::arg("consumed_bytes") = opt(i.consumed_bytes), py::arg("channels") = i.channels,
        py::arg("kind") = i.kind, py::arg("max_age") = max_age, py::arg("replicas") = i.replicas,
        py::arg("channel_info") = chans);
  }

  std::unique_ptr<Writer> writer(const std::string& name, const std::optional<double>& timeout,
                                 const Cancel* cancel) {
    QueueStore& s = live();
    std::unique_ptr<QueueWriter> w;
    check(sliced(call_of(timeout, cancel),
                 [&](const Context& ctx) {
                   auto r = s.writer(name, ctx);
                   if (!r.ok()) return r.status();
                   w = std::move(*r);
                   return Status::Ok();
                 }),
          name);
    return std::make_unique<Writer>(std::move(w), name);
  }

  std::unique_ptr<Reader> reader(const std::string& name, const std::string& channel,
                                 const std::optional<double>& timeout, const Cancel* cancel,
                                 double visibility, std::size_t prefetch) {
    if (prefetch == 0) throw py::value_error("prefetch must be at least 1");
    QueueStore& s = live();
    ReaderOptions o;
    o.visibility =
        std::chrono::ceil<std::chrono::milliseconds>(std::chrono::duration<double>(visibility));
    std::unique_ptr<QueueReader> r;
    check(sliced(call_of(timeout, cancel),
                 [&](const Context& ctx) {
                   auto got = s.reader(name, channel, ctx, o);
                   if (!got.ok()) return got.status();
                   r = std::move(*got);
                   return Status::Ok();
                 }),
          name);
    return std::make_unique<Reader>(std::move(r), name, channel, prefetch);
  }

  py::list peek(const std::string& name, const std::string& channel, std::size_t max,
                const std::optional<std::uint64_t>& seq, const std::string& after_id) {
    QueueStore& s = live();
    PeekFrom from;
    from.seq = seq;
    from.after_id = after_id;
    std::vector<StoreMessage> got;
    Status st = blocking([&] {
      auto p = s.peek(name, channel, from);
      if (!p.ok()) return p.status();
      while (got.size() < max) {
        const std::size_t before = got.size();
        if (Status n = (*p)->next(got, max - got.size()); !n.ok()) return n;
        if (got.size() == before) break;
      }
      return Status::Ok();
    });
    check(st, name);
    py::list out;
    py::object ch = py::str(channel);
    for (StoreMessage& m : got) out.append((to_python(m, ch)));
    return out;
  }

  py::object seek(const std::string& name, const std::string& channel, const py::object& to,
                  const std::optional<double>& timeout, const Cancel* cancel) {
    SeekTarget t;
    if (py::isinstance<py::str>(to)) {
      const auto v = to.cast<std::string>();
      if (v == "start") {
        t.kind = SeekTarget::Kind::kStart;
      } else if (v == "end") {
        t.kind = SeekTarget::Kind::kEnd;
      } else {
        t.kind = SeekTarget::Kind::kId;
        t.id = v;
      }
    } else if (py::isinstance<py::int_>(to) && !py::isinstance<py::bool_>(to)) {
      t.kind = SeekTarget::Kind::kSeq;
      t.seq = to.cast<std::uint64_t>();
    } else if (py::hasattr(to, "timestamp")) {  // datetime
      t.kind = SeekTarget::Kind::kTime;
      const double secs = to.attr("timestamp")().cast<double>();
      t.time = std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::duration<double>(secs)));
    } else {
      throw py::type_error("seek to 'start', 'end', a seq (int), a Streams id (str) or a datetime");
    }
    QueueStore& s = live();
    SeekResult res;
    check(sliced(call_of(timeout, cancel),
                 [&](const Context& ctx) {
                   auto r = s.seek(name, channel, t, ctx);
                   if (!r.ok()) return r.status();
                   res = std::move(*r);
                   return Status::Ok();
                 }),
          name);
    return registry()["SeekResult"](res.position, res.clamped, res.unacknowledged_before,
                                    res.unacknowledged);
  }

  std::uint64_t purge(const std::string& name, const std::string& channel,
                      const std::optional<double>& timeout, const Cancel* cancel) {
    QueueStore& s = live();
    std::uint64_t n = 0;
    check(sliced(call_of(timeout, cancel),
                 [&](const Context& ctx) {
                   auto r = s.purge(name, channel, ctx);
                   if (!r.ok()) return r.status();
                   n = *r;
                   return Status::Ok();
                 }),
          name);
    return n;
  }

  const std::string& location() const { return location_; }

 private:
  QueueStore& live() {
    check_pid(pid_, "Store");
    return *store_;
  }
  template <class F>
  Status blocking(F&& f) {
    live();
    NoGil nogil;
    return f();
  }
  static void check(const Status& s, const std::string& name) {
    if (!s.ok()) raise_status(s, queue_label(name));
  }

  std::string location_;
  pid_t pid_;
  std::shared_ptr<QueueStore> store_;
};

}  // namespace
}  // namespace sluice::python

PYBIND11_MODULE(_sluice, m) {
  using namespace sluice::python;
  using sluice::StatusCode;
  m.doc() = "The sluice store's C++ binding (use the `sluice` package, not this module).";
  process_id();
  pthread_atfork(nullptr, nullptr, [] {
    process_id().store(getpid(), std::memory_order_relaxed);
    // The threads counted on their way back to the GIL are the parent's:
    // the child's exit would wait for them for ever.
    g_restoring.store(0);
  });
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    g_exit_thread.store(pthread_self());
    g_exiting.store(true);
    // A thread that looked before the store is waiting for the GIL: let it
    // have it (it parks at its next look), before finalizing begins.
    while (g_restoring.load() > 0) {
      Py_BEGIN_ALLOW_THREADS std::this_thread::sleep_for(std::chrono::microseconds(200));
      Py_END_ALLOW_THREADS
    }
  }));

  m.def(
      "_setup", [](const py::dict& d) { registry() = d; },
      "Registers the exception classes and dataclasses (sluice/__init__.py).");

  py::class_<Cancel>(m, "Cancel",
                     "A cancel handle: pass it as cancel= to blocking calls; "
                     "cancel() ends them (from any thread) with sluice.Cancelled.")
      .def(py::init<>())
      .def(
          "cancel", [](Cancel& c) { c.source.request_stop(); },
          "Ends every call given this handle, now and later.")
      .def_property_readonly("cancelled",
                             [](const Cancel& c) { return c.source.stop_requested(); });

  g_message_type = make_message_type();
  m.add_object("Message",
               py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(g_message_type)));

  py::class_<Writer>(m, "Writer")
      .def(
          "put",
          [](Writer& w, const py::object& msg, std::optional<double> timeout,
             const Cancel* cancel) { w.put(msg, true, timeout, cancel); },
          py::arg("message"), py::kw_only(), py::arg("timeout") = py::none(),
          py::arg("cancel") = py::none(),
          "Enqueues one message (bytes, str or bytes-like), waiting while the queue is at its "
          "bound.")
      .def(
          "put_many",
          [](Writer& w, const py::object& msgs, std::optional<double> timeout,
             const Cancel* cancel) { return w.put(msgs, false, timeout, cancel); },
          py::arg("messages"), py::kw_only(), py::arg("timeout") = py::none(),
          py::arg("cancel") = py::none(),
          "Enqueues the messages in order; returns how many. A failed put's exception has "
          ".enqueued and .in_doubt.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](Writer& w, const py::args&) {
             if (w.open()) w.leave();
           })
      .def("close", &Writer::close_queue,
           "Closes the queue (end of stream): later puts raise QueueClosed.")
      .def("leave", &Writer::leave, "Gives up the writer role (what leaving the with block does).")
      .def_property_readonly("max_message_bytes", &Writer::max_message_bytes)
      .def_property_readonly("blocked_seconds", &Writer::blocked_seconds)
      .def_property_readonly("open", &Writer::open)
      .def_property_readonly("name", &Writer::name);

  py::class_<Reader>(m, "Reader")
      .def("get", &Reader::next, py::kw_only(), py::arg("timeout") = py::none(),
           py::arg("cancel") = py::none(),
           "The next message; None once the queue is closed and drained; Timeout if timeout= "
           "passes first.")
      .def("get_many", &Reader::get_many, py::arg("n"), py::kw_only(),
           py::arg("timeout") = py::none(), py::arg("cancel") = py::none(),
           "1..n messages (those fetched already first, without waiting); [] once the queue is "
           "closed and drained.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](Reader& r, const py::args&) {
             if (r.open()) r.leave();
           })
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](Reader& r) {
             py::object msg = r.next(std::nullopt, nullptr);
             if (msg.is_none()) throw py::stop_iteration();
             return msg;
           })
      .def("_wait", &Reader::wait, py::arg("cancel") = py::none())
      .def("_take", &Reader::take_fetched)
      .def("ack", &Reader::ack,
           "Acknowledges every message handed out so far (not those fetched ahead); returns how "
           "many are acknowledged in all.")
      .def("release", &Reader::release,
           "Gives back the handed-out, unacknowledged messages: delivered again, first.")
      .def("leave", &Reader::leave,
           "Gives up the channel, giving back what is held (what leaving the with block does).")
      .def_property_readonly("delivered", &Reader::delivered)
      .def_property_readonly("acked", &Reader::acked)
      .def_property_readonly(
          "skipped_damaged", &Reader::skipped_damaged,
          "Messages passed over since the reader opened because they were damaged on disk: "
          "lost, never delivered (`sluice log verify` says where). 0 on Redis.")
      .def_property_readonly("open", &Reader::open)
      .def_property_readonly("ended", &Reader::ended)
      .def_property_readonly("name", &Reader::name)
      .def_property_readonly("channel", &Reader::channel);

  py::class_<Store>(m, "Store")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&,
                    bool>(),
           py::arg("location"), py::kw_only(), py::arg("durability") = "sync",
           py::arg("redis_prefix") = "", py::arg("redis_stream_prefix") = "",
           py::arg("create_if_missing") = true)
      .def("create", &Store::create, py::arg("name"), py::kw_only(), py::arg("bound") = 1000,
           py::arg("stream") = false, py::arg("max_age") = 0.0, py::arg("replicas") = 0,
           "Makes an empty queue: bound (0: unbounded), stream (Redis Streams), max_age (seconds), "
           "replicas (Streams).")
      .def("delete", &Store::remove, py::arg("name"),
           "Deletes the queue and its messages (RoleHeld while the embedded store has it open).")
      .def("close", &Store::close, py::arg("name"), py::kw_only(), py::arg("timeout") = py::none(),
           py::arg("cancel") = py::none(),
           "Closes the queue: no more puts; readers end once drained. Idempotent.")
      .def("ls", &Store::ls, "Queue names, sorted.")
      .def("stat", &Store::stat, py::arg("name"),
           "A QueueInfo: the fields of `sluice stat --json`.")
      .def("writer", &Store::writer, py::arg("name"), py::kw_only(),
           py::arg("timeout") = py::none(), py::arg("cancel") = py::none(),
           "The producer role of the queue (a context manager), waiting while another holds it.")
      .def("reader", &Store::reader, py::arg("name"), py::arg("channel") = "default", py::kw_only(),
           py::arg("timeout") = py::none(), py::arg("cancel") = py::none(),
           py::arg("visibility") = 0.0, py::arg("prefetch") = 100,
           "A consumer of the channel (a context manager and iterator), waiting while another "
           "reader holds it.")
      .def("peek", &Store::peek, py::arg("name"), py::arg("channel") = "default", py::kw_only(),
           py::arg("max") = 1000, py::arg("seq") = py::none(), py::arg("after_id") = "",
           "Up to max messages of the channel, without taking them.")
      .def("seek", &Store::seek, py::arg("name"), py::arg("channel"), py::arg("to"), py::kw_only(),
           py::arg("timeout") = py::none(), py::arg("cancel") = py::none(),
           "Moves the channel to 'start', 'end', a seq, a Streams id or a datetime; a SeekResult.")
      .def("purge", &Store::purge, py::arg("name"), py::arg("channel") = "default", py::kw_only(),
           py::arg("timeout") = py::none(), py::arg("cancel") = py::none(),
           "Drops every message the channel has not acknowledged; how many.")
      .def_property_readonly("location", &Store::location);
}
