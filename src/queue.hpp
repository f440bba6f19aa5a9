// The ordered queue of one lock, as one waiter takes part in it: its place
// (the entry), who is ahead of it for a slot, its role, the pass-over clock
// (the one home of the pass-over grace), and who may be asked to yield.
//
// Order: priority, then arrival (registry.hpp). Roles, so that thousands of
// waiters stay herd-free within the 128 inotify instances a user has:
// - active: fewer than `active_waiters` live entries of its own user are
//   ahead of it. It watches the lock (inotify, pidfd), stages its lock for
//   the handoff (handoff.hpp) and passes over a waiter ahead that leaves a
//   free lock unclaimed;
// - inactive: it sleeps on the exit of its own user's entry just ahead
//   (pidfd, no inotify instance) and on its wake channel. It tells that
//   entry's waiter that it follows it (a line in that waiter's channel);
//   a waiter wakes its followers when it leaves the queue or moves up.
// Another user's entries never make a waiter inactive: they are ahead in
// the order, but cannot blind it to a free lock.
#ifndef OFFLOAD_LOCK_SRC_QUEUE_HPP
#define OFFLOAD_LOCK_SRC_QUEUE_HPP

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "offload_lock/inspect.hpp"
#include "plan.hpp"
#include "registry.hpp"

namespace offload_lock::detail {

// How many of one user's waiters watch the lock at once: the head and the
// one that passes it over if it is stuck.
inline constexpr int active_waiters = 2;

// This waiter's view of the queue for one slot.
struct queue_view {
  std::vector<queue_entry> ahead;       // live, served before this one, would take the slot, not passed over
  int own_ahead = 0;                    // how many of `ahead` are this user's, not stopped (see view())
  std::optional<queue_entry> own_pred;  // the last of those (an inactive waiter sleeps on its exit)
  bool active() const { return own_ahead < active_waiters; }
};

// The entry name as meta.json's passedOver records it: "<user dir>/<name>".
std::string passed_name(const queue_entry& e);

// A waiter that cannot claim the lock now: its process is stopped (SIGSTOP,
// a debugger), and would hold the lock while it cannot use it. It keeps its
// place; a releaser hands the lock past it, and a waiter behind it passes it
// over without a grace. A look that fails counts as not stopped.
bool cannot_claim(const queue_entry& e);

// One waiter's place in the queue of the lock at `base` (slot 0's path).
// Made when an acquisition starts; the entry is written by join() and
// removed by leave() or the destructor. Not thread-safe.
class queue_place {
 public:
  explicit queue_place(const plan& p);
  ~queue_place();
  queue_place(const queue_place&) = delete;
  queue_place& operator=(const queue_place&) = delete;

  bool joined() const { return reg_ != nullptr; }
  // Writes the entry (once), after sweeping this user's dead entries. Best
  // effort: a registry that cannot be written leaves this waiter out of the
  // queue, claiming whenever it finds the lock free, as a v1 runner does.
  void join();
  // Leaves the queue and wakes this user's next waiters behind it (they may
  // now be active). `taking`: this waiter takes the lock, and leaves the
  // registry's directories for its release to tidy (tidy_registry()); its
  // entry's descriptors are then handed back, their names removed, for the
  // holder to close after it has handed the lock on: closing them frees
  // the files, which is no part of the way to holding (nullptr when they
  // were closed here, a name not removed: its entry must not stay locked).
  std::unique_ptr<registration> leave(bool taking = false);
  // Leaves and joins again at the back of its priority class (a waiter
  // found passed over in a holder's meta.json).
  void rejoin();

  // Reads the queue once (for one round of an acquisition); view() then
  // says who is ahead for each slot.
  void refresh();
  // Who is ahead for slot `slot` (every live entry while not joined), as of
  // the last refresh().
  queue_view view(int slot) const;
  // cannot_claim(e), asked of /proc once per refresh().
  bool stopped(const queue_entry& e) const;
  const queue_entry* me() const { return reg_ ? &reg_->entry() : nullptr; }
  int wake_fd() const { return reg_ ? reg_->wake_fd() : -1; }
  // Reads the wake channel: followers announcing themselves are noted.
  void read_wake();
  // How many times this waiter has been told to wake ("w": the queue moved
  // for it), as read by read_wake(); a follower's announcement is not one.
  int wakes_told() const { return wakes_told_; }
  // Tells `pred` (an entry of this user ahead) that this waiter follows it
  // (before each sleep behind it).
  enum class following {
    no,     // `pred` will not wake it (it left the queue meanwhile, or its
            // channel cannot be written): look again soon
    known,  // told before, and not woken since: nothing written
    told,   // told now: `pred` may have moved up before it read the line,
            // so the queue read before is looked at again once
  };
  following follow(const queue_entry& pred);
  // Wakes the followers (this waiter moved up, or leaves).
  void wake_followers();
  // This waiter's position for slot `slot`: 1 is next (0 when not joined).
  int position(int slot) const;

  // From now on `e` is not waited for.
  void pass_over(const queue_entry& e) { passed_.insert(passed_name(e)); }
  // Those a holder's meta.json says it passed over: passed over here too,
  // rather than given their grace again. True when this waiter is one of
  // them (it then rejoins: passed over is not out).
  bool learn_passed(const std::vector<std::string>& names);
  const std::set<std::string>& passed() const { return passed_; }
  // The passed-over entries still queued, for meta.json's passedOver.
  std::vector<std::string> passed_still_queued();
  registry_reader& reader() { return reader_; }

 private:
  const plan& p_;
  waiter_record rec_;
  registry_reader reader_;
  std::unique_ptr<registration> reg_;
  std::set<std::string> passed_;
  std::vector<queue_entry> ahead_all_;  // the last refresh(): live entries served before this one
  // stopped()'s answers since the last refresh(), by passed_name.
  mutable std::map<std::string, bool> stopped_;
  std::set<std::pair<std::string, std::string>> followers_;  // (user dir, stem)
  std::string following_;  // the predecessor told, as passed_name
  bool woken_ = false;     // a "w" came since: the predecessor forgot this one
  int wakes_told_ = 0;     // how many "w" came
};

// The pass-over clock of one waiter for one slot. While the lock is
// available (absent or stale) and someone is ahead, the front of those
// ahead is passed over once it has left the lock unclaimed for
// pass_over_grace_ms — counted from when it became the front for a waiter
// of this user, and from when the lock became available for another
// user's, so that however another user's entries churn, they cost a waiter
// at most one grace per free period.
class pass_over_clock {
 public:
  // With `ahead` non-empty: 0 when its front is to be passed over now, else
  // how long to wait for it.
  std::int64_t available(const std::vector<queue_entry>& ahead, std::uint32_t my_uid);
  void held();

 private:
  std::int64_t free_since_ = -1;
  std::string front_;
  std::int64_t front_since_ = -1;
};

// The first live waiter, in serving order, that would take slot `slot`, has
// a priority above `priority`, and may ask this holder (of user
// `holder_uid`) to yield: by default only a waiter of the same user, or
// root's (doc/protocol.md, "Priority and yield").
std::optional<yield_request> first_above(registry_reader& r, int slot, int priority, std::uint32_t holder_uid);
// The first live waiter that would take slot `slot`, whoever it is.
std::optional<yield_request> first_waiting(registry_reader& r, int slot);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_QUEUE_HPP
