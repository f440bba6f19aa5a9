// The C API (include/offload_lock/offload_lock.h) over the C++ one.
#include "offload_lock/offload_lock.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "c_api_lease.hpp"
#include "offload_lock/describe.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/path.hpp"

namespace {

// What a handle's on_lost and on_yield reach. The library may call them on
// its heartbeat thread at the same moment the handle is released; the
// mutex lets release wait for a call in progress and switch the relay off,
// so no call starts after offload_lock_release() returns. Recursive,
// because on_lost may itself release its handle.
struct callback_relay {
  std::recursive_mutex mu;
  offload_lock_lost_fn lost = nullptr;
  void* lost_user = nullptr;
  offload_lock_yield_fn yield = nullptr;
  void* yield_user = nullptr;
  bool active = true;
};

}  // namespace

struct offload_lock_handle {
  offload_lock::lock held;
  std::string path;  // the directory held, also for a lock passed down by the parent
  std::shared_ptr<callback_relay> relay;
};

namespace {

namespace ol = offload_lock;

// The errno behind this thread's last OFFLOAD_LOCK_ERROR (0: none).
thread_local int g_last_errno = 0;

void copy_out(char* dst, std::size_t cap, const std::string& src) {
  if (!dst || cap == 0) return;
  std::size_t n = std::min(cap - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

std::string path_or_default(const char* path) {
  return path && *path ? std::string(path) : ol::resolve_path().path;
}

// "timed out: PATH is held by LABEL (pid N, host H) for 5m12s": whom the
// caller lost to, as the command says it.
std::string contention_message(const ol::error& e, const ol::lock_options& o) {
  const std::string how = e == ol::errc::busy ? "busy: " : "timed out: ";
  if (o.gpus > 1 && o.gpu < 0)
    return how + "all " + std::to_string(o.gpus) + " GPU slots of " + o.path + " are held";
  const std::string p = ol::gpu_slot_path(o.path, std::max(0, o.gpu));
  return how + p + " is " + ol::describe_state(ol::inspect(p, o.ttl));
}

void fill(offload_lock_info_ex& out, const ol::info& i) {
  std::memset(&out, 0, sizeof out);
  copy_out(out.path, sizeof out.path, i.path);
  out.present = i.present;
  out.held = i.held;
  out.has_pid = i.pid.has_value();
  out.pid = i.pid.value_or(0);
  out.has_started_at = i.started_at.has_value();
  out.started_at_ms = i.started_at.value_or(0);
  out.held_for_ms = i.held_for.count();
  out.age_ms = i.age.count();
  out.owner_uid = i.owner_uid ? static_cast<int64_t>(*i.owner_uid) : -1;
  out.has_stale = i.stale_reason.has_value();
  out.node_stale = i.node_stale;
  out.go_held = i.go_held;
  copy_out(out.label, sizeof out.label, i.label);
  copy_out(out.host, sizeof out.host, i.host);
  copy_out(out.token, sizeof out.token, i.token);
  copy_out(out.tool, sizeof out.tool, i.tool);
  copy_out(out.stale, sizeof out.stale, i.stale_reason.value_or(""));
  copy_out(out.problem, sizeof out.problem, i.problem);
  out.other_pid_namespace = i.other_pid_namespace;
  out.has_v1_stale = i.held && i.v1_stale_reason.has_value();
  copy_out(out.v1_stale, sizeof out.v1_stale, i.v1_stale_reason.value_or(""));
}

offload_lock_queue_info queue_info_of(const ol::info& i) {
  offload_lock_queue_info q;
  std::memset(&q, 0, sizeof q);
  q.size = sizeof q;
  q.priority = i.held ? i.priority : 0;
  q.expect_ms = i.held ? i.expected.count() : 0;
  q.free_in_ms = i.held && i.expected_free_in ? i.expected_free_in->count() : -1;
  q.can_yield = i.held && i.can_yield;
  if (i.held && i.yield_requested) {
    q.has_yield_request = 1;
    q.yield_pid = i.yield_requested->pid;
    q.yield_priority = i.yield_requested->priority;
    copy_out(q.yield_label, sizeof q.yield_label, i.yield_requested->label);
  }
  if (i.held && i.max_hold.count() > 0 && i.max_hold_in) {
    q.max_hold_ms = i.max_hold.count();
    q.max_hold_in_ms = i.max_hold_in->count();
  }
  if (i.held && i.idle_since) {
    q.idle_since_ms = *i.idle_since;
    q.idle_for_ms = i.idle_for ? i.idle_for->count() : 0;
  }
  q.fence = i.held ? i.fence : 0;
  return q;
}

int acquire(ol::lock_options o, std::shared_ptr<callback_relay> relay, offload_lock_handle** out, char* message,
            size_t message_len) {
  if (o.path.empty()) o.path = ol::resolve_path().path;
  if (relay && relay->lost)
    o.on_lost = [relay](const ol::error& e) {
      std::lock_guard<std::recursive_mutex> g(relay->mu);
      if (relay->active) relay->lost(e.message().c_str(), relay->lost_user);
    };
  if (relay && relay->yield)
    o.on_yield_request = [relay](const ol::yield_request& y) {
      std::lock_guard<std::recursive_mutex> g(relay->mu);
      if (!relay->active) return;
      const offload_lock_yield_request r{y.pid, y.label.c_str(), y.priority};
      relay->yield(&r, relay->yield_user);
    };
  auto l = ol::lock::acquire(o);
  g_last_errno = 0;
  if (!l) {
    const auto& e = l.error();
    if (e.is_system()) g_last_errno = e.code().value();
    if (e == ol::errc::busy || e == ol::errc::timed_out) {
      copy_out(message, message_len, contention_message(e, o));
      return e == ol::errc::busy ? OFFLOAD_LOCK_BUSY : OFFLOAD_LOCK_TIMED_OUT;
    }
    copy_out(message, message_len, e.message());
    if (e == ol::errc::cancelled) return OFFLOAD_LOCK_CANCELLED;
    if (e == ol::errc::bad_input) return OFFLOAD_LOCK_INVALID;
    return OFFLOAD_LOCK_ERROR;
  }
  std::string held_path = l->path().empty() ? ol::gpu_slot_path(o.path, l->gpu()) : l->path();
  // cppcheck-suppress ignoredReturnValue ; the moved value initializes the handle
  *out = new offload_lock_handle{std::move(*l), std::move(held_path), std::move(relay)};
  return OFFLOAD_LOCK_OK;
}

}  // namespace

extern "C" int offload_lock_acquire(const char* path, int64_t wait_ms, const char* label, offload_lock_handle** out,
                                    char* message, size_t message_len) {
  if (!out) {
    copy_out(message, message_len, "offload_lock_acquire: out is NULL");
    return OFFLOAD_LOCK_INVALID;
  }
  *out = nullptr;
  try {
    ol::lock_options o;
    o.path = path_or_default(path);
    o.wait = wait_ms < 0 ? ol::wait_forever : ol::milliseconds(wait_ms);
    if (label) o.label = label;
    return acquire(std::move(o), nullptr, out, message, message_len);
  } catch (const std::exception& ex) {
    copy_out(message, message_len, ex.what());
    return OFFLOAD_LOCK_ERROR;
  }
}

extern "C" void offload_lock_options_init_sized(offload_lock_options* o, size_t size) {
  // Never fewer than 0.2's fields (every caller has those), never more than
  // this header's.
  const size_t v02 = offsetof(offload_lock_options, priority);
  if (!o || size < v02) return;
  size = std::min(size, sizeof *o);
  std::memset(o, 0, size);
  o->size = size;
  o->wait_ms = -1;
  o->gpus = 1;
  o->gpu = -1;
  o->cancel_fd = -1;
}

#undef offload_lock_options_init
extern "C" void offload_lock_options_init(offload_lock_options* o) {
  offload_lock_options_init_sized(o, offsetof(offload_lock_options, priority));
}

// Whether a caller's offload_lock_options (of options->size bytes) has
// `field`: fields added after 0.2 are read only then.
#define OFFLOAD_LOCK_HAS_FIELD(options, field)                                   \
  ((options)->size >= offsetof(offload_lock_options, field) + sizeof((options)->field))

extern "C" int offload_lock_acquire_ex(const offload_lock_options* options, offload_lock_handle** out,
                                       char* message, size_t message_len) {
  // 0.2's options end with lost_user; a program built against that header
  // passes that size and keeps working.
  if (!out || !options || !OFFLOAD_LOCK_HAS_FIELD(options, lost_user)) {
    copy_out(message, message_len,
             !out ? "offload_lock_acquire_ex: out is NULL"
                  : "offload_lock_acquire_ex: options not set up by offload_lock_options_init");
    return OFFLOAD_LOCK_INVALID;
  }
  *out = nullptr;
  const offload_lock_options& c = *options;
  if (c.ttl_ms < 0 || c.progress_every_ms < 0) {
    copy_out(message, message_len, "offload_lock_acquire_ex: negative ttl_ms or progress_every_ms");
    return OFFLOAD_LOCK_INVALID;
  }
  const int priority = OFFLOAD_LOCK_HAS_FIELD(options, priority) ? c.priority : 0;
  const int64_t expect_ms = OFFLOAD_LOCK_HAS_FIELD(options, expect_ms) ? c.expect_ms : 0;
  const offload_lock_yield_fn on_yield = OFFLOAD_LOCK_HAS_FIELD(options, on_yield) ? c.on_yield : nullptr;
  void* const yield_user = OFFLOAD_LOCK_HAS_FIELD(options, yield_user) ? c.yield_user : nullptr;
  const int* const allowed = OFFLOAD_LOCK_HAS_FIELD(options, allowed_gpu_count) ? c.allowed_gpus : nullptr;
  const size_t allowed_count = allowed ? c.allowed_gpu_count : 0;
  const int64_t max_hold_ms = OFFLOAD_LOCK_HAS_FIELD(options, max_hold_ms) ? c.max_hold_ms : 0;
  const char* const lease_class = OFFLOAD_LOCK_HAS_FIELD(options, lease_class) ? c.lease_class : nullptr;
  try {
    if (priority < -100 || priority > 100) {
      copy_out(message, message_len,
               "offload_lock_acquire_ex: priority " + std::to_string(priority) + " (-100 to 100)");
      return OFFLOAD_LOCK_INVALID;
    }
    if (expect_ms < 0) {
      copy_out(message, message_len, "offload_lock_acquire_ex: negative expect_ms");
      return OFFLOAD_LOCK_INVALID;
    }
    if (max_hold_ms < 0) {
      copy_out(message, message_len, "offload_lock_acquire_ex: negative max_hold_ms");
      return OFFLOAD_LOCK_INVALID;
    }
    const std::string cls = lease_class ? lease_class : "";
    if (!cls.empty() && cls != "media" && cls != "text") {
      copy_out(message, message_len, "offload_lock_acquire_ex: lease_class '" + cls + "' (media or text)");
      return OFFLOAD_LOCK_INVALID;
    }
    ol::lock_options o;
    o.path = path_or_default(c.path);
    o.wait = c.wait_ms < 0 ? ol::wait_forever : ol::milliseconds(c.wait_ms);
    if (c.label) o.label = c.label;
    if (c.ttl_ms > 0) o.ttl = ol::milliseconds(c.ttl_ms);
    o.gpus = c.gpus;
    o.gpu = c.gpu;
    if (allowed_count > static_cast<size_t>(ol::max_gpus)) {
      copy_out(message, message_len, "offload_lock_acquire_ex: allowed_gpu_count over " + std::to_string(ol::max_gpus));
      return OFFLOAD_LOCK_INVALID;
    }
    o.allowed_gpus.assign(allowed, allowed + allowed_count);
    if (c.cancel_fd >= 0) o.cancel_fds.push_back(c.cancel_fd);
    o.inherit = !(c.flags & OFFLOAD_LOCK_NO_INHERIT);
    o.register_waiter = !(c.flags & OFFLOAD_LOCK_NO_REGISTER);
    o.priority = priority;
    o.expected = ol::milliseconds(expect_ms);
    o.max_hold = ol::milliseconds(max_hold_ms);
    o.lease_class = cls;
    if (c.on_progress) {
      o.progress_every = ol::milliseconds(c.progress_every_ms);
      offload_lock_progress_fn fn = c.on_progress;
      void* user = c.progress_user;
      o.on_progress = [fn, user](const ol::wait_progress& p) {
        std::vector<offload_lock_info_ex> hs(p.holders.size());
        for (std::size_t k = 0; k < hs.size(); ++k) fill(hs[k], p.holders[k]);
        offload_lock_lease_info lease{};
        if (p.lease) ol::detail::fill_c_lease(lease, *p.lease);
        offload_lock_progress cp{p.waited.count(), p.changed ? 1 : 0, hs.size(), hs.data(), p.position,
                                 p.lease ? &lease : nullptr};
        fn(&cp, user);
      };
    }
    std::shared_ptr<callback_relay> relay;
    if (c.on_lost || on_yield) {
      relay = std::make_shared<callback_relay>();
      relay->lost = c.on_lost;
      relay->lost_user = c.lost_user;
      relay->yield = on_yield;
      relay->yield_user = yield_user;
    }
    return acquire(std::move(o), std::move(relay), out, message, message_len);
  } catch (const std::exception& ex) {
    copy_out(message, message_len, ex.what());
    return OFFLOAD_LOCK_ERROR;
  }
}

extern "C" int offload_lock_release(offload_lock_handle* handle) {
  if (!handle) return OFFLOAD_LOCK_INVALID;
  if (handle->relay) {
    std::lock_guard<std::recursive_mutex> g(handle->relay->mu);
    handle->relay->active = false;
  }
  ol::error e = handle->held.release();
  delete handle;
  if (!e) return OFFLOAD_LOCK_OK;
  return e == ol::errc::lost ? OFFLOAD_LOCK_LOST : OFFLOAD_LOCK_ERROR;
}

extern "C" const char* offload_lock_token(const offload_lock_handle* handle) {
  return handle ? handle->held.token().c_str() : "";
}

extern "C" const char* offload_lock_path(const offload_lock_handle* handle) {
  return handle ? handle->path.c_str() : "";
}

extern "C" int offload_lock_gpu(const offload_lock_handle* handle) { return handle ? handle->held.gpu() : 0; }
extern "C" int offload_lock_nested(const offload_lock_handle* handle) { return handle && handle->held.nested(); }
extern "C" int offload_lock_inherited(const offload_lock_handle* handle) {
  return handle && handle->held.inherited();
}

extern "C" int offload_lock_still_held(const offload_lock_handle* handle) {
  try {
    return handle && handle->held.still_held();
  } catch (const std::exception&) {
    return 0;
  }
}

extern "C" uint64_t offload_lock_fence(const offload_lock_handle* handle) {
  return handle ? handle->held.fence() : 0;
}

extern "C" int offload_lock_yield_requested(const offload_lock_handle* handle) {
  return handle && handle->held.yield_requested();
}

extern "C" int offload_lock_max_hold_passed(const offload_lock_handle* handle) {
  return handle && handle->held.max_hold_passed();
}

extern "C" size_t offload_lock_child_environment(const offload_lock_handle* handle, char* buf, size_t len) {
  if (!handle) return 0;
  std::string block;
  for (const auto& [name, value] : handle->held.child_environment()) {
    block += name + "=" + value;
    block.push_back('\0');
  }
  // Each entry already ends with its NUL; the block is copied as it is.
  if (buf && len >= block.size()) std::copy(block.begin(), block.end(), buf);
  return block.size();
}

extern "C" size_t offload_lock_default_path(char* buf, size_t len) {
  std::string p = ol::resolve_path().path;
  if (buf && len > p.size()) copy_out(buf, len, p);
  return p.size();
}

extern "C" int offload_lock_inspect(const char* path, offload_lock_info* info) {
  if (!info) return OFFLOAD_LOCK_INVALID;
  std::memset(info, 0, sizeof *info);
  try {
    ol::info i = ol::inspect(path_or_default(path));
    if (!i.problem.empty()) {
      copy_out(info->stale, sizeof info->stale, i.problem);
      return OFFLOAD_LOCK_ERROR;
    }
    info->present = i.present;
    info->held = i.held;
    info->pid = i.pid.value_or(0);
    info->started_at_ms = i.started_at.value_or(0);
    info->held_for_ms = i.held ? i.held_for.count() : 0;
    copy_out(info->label, sizeof info->label, i.label);
    copy_out(info->host, sizeof info->host, i.host);
    copy_out(info->token, sizeof info->token, i.token);
    copy_out(info->stale, sizeof info->stale, i.stale_reason.value_or(""));
    return OFFLOAD_LOCK_OK;
  } catch (const std::exception& ex) {
    copy_out(info->stale, sizeof info->stale, ex.what());
    return OFFLOAD_LOCK_ERROR;
  }
}

extern "C" int offload_lock_inspect_ex(const char* path, int64_t ttl_ms, offload_lock_info_ex* info) {
  if (!info) return OFFLOAD_LOCK_INVALID;
  try {
    const std::string p = path_or_default(path);
    ol::info i = ol::inspect(p, ttl_ms > 0 ? ol::milliseconds(ttl_ms) : ol::default_ttl);
    fill(*info, i);
    return i.problem.empty() ? OFFLOAD_LOCK_OK : OFFLOAD_LOCK_ERROR;
  } catch (const std::exception& ex) {
    std::memset(info, 0, sizeof *info);
    copy_out(info->problem, sizeof info->problem, ex.what());
    return OFFLOAD_LOCK_ERROR;
  }
}

extern "C" int offload_lock_waiters(const char* path, offload_lock_waiter* out, size_t cap, size_t* count) {
  if (!count) return OFFLOAD_LOCK_INVALID;
  *count = 0;
  try {
    auto ws = ol::waiters(path_or_default(path));
    *count = ws.size();
    for (std::size_t k = 0; out && k < ws.size() && k < cap; ++k) {
      offload_lock_waiter& w = out[k];
      std::memset(&w, 0, sizeof w);
      w.pid = ws[k].pid;
      w.since_ms = ws[k].since;
      w.waited_ms = ws[k].waited.count();
      w.gpu = ws[k].gpu;
      w.gpus = ws[k].gpus;
      copy_out(w.label, sizeof w.label, ws[k].label);
      copy_out(w.host, sizeof w.host, ws[k].host);
    }
    return OFFLOAD_LOCK_OK;
  } catch (const std::exception&) {
    return OFFLOAD_LOCK_ERROR;
  }
}

extern "C" int offload_lock_inspect_queue(const char* path, int64_t ttl_ms, offload_lock_info_ex* info,
                                          offload_lock_queue_info* queue) {
  if (!queue || queue->size < sizeof(offload_lock_queue_info)) return OFFLOAD_LOCK_INVALID;
  const std::size_t size = queue->size;
  try {
    const std::string p = path_or_default(path);
    ol::info i = ol::inspect(p, ttl_ms > 0 ? ol::milliseconds(ttl_ms) : ol::default_ttl);
    if (info) fill(*info, i);
    // Only the fields this version knows; a later caller's larger struct
    // keeps its size and zeros beyond.
    const offload_lock_queue_info q = queue_info_of(i);
    std::memset(reinterpret_cast<char*>(queue) + sizeof q, 0, size - sizeof q);
    std::memcpy(queue, &q, sizeof q);
    queue->size = size;
    return i.problem.empty() ? OFFLOAD_LOCK_OK : OFFLOAD_LOCK_ERROR;
  } catch (const std::exception& ex) {
    if (info) {
      std::memset(info, 0, sizeof *info);
      copy_out(info->problem, sizeof info->problem, ex.what());
    }
    return OFFLOAD_LOCK_ERROR;
  }
}

extern "C" int offload_lock_waiters_ex(const char* path, offload_lock_waiter_ex* out, size_t entry_size, size_t cap,
                                       size_t* count) {
  if (!count) return OFFLOAD_LOCK_INVALID;
  *count = 0;
  if (out && cap > 0 && entry_size < sizeof(offload_lock_waiter_ex)) return OFFLOAD_LOCK_INVALID;
  try {
    const std::string base = path_or_default(path);
    auto ws = ol::waiters(base);
    *count = ws.size();
    for (std::size_t k = 0; out && k < ws.size() && k < cap; ++k) {
      auto* w = reinterpret_cast<offload_lock_waiter_ex*>(reinterpret_cast<char*>(out) + k * entry_size);
      std::memset(w, 0, entry_size);
      const ol::waiter& src = ws[k];
      w->waiter.pid = src.pid;
      w->waiter.since_ms = src.since;
      w->waiter.waited_ms = src.waited.count();
      w->waiter.gpu = src.gpu;
      w->waiter.gpus = src.gpus;
      copy_out(w->waiter.label, sizeof w->waiter.label, src.label);
      copy_out(w->waiter.host, sizeof w->waiter.host, src.host);
      w->priority = src.priority;
      w->expect_ms = src.expected.count();
      w->position = src.position;
      w->eta_ms = src.eta ? src.eta->count() : -1;
    }
    return OFFLOAD_LOCK_OK;
  } catch (const std::exception&) {
    return OFFLOAD_LOCK_ERROR;
  }
}

extern "C" size_t offload_lock_describe_duration(int64_t ms, char* buf, size_t len) {
  std::string d = ol::describe_duration(ol::milliseconds(ms));
  if (buf && len > d.size()) copy_out(buf, len, d);
  return d.size();
}

extern "C" int offload_lock_last_errno(void) { return g_last_errno; }

extern "C" const char* offload_lock_version(void) { return ol::version(); }
