// What the keys of `top` do to other processes: w cancels a wait of the
// user's own (SIGTERM to the waiting process, once confirmed), y asks a
// holder of the user's own that offered to make way (the way every such
// holder is asked today: a waiter above its priority joins the queue for
// its slot, and the holder's heartbeat sees it), when the site policy lets
// the user wait above the holder's priority. Anything else, another user's
// process above all, is refused with the reason on the message line.
#ifndef OFFLOAD_LOCK_SRC_CLI_TOP_ACTIONS_HPP
#define OFFLOAD_LOCK_SRC_CLI_TOP_ACTIONS_HPP

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cli/board.hpp"
#include "cli/gpus.hpp"
#include "cli/top.hpp"
#include "posix/ticker.hpp"

namespace offload_lock::cli {

class top_actions {
 public:
  top_actions(std::string path, const gpu_plan& gpus) : path_(std::move(path)), gpus_(gpus) {}
  ~top_actions() { stop(); }
  top_actions(const top_actions&) = delete;
  top_actions& operator=(const top_actions&) = delete;

  // A key on the view's selected row (the slots, then the waiters). Says
  // on `message` what it did or why not. True when the board should be
  // looked at again.
  bool key_pressed(key k, const top_view& v, std::string& message);
  // Every round: a make-way request ends once its holder is gone, or once
  // the holder has had kAskFor to see it (its queue shows the request as
  // the one it is asked for). True when the board must be looked at again
  // before it can tell: the request ended after the board was read.
  bool update(const top_view& v, std::string& message);
  // Ends a make-way request still queued.
  void stop();

  // How long a make-way request stays queued once it is seen.
  static constexpr std::chrono::milliseconds kAskFor{2000};

 private:
  bool own(std::int64_t pid, const std::string& host) const;
  std::string path_;
  const gpu_plan& gpus_;
  // The wait w asked to confirm: its pid and since.
  std::optional<std::pair<std::int64_t, std::int64_t>> confirm_;
  // The make-way request: a waiting acquisition on its own thread.
  std::thread asker_;
  std::unique_ptr<os::wake_pipe> cancel_;
  std::atomic<bool> asker_done_{false};
  std::chrono::steady_clock::time_point done_at_{};  // written before asker_done_, read after it
  std::string asked_token_, asked_who_;
  int asked_slot_ = 0;
  std::optional<std::chrono::steady_clock::time_point> seen_at_;
};

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_TOP_ACTIONS_HPP
