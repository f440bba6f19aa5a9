// The C API (include/offload_lock/offload_lock.h) over the C++ one.
#include "offload_lock/offload_lock.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "offload_lock/lock.hpp"
#include "offload_lock/path.hpp"

namespace {

// What a handle's on_lost reaches. The library may call on_lost on its
// heartbeat thread at the same moment the handle is released; the mutex
// lets release wait for a call in progress and switch the relay off, so no
// call starts after offload_lock_release() returns. Recursive, because the
// callback may itself release its handle.
struct lost_relay {
  std::recursive_mutex mu;
  offload_lock_lost_fn fn = nullptr;
  void* user = nullptr;
  bool active = true;
};

}  // namespace

struct offload_lock_handle {
  offload_lock::lock held;
  std::string path;  // the directory held, also for a lock passed down by the parent
  std::shared_ptr<lost_relay> relay;
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

std::string who(const ol::info& i) {
  std::string s = (i.label.empty() ? std::string("an unnamed holder") : i.label) + " (pid " +
                  (i.pid ? std::to_string(*i.pid) : std::string("unknown"));
  if (!i.host.empty()) s += ", host " + i.host;
  return s + ")";
}

// The lock's state in the words `offload-lock status` uses.
std::string state_text(const ol::info& i) {
  if (i.held) return "held by " + who(i) + " for " + ol::describe_duration(i.held_for);
  if (!i.present) return "free";
  return "free (stale lock of " + who(i) + ": " + i.stale_reason.value_or("unknown") + ")";
}

// "timed out: PATH is held by LABEL (pid N, host H) for 5m12s": whom the
// caller lost to, as the command says it.
std::string contention_message(const ol::error& e, const ol::lock_options& o) {
  const std::string how = e == ol::errc::busy ? "busy: " : "timed out: ";
  if (o.gpus > 1 && o.gpu < 0)
    return how + "all " + std::to_string(o.gpus) + " GPU slots of " + o.path + " are held";
  const std::string p = ol::gpu_slot_path(o.path, std::max(0, o.gpu));
  return how + p + " is " + state_text(ol::inspect(p, o.ttl));
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

int acquire(ol::lock_options o, std::shared_ptr<lost_relay> relay, offload_lock_handle** out, char* message,
            size_t message_len) {
  if (o.path.empty()) o.path = ol::resolve_path().path;
  if (relay)
    o.on_lost = [relay](const ol::error& e) {
      std::lock_guard<std::recursive_mutex> g(relay->mu);
      if (relay->active && relay->fn) relay->fn(e.message().c_str(), relay->user);
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

extern "C" void offload_lock_options_init(offload_lock_options* o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->wait_ms = -1;
  o->gpus = 1;
  o->gpu = -1;
  o->cancel_fd = -1;
}

extern "C" int offload_lock_acquire_ex(const offload_lock_options* options, offload_lock_handle** out,
                                       char* message, size_t message_len) {
  if (!out || !options || options->size < sizeof(offload_lock_options)) {
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
  try {
    ol::lock_options o;
    o.path = path_or_default(c.path);
    o.wait = c.wait_ms < 0 ? ol::wait_forever : ol::milliseconds(c.wait_ms);
    if (c.label) o.label = c.label;
    if (c.ttl_ms > 0) o.ttl = ol::milliseconds(c.ttl_ms);
    o.gpus = c.gpus;
    o.gpu = c.gpu;
    if (o.gpu >= 0 && o.gpu >= o.gpus) o.gpus = 1;  // slot K alone, as `--gpu K` means
    if (c.cancel_fd >= 0) o.cancel_fds.push_back(c.cancel_fd);
    o.inherit = !(c.flags & OFFLOAD_LOCK_NO_INHERIT);
    o.register_waiter = !(c.flags & OFFLOAD_LOCK_NO_REGISTER);
    if (c.on_progress) {
      o.progress_every = ol::milliseconds(c.progress_every_ms);
      offload_lock_progress_fn fn = c.on_progress;
      void* user = c.progress_user;
      o.on_progress = [fn, user](const ol::wait_progress& p) {
        std::vector<offload_lock_info_ex> hs(p.holders.size());
        for (std::size_t k = 0; k < hs.size(); ++k) fill(hs[k], p.holders[k]);
        offload_lock_progress cp{p.waited.count(), p.changed ? 1 : 0, hs.size(), hs.data()};
        fn(&cp, user);
      };
    }
    std::shared_ptr<lost_relay> relay;
    if (c.on_lost) {
      relay = std::make_shared<lost_relay>();
      relay->fn = c.on_lost;
      relay->user = c.lost_user;
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

extern "C" size_t offload_lock_describe_duration(int64_t ms, char* buf, size_t len) {
  std::string d = ol::describe_duration(ol::milliseconds(ms));
  if (buf && len > d.size()) copy_out(buf, len, d);
  return d.size();
}

extern "C" int offload_lock_last_errno(void) { return g_last_errno; }

extern "C" const char* offload_lock_version(void) { return ol::version(); }
