// The offload_lock error category and messages.
#include "offload_lock/error.hpp"

namespace offload_lock {

namespace {
class category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "offload_lock"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::busy: return "lock is held by another process";
      case errc::timed_out: return "timed out waiting for the lock";
      case errc::lost: return "lock was removed or replaced by someone else";
      case errc::bad_input: return "invalid argument";
      case errc::cancelled: return "wait cancelled";
    }
    return "unknown offload_lock error";
  }
};
}  // namespace

const std::error_category& category() noexcept {
  static const category_impl c;
  return c;
}

std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), category()}; }

std::string error::message() const {
  std::string reason = code_ ? code_.message() : "success";
  return context_.empty() ? reason : context_ + ": " + reason;
}

}  // namespace offload_lock
