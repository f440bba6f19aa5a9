// What the keys of `top` do to other processes. See top_actions.hpp.
#include "cli/top_actions.hpp"

#include "cli/output.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/policy.hpp"
#include "posix/os.hpp"
#include "posix/signals.hpp"

namespace offload_lock::cli {

namespace {

std::string name_of(const std::string& label, std::int64_t pid) {
  return (label.empty() ? std::string("an unnamed process") : label) + " (pid " + std::to_string(pid) + ")";
}

}  // namespace

// NOLINTNEXTLINE(readability-convert-member-functions-to-static): part of the actions' interface, as the tests drive it
bool top_actions::own(std::int64_t pid, const std::string& host) const {
  if (!host.empty() && host != os::host_name()) return false;
  const auto uid = os::process_uid(pid);
  return uid && *uid == os::effective_uid();
}

bool top_actions::key_pressed(key k, const top_view& v, std::string& message) {
  const board& b = v.b;
  const int selected = v.selected;
  const auto n_slots = static_cast<int>(b.slots.size());
  const bool on_waiter = selected >= n_slots && selected < n_slots + static_cast<int>(b.waiters.size());
  if (k == key::other) {
    if (confirm_) message = "kept waiting";
    confirm_.reset();
    return false;
  }
  if (k == key::cancel_wait) {
    if (!on_waiter) {
      confirm_.reset();
      message = "w cancels a wait: select a waiter first (up, down)";
      return false;
    }
    const waiter& w = b.waiters[static_cast<std::size_t>(selected - n_slots)];
    const std::string who = name_of(w.label, w.pid);
    if (!own(w.pid, w.host)) {
      confirm_.reset();
      message = who + " is not a process of yours: only its own user can cancel its wait";
      return false;
    }
    if (!confirm_ || confirm_->first != w.pid || confirm_->second != w.since) {
      confirm_ = std::make_pair(w.pid, w.since);
      message = "cancel the wait of " + who + "? w again sends it SIGTERM; any other key keeps it";
      return false;
    }
    confirm_.reset();
    // Still that waiter, still waiting: its entry is live (write-locked by
    // that very process) with the same start.
    bool live = false;
    for (const auto& now : waiters(path_)) live = live || (now.pid == w.pid && now.since == w.since);
    if (!live || !own(w.pid, w.host)) {
      message = who + " no longer waits";
      return true;
    }
    os::terminate(w.pid);
    message = "sent SIGTERM to " + who + ": it gives up its wait";
    return true;
  }
  confirm_.reset();
  if (k != key::ask_yield) return false;
  if (selected < 0 || selected >= n_slots) {
    message = "y asks a holder to make way: select a holder first (up, down)";
    return false;
  }
  const info& i = b.slots[static_cast<std::size_t>(selected)];
  if (!i.held || !i.pid) {
    message = "nobody holds this slot";
    return false;
  }
  const std::string who = printable(cli::who(i));
  if (asker_.joinable()) {
    message = "still asking " + asked_who_ + " to make way";
    return false;
  }
  if (!own(*i.pid, i.host)) {
    message = who + " is another user's: top asks only holders of your own to make way";
    return false;
  }
  if (!i.can_yield) {
    message = who + " did not offer to make way (run --yield-signal SIG, or the library's on_yield_request)";
    return false;
  }
  if (i.yield_requested) {
    message = who + " has been asked to make way already, by " + printable(i.yield_requested->label);
    return false;
  }
  if (i.priority >= 100) {
    message = who + " has the highest priority (100): no waiter can ask it to make way";
    return false;
  }
  // The way the holder is asked: a waiter of a higher priority for its
  // slot, which its heartbeat sees in the queue and asks it about once.
  lock_options o;
  o.path = path_;
  o.wait = std::chrono::seconds(10);
  o.priority = i.priority + 1;
  o.label = "make-way request from top (" + os::user_name(os::effective_uid()).value_or("uid " + std::to_string(os::effective_uid())) + ")";
  // A holder is asked by a waiter above its priority; the site policy caps
  // the priority this user may wait at, and so whether they may ask.
  std::vector<std::string> notices;
  auto allowed = with_site_policy(o, &notices);
  if (!allowed) {
    message = allowed.error().message();
    return false;
  }
  if (allowed->priority <= i.priority) {
    message = who + " holds at priority " + std::to_string(i.priority) + ", and the site policy lets you wait at " +
              std::to_string(allowed->priority) + " at most: it cannot be asked to make way by you";
    return false;
  }
  const int slot = v.slot_numbers[static_cast<std::size_t>(selected)];
  if (b.slots.size() > 1) {
    o.gpus = static_cast<int>(b.slots.size());
    o.gpu = slot;
    if (o.gpu >= o.gpus) o.gpus = 1;
  } else if (slot > 0) {
    o.gpu = slot;
  }
  cancel_ = std::make_unique<os::wake_pipe>();
  o.cancel_fds = {cancel_->read_fd()};
  asker_done_ = false;
  asked_token_ = i.token;
  asked_who_ = who;
  asked_slot_ = selected;
  seen_at_.reset();
  asker_ = std::thread([this, o] {
    // Should the holder make way before this request leaves the queue, the
    // request is next: it takes the lock and passes it on at once.
    auto l = lock::acquire(o);
    if (l) (void)l->release();
    done_at_ = std::chrono::steady_clock::now();
    asker_done_ = true;
  });
  message = "asking " + who + " to make way: a request at priority " + std::to_string(o.priority) + " joins the queue";
  return true;
}

bool top_actions::update(const top_view& v, std::string& message) {
  if (!asker_.joinable()) return false;
  const board& b = v.b;
  const auto slot = static_cast<std::size_t>(asked_slot_);
  const bool gone = slot >= b.slots.size() || !b.slots[slot].held || b.slots[slot].token != asked_token_;
  if (!seen_at_ && slot < b.slots.size() && b.slots[slot].yield_requested &&
      b.slots[slot].yield_requested->pid == os::self_pid())
    seen_at_ = std::chrono::steady_clock::now();
  const bool long_enough = seen_at_ && std::chrono::steady_clock::now() - *seen_at_ >= kAskFor;
  if (!gone && !long_enough) {
    if (!asker_done_) return false;
    // Ended after the board was read: the board may still show the holder
    // it asked, gone since (it made way, and the request held and passed
    // the lock on). The next board tells.
    if (v.looked_at <= done_at_) return true;
  }
  stop();
  if (gone) message = asked_who_ + " made way";
  else if (long_enough) message = asked_who_ + " was asked to make way";
  else message = "the request to " + asked_who_ + " ended before it was seen";
  return false;
}

void top_actions::stop() {
  if (!asker_.joinable()) return;
  if (cancel_) cancel_->poke();
  asker_.join();
  cancel_.reset();
}

}  // namespace offload_lock::cli
