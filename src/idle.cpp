// Idle holders: one thread per process looks at the GPUs of the locks it
// holds under an idle rule. See idle.hpp.
#include "idle.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "history.hpp"
#include "meta.hpp"
#include "offload_lock/gpus.hpp"
#include "os/clock.hpp"
#include "os/files.hpp"
#include "os/process.hpp"

namespace offload_lock::detail {

namespace {

class idle_service {
 public:
  static idle_service& get() {
    std::lock_guard<std::mutex> g(instance_mu());
    // Never freed: it lives as long as the process. A forked child (which
    // has no thread of it) makes its own.
    if (!instance() || instance()->pid_ != sys::self_pid()) instance() = new idle_service();
    return *instance();
  }

  void add(const std::shared_ptr<held_state>& s, const std::string& lock_path) {
    // A descriptor of its own on the claim's meta.json: marked through it
    // while held, whatever the holder's own descriptors do meanwhile, and
    // never the file of a later claim at the same path.
    auto f = sys::open_read(s->dir.get(), meta_file_name, s->t.path + "/" + meta_file_name);
    if (!f) return;  // no mark can be made: not watched
    std::lock_guard<std::mutex> g(mu_);
    watched w;
    w.s = s;
    w.meta = std::move(*f);
    w.lock_path = lock_path;
    w.holders = {s->owner_pid, s->pid};
    entries_.push_back(std::move(w));
    if (!started_) {
      std::thread([this] { run(); }).detach();
      started_ = true;
    }
    more_.notify_one();
  }

 private:
  struct watched {
    std::weak_ptr<held_state> s;
    sys::fd meta;
    std::string lock_path;
    std::vector<std::int64_t> holders;
    std::int64_t idle_from = 0;   // monotonic ms the GPU first showed it idle; 0: busy
    std::int64_t idle_since = 0;  // epoch ms of the same
    bool marked = false;
  };

  static idle_service*& instance() {
    static idle_service* p = nullptr;
    return p;
  }
  static std::mutex& instance_mu() {
    static std::mutex m;
    return m;
  }

  // The history's entry of a change: "idle" when it became idle, "busy"
  // when it stopped being.
  static void record(const watched& w, const held_state& s, const char* outcome) {
    history_entry e;
    e.event = "idle";
    e.outcome = outcome;
    e.token = s.token;
    history::record(w.lock_path, e, s.meta);
  }

  // One look at `gpus` for `w`: marks or unmarks it. nullopt gpus (no
  // nvidia-smi, or it failed) knows nothing: not idle.
  static void judge(watched& w, held_state& s, const std::optional<std::vector<gpu_device>>& gpus) {
    bool idle = false;
    if (gpus)
      for (const auto& d : *gpus)
        if (d.index == s.slot) idle = shows_idle(d, w.holders, s.idle_percent);
    const std::int64_t now = sys::monotonic_ms();
    if (!idle) {
      w.idle_from = 0;
      if (!w.marked) return;
      w.marked = false;
      (void)sys::remove_attr(w.meta.get(), idle_attr, s.t.path);
      record(w, s, "busy");
      return;
    }
    if (w.idle_from == 0) {
      w.idle_from = now;
      w.idle_since = sys::now_ms();
    }
    if (w.marked || now - w.idle_from < s.idle_after_ms) return;
    w.marked = true;
    (void)sys::set_attr(w.meta.get(), idle_attr, std::to_string(w.idle_since), s.t.path);
    record(w, s, "idle");
    if (s.idle_yield) ask_idle_yield(s);
  }

  void run() {
    std::unique_lock<std::mutex> g(mu_);
    for (;;) {
      // Holds that ended leave (the mark goes with their meta.json).
      entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                    [](const watched& w) {
                                      auto s = w.s.lock();
                                      return !s || !s->held_on;
                                    }),
                     entries_.end());
      if (entries_.empty()) {
        more_.wait(g);
        continue;
      }
      std::int64_t every = 30'000;
      for (const auto& w : entries_)
        if (auto s = w.s.lock()) every = std::min(every, idle_sample_ms(s->idle_after_ms));
      // nvidia-smi runs without the mutex: an acquisition meanwhile only adds.
      g.unlock();
      const auto gpus = gpu_usage();
      g.lock();
      for (auto& w : entries_)
        if (auto s = w.s.lock(); s && s->held_on) judge(w, *s, gpus);
      more_.wait_for(g, std::chrono::milliseconds(every));
    }
  }

  std::mutex mu_;
  std::condition_variable more_;
  std::vector<watched> entries_;
  bool started_ = false;
  const std::int64_t pid_ = sys::self_pid();
};

}  // namespace

std::optional<std::int64_t> parse_idle_mark(const std::string& value) {
  if (value.empty() || value.size() > 15 || value.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoll(value);
}

std::int64_t idle_sample_ms(std::int64_t idle_after_ms) {
  return std::clamp<std::int64_t>(idle_after_ms / 4, 250, 30'000);
}

void watch_idle(const std::shared_ptr<held_state>& s, const std::string& lock_path) {
  idle_service::get().add(s, lock_path);
}

}  // namespace offload_lock::detail
