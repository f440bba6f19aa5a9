// The C API's grammar and words (offload_lock.h, "Since 0.3: the command's
// grammar and words"): thin calls over offload_lock/describe.hpp,
// offload_lock/gpus.hpp and the slot and path rules.
#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "c_api_lease.hpp"
#include "offload_lock/describe.hpp"
#include "offload_lock/gpus.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/offload_lock.h"
#include "offload_lock/path.hpp"
#include "offload_lock/slots.hpp"
#include "os/process.hpp"

namespace {

namespace ol = offload_lock;

// Writes `s` with its NUL when it fits; the bytes needed without the NUL.
size_t put(const std::string& s, char* buf, size_t len) {
  if (buf && len > s.size()) {
    std::memcpy(buf, s.data(), s.size());
    buf[s.size()] = '\0';
  } else if (buf && len > 0) {
    buf[0] = '\0';  // never a truncated word: nothing
  }
  return s.size();
}

std::string path_or_default(const char* path) {
  return path && *path ? std::string(path) : ol::resolve_path().path;
}

// A bounded C string of a struct (it may lack its NUL if filled by hand).
std::string field(const char* s, size_t cap) { return std::string(s, ::strnlen(s, cap)); }

// The C view of a lock back into the C++ one, as far as the words use it.
ol::info info_of(const offload_lock_info_ex& c) {
  ol::info i;
  i.path = field(c.path, sizeof c.path);
  i.present = c.present;
  i.held = c.held;
  if (c.has_pid) i.pid = c.pid;
  if (c.has_started_at) i.started_at = c.started_at_ms;
  i.held_for = ol::milliseconds(c.held_for_ms);
  i.age = ol::milliseconds(c.age_ms);
  i.label = field(c.label, sizeof c.label);
  i.host = field(c.host, sizeof c.host);
  i.token = field(c.token, sizeof c.token);
  if (c.has_stale) i.stale_reason = field(c.stale, sizeof c.stale);
  return i;
}

}  // namespace

extern "C" int offload_lock_parse_duration(const char* text, int64_t* ms) {
  if (!text || !ms) return OFFLOAD_LOCK_INVALID;
  auto d = ol::parse_duration(text);
  if (!d) return OFFLOAD_LOCK_INVALID;
  *ms = *d == ol::wait_forever ? -1 : d->count();
  return OFFLOAD_LOCK_OK;
}

extern "C" int offload_lock_parse_priority(const char* text, int* priority) {
  if (!text || !priority) return OFFLOAD_LOCK_INVALID;
  auto p = ol::parse_priority(text);
  if (!p) return OFFLOAD_LOCK_INVALID;
  *priority = *p;
  return OFFLOAD_LOCK_OK;
}

extern "C" size_t offload_lock_gpu_slot_path(const char* path, int gpu, char* buf, size_t len) {
  try {
    return put(ol::gpu_slot_path(path_or_default(path), gpu), buf, len);
  } catch (const std::exception&) {
    return put("", buf, len);
  }
}

extern "C" size_t offload_lock_lock_identity(const char* path, char* buf, size_t len) {
  try {
    return put(ol::lock_identity(path_or_default(path)), buf, len);
  } catch (const std::exception&) {
    return put(path ? path : "", buf, len);
  }
}

extern "C" int offload_lock_gpu_count(void) {
  try {
    return ol::count_gpus();
  } catch (const std::exception&) {
    return 0;
  }
}

extern "C" int offload_lock_slot_count(const char* path) {
  try {
    return ol::discover_slots(path_or_default(path));
  } catch (const std::exception&) {
    return 1;
  }
}

extern "C" int offload_lock_visible_gpus(const char* value, int* indices, size_t cap, char* ignored,
                                         size_t ignored_len) {
  try {
    std::optional<ol::visible_devices> v;
    if (value) v = ol::parse_visible_devices(value, ol::machine_gpus());
    else v = ol::visible_gpus();
    put(v ? v->ignored : "", ignored, ignored_len);
    if (!v) return -1;
    for (size_t k = 0; indices && k < cap && k < v->indices.size(); ++k) indices[k] = v->indices[k];
    return static_cast<int>(v->indices.size());
  } catch (const std::exception&) {
    put("", ignored, ignored_len);
    return -1;
  }
}

extern "C" int offload_lock_choose_slots(int gpus, int gpu, const char* value, int* slot, int* allowed, size_t cap,
                                         int* allowed_count, char* note, size_t note_len) {
  put("", note, note_len);
  if (!slot || !allowed_count || gpus < 1 || gpus > ol::max_gpus || gpu < -1 || gpu >= ol::max_gpus) {
    put("offload_lock_choose_slots: gpus 1 to " + std::to_string(ol::max_gpus) + ", gpu -1 to " +
            std::to_string(ol::max_gpus - 1) + ", slot and allowed_count set",
        note, note_len);
    return OFFLOAD_LOCK_INVALID;
  }
  try {
    std::optional<ol::visible_devices> v;
    std::string shown = "CUDA_VISIBLE_DEVICES=";
    if (value) {
      v = ol::parse_visible_devices(value, ol::machine_gpus());
      shown += value;
    } else if (auto env = ol::detail::sys::get_env("CUDA_VISIBLE_DEVICES")) {
      v = ol::parse_visible_devices(*env, ol::machine_gpus());
      shown += *env;
    }
    const ol::slot_choice c = ol::choose_slots(gpus, gpu, v, shown);
    if (!c.problem.empty()) {
      put(c.problem, note, note_len);
      return OFFLOAD_LOCK_INVALID;
    }
    *slot = c.gpu;
    *allowed_count = v ? static_cast<int>(c.allowed.size()) : -1;
    for (size_t k = 0; allowed && k < cap && k < c.allowed.size(); ++k) allowed[k] = c.allowed[k];
    put(c.note, note, note_len);
    return OFFLOAD_LOCK_OK;
  } catch (const std::exception& ex) {
    put(ex.what(), note, note_len);
    return OFFLOAD_LOCK_ERROR;
  }
}

extern "C" size_t offload_lock_describe_holder(const offload_lock_info_ex* info, char* buf, size_t len) {
  try {
    return put(info ? ol::describe_holder(info_of(*info)) : std::string(), buf, len);
  } catch (const std::exception&) {
    return put("", buf, len);
  }
}

extern "C" size_t offload_lock_describe_state(const offload_lock_info_ex* info, char* buf, size_t len) {
  try {
    return put(info ? ol::describe_state(info_of(*info)) : std::string(), buf, len);
  } catch (const std::exception&) {
    return put("", buf, len);
  }
}

extern "C" size_t offload_lock_describe_wait(const offload_lock_progress* progress, const char* path, char* buf,
                                             size_t len) {
  if (!progress) return put("", buf, len);
  try {
    ol::wait_progress p;
    p.waited = ol::milliseconds(progress->waited_ms);
    p.changed = progress->changed != 0;
    p.position = progress->position;
    for (size_t k = 0; progress->holders && k < progress->holder_count; ++k)
      p.holders.push_back(info_of(progress->holders[k]));
    if (progress->lease) p.lease = ol::detail::lease_of_c(*progress->lease);
    const std::string base = path_or_default(path);
    return put(ol::describe_wait(p, base, ol::place_in_line(base)), buf, len);
  } catch (const std::exception&) {
    return put("", buf, len);
  }
}
