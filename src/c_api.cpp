// The C API (include/offload_lock/offload_lock.h) over the C++ one.
#include "offload_lock/offload_lock.h"

#include <cstring>
#include <new>

#include "offload_lock/lock.hpp"
#include "offload_lock/path.hpp"

struct offload_lock_handle {
  offload_lock::lock held;
};

namespace {

void copy_out(char* dst, std::size_t cap, const std::string& src) {
  if (!dst || cap == 0) return;
  std::size_t n = std::min(cap - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

std::string path_or_default(const char* path) {
  return path && *path ? std::string(path) : offload_lock::resolve_path().path;
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
    offload_lock::lock_options o;
    o.path = path_or_default(path);
    o.wait = wait_ms < 0 ? offload_lock::wait_forever : offload_lock::milliseconds(wait_ms);
    if (label) o.label = label;
    auto l = offload_lock::lock::acquire(o);
    if (!l) {
      const auto& e = l.error();
      copy_out(message, message_len, e.message());
      if (e == offload_lock::errc::busy) return OFFLOAD_LOCK_BUSY;
      if (e == offload_lock::errc::timed_out) return OFFLOAD_LOCK_TIMED_OUT;
      if (e == offload_lock::errc::bad_input) return OFFLOAD_LOCK_INVALID;
      return OFFLOAD_LOCK_ERROR;
    }
    // cppcheck-suppress ignoredReturnValue ; the moved value initializes the handle
    *out = new offload_lock_handle{std::move(*l)};
    return OFFLOAD_LOCK_OK;
  } catch (const std::exception& ex) {
    copy_out(message, message_len, ex.what());
    return OFFLOAD_LOCK_ERROR;
  }
}

extern "C" int offload_lock_release(offload_lock_handle* handle) {
  if (!handle) return OFFLOAD_LOCK_INVALID;
  offload_lock::error e = handle->held.release();
  delete handle;
  if (!e) return OFFLOAD_LOCK_OK;
  return e == offload_lock::errc::lost ? OFFLOAD_LOCK_LOST : OFFLOAD_LOCK_ERROR;
}

extern "C" const char* offload_lock_token(const offload_lock_handle* handle) {
  return handle ? handle->held.token().c_str() : "";
}

extern "C" int offload_lock_inspect(const char* path, offload_lock_info* info) {
  if (!info) return OFFLOAD_LOCK_INVALID;
  std::memset(info, 0, sizeof *info);
  try {
    offload_lock::info i = offload_lock::inspect(path_or_default(path));
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
