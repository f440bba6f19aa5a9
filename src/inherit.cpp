// Inherited locks (inherit.hpp, doc/protocol.md B11).
#include "inherit.hpp"

#include "inspect.hpp"
#include "offload_lock/lock.hpp"
#include "os/process.hpp"

namespace offload_lock::detail {

std::optional<std::string> inherited_path() {
  auto p = sys::get_env(env_lock_path);
  if (!p || p->empty()) return std::nullopt;
  return p;
}

std::optional<std::string> inherited_token(const target& t, std::int64_t ttl, std::int64_t grace) {
  auto token = sys::get_env(env_lock_token);
  if (!token || token->empty()) return std::nullopt;
  if (auto env_path = inherited_path()) {
    auto other = open_target(*env_path);
    if (!other || other->name != t.name) return std::nullopt;
    auto a = parent_identity(*other), b = parent_identity(t);
    if (!a || !b || *a != *b) return std::nullopt;
  }
  auto d = inspect_target(t, ttl, grace, process_view::real(), nullptr, false);
  if (!d || !d->i.held || d->i.token != *token) return std::nullopt;
  return *token;
}

}  // namespace offload_lock::detail
