// The ordered queue of one lock (queue.hpp): a waiter's place, its view of
// who is ahead, the pass-over clock and who may ask for a yield.
#include "queue.hpp"

#include <algorithm>
#include <mutex>

#include "os/clock.hpp"
#include "os/process.hpp"
#include "timing.hpp"

namespace offload_lock::detail {

std::string passed_name(const queue_entry& e) { return e.dir + "/" + e.name; }

queue_place::queue_place(const plan& p) : p_(p), reader_(p.base) {
  rec_.pid = sys::self_pid();
  rec_.label = p.entry.label;
  rec_.host = sys::host_name();
  rec_.since = sys::now_ms();
  rec_.gpu = p.entry.gpu;
  rec_.gpus = p.entry.gpus;
  rec_.priority = p.entry.priority;
  rec_.expect_ms = p.entry.expect_ms;
  rec_.slots = p.entry.slots;
}

bool cannot_claim(const queue_entry& e) { return sys::stopped(e.rec.pid).value_or(false); }

queue_place::~queue_place() { (void)leave(); }

namespace {

// The registries this process has swept, by base: a sweep lists this user's
// whole directory and probes every entry in it, which a process waiting
// again and again must not pay on every wait. It sweeps once, and again
// whenever a read finds an entry of this user's left behind.
std::mutex swept_mu;
std::set<std::string>& swept() {
  static std::set<std::string> s;
  return s;
}
struct swept_fork_guard {
  swept_fork_guard() noexcept {
    sys::on_fork([] { swept_mu.lock(); }, [] { swept_mu.unlock(); }, [] { swept_mu.unlock(); });
  }
};
#if !defined(__SANITIZE_THREAD__)
const swept_fork_guard installed_swept_fork_guard;
#endif

bool first_sweep(const std::string& base) {
  std::lock_guard<std::mutex> g(swept_mu);
  return swept().insert(base).second;
}

}  // namespace

void queue_place::join() {
  if (reg_ || !p_.entry.queue) return;
  if (first_sweep(p_.base) || reader_.saw_dead_own()) sweep_registry(p_.base);
  reg_ = registration::add(p_.base, rec_);
}

std::unique_ptr<registration> queue_place::leave(bool taking) {
  if (!reg_) return nullptr;
  if (taking) reg_->keep_dirs();
  // Out of the registry first, then the last look at the channel: every
  // follower either wrote before it (and is woken below) or finds the
  // entry gone (follow()).
  const bool removed = reg_->withdraw();
  read_wake();
  // Its followers: one of them is now among the active ones, and must start
  // to watch the lock. (Through the user directory still held open.)
  wake_followers();
  following_.clear();
  if (taking && removed) {
    reg_->close_dirs();
    return std::move(reg_);
  }
  reg_.reset();
  return nullptr;
}

void queue_place::read_wake() {
  if (!reg_) return;
  for (const auto& m : reg_->messages()) {
    if (m == "w") {
      woken_ = true;
      ++wakes_told_;
    }
    // "f <user dir> <stem>": a waiter of this user behind this one.
    if (m.size() > 2 && m.compare(0, 2, "f ") == 0) {
      const auto sp = m.find(' ', 2);
      if (sp != std::string::npos && followers_.size() < 64) followers_.emplace(m.substr(2, sp - 2), m.substr(sp + 1));
    }
  }
}

queue_place::following queue_place::follow(const queue_entry& pred) {
  const queue_entry* me = this->me();
  if (!me) return following::no;
  // Announced again after the one ahead has woken it: it forgets its
  // followers once it has woken them (wake_followers). Otherwise it still
  // knows this one, and nothing is written.
  if (following_ == passed_name(pred) && !woken_) return following::known;
  woken_ = false;
  following_.clear();
  const std::string line = "f " + me->dir + " " + me->stem();
  if (!(pred.dir == me->dir ? reg_->send_beside(pred.stem(), line, true) : send(p_.base, pred.dir, pred.stem(), line, true)))
    return following::no;
  following_ = passed_name(pred);
  return following::told;
}

void queue_place::wake_followers() {
  for (const auto& [dir, stem] : followers_) {
    if (reg_ && dir == reg_->entry().dir) (void)reg_->send_beside(stem, "w");
    else (void)send(p_.base, dir, stem, "w");
  }
  followers_.clear();
}

void queue_place::rejoin() {
  if (!reg_) return;
  (void)leave();
  passed_.clear();
  join();
}

void queue_place::refresh() {
  ahead_all_.clear();
  stopped_.clear();
  if (!p_.entry.queue) return;  // not queueing: nobody is ahead
  ahead_all_ = reader_.live(me());
}

queue_view queue_place::view(int slot) const {
  queue_view v;
  const queue_entry* me = this->me();
  const std::uint32_t my_uid = me ? me->uid : sys::effective_uid();
  for (const auto& e : ahead_all_) {
    if (me && ((e.name == me->name && e.dir == me->dir) || !served_before(e, *me))) continue;
    if (!accepts(e.rec, slot) || passed_.count(passed_name(e))) continue;
    v.ahead.push_back(e);
    if (e.uid != my_uid) continue;
    // A stopped waiter keeps its place but cannot claim: it does not make
    // those behind it inactive, or two stopped waiters of one user would
    // leave the rest of its line asleep beside a free lock for as long as
    // they stay stopped. Asked only while it decides the role (fewer than
    // active_waiters counted); beyond that every one counts.
    if (v.own_ahead < active_waiters && stopped(e)) continue;
    ++v.own_ahead;
    v.own_pred = e;
  }
  return v;
}

bool queue_place::stopped(const queue_entry& e) const {
  auto [known, asked] = stopped_.emplace(passed_name(e), false);
  if (asked) known->second = cannot_claim(e);
  return known->second;
}

int queue_place::position(int slot) const {
  if (!joined()) return 0;
  return static_cast<int>(view(slot).ahead.size()) + 1;
}

bool queue_place::learn_passed(const std::vector<std::string>& names) {
  bool me_too = false;
  const queue_entry* me = this->me();
  for (const auto& n : names) {
    if (me && n == passed_name(*me)) me_too = true;
    else passed_.insert(n);
  }
  return me_too;
}

std::vector<std::string> queue_place::passed_still_queued() {
  std::vector<std::string> out;
  if (passed_.empty()) return out;
  for (const auto& e : reader_.live())
    if (passed_.count(passed_name(e)) && out.size() < max_passed_over) out.push_back(passed_name(e));
  return out;
}

std::int64_t pass_over_clock::available(const std::vector<queue_entry>& ahead, std::uint32_t my_uid) {
  const std::int64_t now = sys::monotonic_ms();
  if (free_since_ < 0) free_since_ = now;
  const queue_entry& front = ahead.front();
  const std::string name = passed_name(front);
  if (name != front_) {
    front_ = name;
    front_since_ = now;
  }
  const std::int64_t since = front.uid == my_uid ? front_since_ : free_since_;
  const std::int64_t waited = now - since;
  return waited >= pass_over_grace_ms ? 0 : pass_over_grace_ms - waited;
}

void pass_over_clock::held() {
  free_since_ = -1;
  front_.clear();
  front_since_ = -1;
}

std::optional<yield_request> first_above(registry_reader& r, int slot, int priority, std::uint32_t holder_uid) {
  for (const auto& e : r.live()) {
    // In serving order: once one is not above, none after it is.
    if (e.rec.priority <= priority) break;
    if (e.uid != holder_uid && e.uid != 0) continue;
    if (accepts(e.rec, slot)) return yield_request{e.rec.pid, e.rec.label, e.rec.priority};
  }
  return std::nullopt;
}

std::optional<yield_request> first_waiting(registry_reader& r, int slot) {
  if (auto e = r.first([&](const queue_entry& c) { return accepts(c.rec, slot); }))
    return yield_request{e->rec.pid, e->rec.label, e->rec.priority};
  return std::nullopt;
}

}  // namespace offload_lock::detail
