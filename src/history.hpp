// Writing the lock's history (include/offload_lock/history.hpp): the entry
// of each event, appended by the process the event happened in.
//
// The contract every call here keeps, since each sits on the acquisition's
// own path: best effort and cheap. An append is one fstat(2) and one
// write(2) on a descriptor kept open per history (the first one of a
// process also opens the directory and its file); nothing is fsynced,
// nothing waits for a lock, no error reaches the caller, nothing throws.
// Where the history is not kept (no directory), a record costs one failed
// open(2).
//
// The calls are made from five places only: the end of a top-level
// acquisition (acquisition_record, in acquire.cpp), a held lock's release
// (held_state::release) and release_by (release.cpp), the reclaim of a
// dead holder's lock (reclaim.cpp), and the idle thread (idle.cpp).
#ifndef OFFLOAD_LOCK_SRC_HISTORY_HPP
#define OFFLOAD_LOCK_SRC_HISTORY_HPP

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "judge.hpp"
#include "offload_lock/history.hpp"
#include "offload_lock/lock.hpp"

namespace offload_lock::detail::history {

// Appends `e` to the history of the lock at `lock_path` (a slot's path is
// taken back to slot 0's, whose history every slot shares: e.gpu names the
// slot). Sets e.at (now) and e.uid (this process's effective uid, which is
// also the owner of the file it goes to). A "hold" or "idle" entry with a token this
// process acquired is completed from what that acquisition recorded (its
// label, slot, priority, declared duration, and held_ms from its start);
// otherwise from `meta`, the lock's meta.json bytes, when given.
// Thread-safe; safe across fork (a child appends through its own copy).
void record(const std::string& lock_path, history_entry e, std::string_view meta = {});

// The entry at the end of a hold: event "hold", `outcome`, the token.
history_entry hold_end(const std::string& token, const char* outcome, bool yield_asked = false);
// The entry of a release by another process (release_by): the holder as
// `before` showed it, by "token", "pid" or "force".
history_entry released_by(const info& before, const char* by);
// The entry of a takeover: the dead holder's lock as judged (`s`), and why
// it was stale.
history_entry takeover(const snapshot& s, const std::string& reason);

// One top-level acquisition as the history sees it: made when it starts,
// finished with its result. Records "acquire" (acquired, with the wait;
// timed-out; cancelled) and, from the lock's meta.json, the waiters it
// passed over; remembers the acquisition for the "hold" entry of its
// release. A nested or inherited acquisition (no claim of its own) and a
// single try that found the lock busy record nothing.
class acquisition_record {
 public:
  acquisition_record(const lock_options& opt, const std::string& base);
  acquisition_record(const acquisition_record&) = delete;
  acquisition_record& operator=(const acquisition_record&) = delete;
  // The options to acquire with: `opt` itself, or, when it can be asked to
  // yield, a copy whose on_yield_request also records the request
  // ("yield-asked") before it calls the caller's.
  const lock_options& options() const { return copy_ ? *copy_ : opt_; }
  void finish(const result<lock>& r);

 private:
  struct shared;
  const lock_options& opt_;
  std::string base_;
  std::int64_t since_ms_, start_mono_;
  std::unique_ptr<lock_options> copy_;
  std::shared_ptr<shared> shared_;
};

}  // namespace offload_lock::detail::history

#endif  // OFFLOAD_LOCK_SRC_HISTORY_HPP
