// The error model of offload-lock: outcomes (busy, timed out, not owner, lost)
// as the project's own error codes, system failures as errno in
// std::system_category() together with the operation and path they concern,
// and a small result<T> that carries either a value or such an error.
#ifndef OFFLOAD_LOCK_ERROR_HPP
#define OFFLOAD_LOCK_ERROR_HPP

#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include "offload_lock/export.h"

namespace offload_lock {

// Outcomes that are not system failures. Contention and timeouts are ordinary
// results a caller decides on; they never arrive as exceptions. (3 was
// not_owner, which nothing returned: a release that names another holder is
// release_status::not_owner.)
enum class errc {
  busy = 1,        // held by someone else and the caller asked to try only once
  timed_out = 2,   // still held by someone else when the wait ended
  lost = 4,        // the lock this holder took is no longer its own
  bad_input = 5,   // a malformed argument (for example an empty lock path)
  cancelled = 6,   // a wait was abandoned through lock_options::cancel_fds
};

}  // namespace offload_lock

// Declared before anything converts an errc to a std::error_code: a
// specialization after that first use is ill-formed, and clang rejects it.
namespace std {
template <>
struct is_error_code_enum<offload_lock::errc> : true_type {};
}  // namespace std

namespace offload_lock {

// The category of errc ("offload_lock").
OFFLOAD_LOCK_API const std::error_category& category() noexcept;
OFFLOAD_LOCK_API std::error_code make_error_code(errc e) noexcept;

// An error code plus the context it happened in ("rename /tmp/x.lock"), so a
// message can always name the operation and the path.
class OFFLOAD_LOCK_API error {
 public:
  error() = default;
  error(std::error_code code, std::string context = {})
      : code_(code), context_(std::move(context)) {}
  error(errc e, std::string context = {})
      : code_(make_error_code(e)), context_(std::move(context)) {}

  const std::error_code& code() const noexcept { return code_; }
  const std::string& context() const noexcept { return context_; }
  // "context: reason", or just the reason when there is no context.
  std::string message() const;
  explicit operator bool() const noexcept { return static_cast<bool>(code_); }
  bool operator==(errc e) const noexcept { return code_ == make_error_code(e); }
  bool operator!=(errc e) const noexcept { return !(*this == e); }
  // True for errors of the operating system (std::system_category()).
  bool is_system() const noexcept { return code_.category() == std::system_category(); }

 private:
  std::error_code code_;
  std::string context_;
};

// Either a T or an error. value() on an error, and error() on a value, are
// broken preconditions and throw std::logic_error; check has_value() (or the
// bool conversion) first.
template <class T>
class result {
 public:
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  result(offload_lock::error e) : v_(std::in_place_index<1>, std::move(e)) {}
  result(errc e) : v_(std::in_place_index<1>, offload_lock::error(e)) {}

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & { check(); return std::get<0>(v_); }
  const T& value() const& { check(); return std::get<0>(v_); }
  T&& value() && { check(); return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

  const offload_lock::error& error() const {
    if (has_value()) throw std::logic_error("offload_lock::result::error() on a value");
    return std::get<1>(v_);
  }
  // error() under its 0.1 name.
  [[deprecated("use result::error()")]] const offload_lock::error& err() const { return error(); }

 private:
  void check() const {
    if (!has_value())
      throw std::logic_error("offload_lock::result::value() on an error: " +
                             std::get<1>(v_).message());
  }
  std::variant<T, offload_lock::error> v_;
};

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_ERROR_HPP
