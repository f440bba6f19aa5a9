// `offload-lock serve`: the lock's board and history over HTTP, read-only.
// One thread watches the lock (the live feed, as `top` does), keeps the
// board it last saw and publishes each change to the page's event stream;
// the server's thread answers the requests from that board, aged to the
// moment of the request (only the durations can have moved since: the
// watching thread looks again at every change), so an answer costs no look
// at the lock however many clients ask; and /status.json and /metrics keep
// their last answer for as long as the board and its age in whole
// milliseconds are the same, so most answers under load cost no JSON either.
#include "cli/serve.hpp"

#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <thread>

#include "cli/exit_codes.hpp"
#include "cli/feed.hpp"
#include "cli/history.hpp"
#include "cli/history_view.hpp"
#include "cli/http_server.hpp"
#include "cli/output.hpp"
#include "cli/serve_page.hpp"
#include "posix/signals.hpp"
#include "posix/ticker.hpp"

namespace offload_lock::cli {

namespace {

constexpr std::size_t kRecent = 50;

// What the server's thread reads and the watching thread writes.
struct shared_view {
  std::mutex mu;
  std::optional<std::vector<gpu_device>> usage;  // the GPUs, as nvidia-smi last said
  std::vector<std::string> tokens;               // the locks held, as last seen
  std::string history_metrics, history_json;
  // The board as the watching thread last saw it, and when: what a request
  // answers, aged by the time since (the watching thread looks again on
  // every change, so nothing but the durations can have moved).
  std::optional<board> seen;
  std::chrono::steady_clock::time_point seen_at;
  std::uint64_t seen_version = 0;  // bumped with each new `seen`
  std::vector<history_entry> recent;
  bool history_kept = false;
};

// The summed history, for /metrics and /history.json.
void sum_history(shared_view& v, const std::string& path) {
  std::vector<std::string> tokens;
  {
    std::lock_guard<std::mutex> g(v.mu);
    tokens = v.tokens;
  }
  const summary s = summarize(path, 0, grouping::gpu, kRecent, tokens, now_epoch_ms());
  std::string metrics = history_metrics(s, path), json = dump(summary_json(s, path, 0, "gpu"));
  std::lock_guard<std::mutex> g(v.mu);
  v.history_metrics = std::move(metrics);
  v.history_json = std::move(json);
}

// One "board" event: the board, and the history's last entries (also as
// the lines top shows).
std::string event_json(const board& b, const std::vector<history_entry>& recent, bool kept, const args& a,
                       const std::string& path) {
  ojson j;
  j["lock"] = path;
  j["now"] = now_epoch_ms();
  j["status"] = board_json(b, a);
  ojson text = ojson::array(), entries = ojson::array();
  const bool multi = b.slots.size() > 1;
  for (const auto& e : recent) {
    text.push_back(local_time(e.at) + "  " + entry_text(e, multi));
    entries.push_back(entry_json(e));
  }
  j["recentText"] = std::move(text);
  j["recent"] = std::move(entries);
  j["historyKept"] = kept;
  return dump(j);
}

}  // namespace

bool parse_listen(const std::string& text, std::string& host, int& port) {
  std::string p = text;
  host = "127.0.0.1";
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') return false;
    host = text.substr(1, close - 1);
    p = text.substr(close + 2);
  } else if (auto colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    p = text.substr(colon + 1);
  }
  if (host.empty() || p.empty() || p.size() > 5) return false;
  for (char c : p)
    if (c < '0' || c > '9') return false;
  port = std::stoi(p);
  return port <= 65535;
}

int cmd_serve(const args& a, const gpu_plan& gpus, const std::string& path) {
  std::string host;
  int port = 0;
  if (!parse_listen(a.listen, host, port)) {
    say("invalid address for --listen: '" + a.listen + "' (ADDRESS:PORT, such as 127.0.0.1:9479 or [::1]:9479)");
    return exit_usage;
  }
  if (!is_loopback_address(host) && !a.allow_remote) {
    say(a.listen + " is not a loopback address: everyone who can reach it would see who uses the GPU, and "
                   "nobody is asked who they are; add --allow-remote to listen there");
    return exit_usage;
  }
  const int signals = os::catch_signals();
  os::ignore_broken_pipes();
  shared_view view;
  http_routes routes;
  routes.page = [] { return std::string(serve_page_html()); };
  routes.script = [] { return std::string(serve_page_script()); };
  routes.style = [] { return std::string(serve_page_style()); };
  auto fresh = [&] {
    std::optional<std::vector<gpu_device>> usage;
    {
      std::lock_guard<std::mutex> g(view.mu);
      if (view.seen)
        return aged(*view.seen, std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - view.seen_at));
      usage = view.usage;
    }
    return look(a, gpus, path, usage);  // before the first look of the watching thread
  };
  // An answer depends on the board seen and on how many whole milliseconds
  // it has aged by (every duration in it is in ms): the same pair gives the
  // same bytes, so each is made once and kept until either moves. Under
  // many clients most requests then cost no JSON at all. (The server's one
  // thread alone reads and writes these.)
  using answer_key = std::pair<std::uint64_t, std::int64_t>;  // the board's version, its age in ms
  struct answer_cache {
    std::optional<answer_key> key;
    std::string body;
    bool hit(std::uint64_t v, std::int64_t ms) const { return key && key->first == v && key->second == ms; }
    void keep(const answer_key& k, const std::string& b) {
      key = k;
      body = b;
    }
  };
  answer_cache status_cache, metrics_cache;
  // The cached answer when it is still the one to give, else the board to
  // make it from (aged to now) and the key to keep it under.
  struct made {
    std::optional<std::string> cached;
    board b;
    std::optional<answer_key> key;  // none before the first look
  };
  auto answer_from = [&](const answer_cache& cache) {
    made m;
    {
      std::lock_guard<std::mutex> g(view.mu);
      if (view.seen) {
        const auto ms = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - view.seen_at);
        if (cache.hit(view.seen_version, ms.count())) {
          m.cached = cache.body;
          return m;
        }
        m.key = std::make_pair(view.seen_version, static_cast<std::int64_t>(ms.count()));
        m.b = aged(*view.seen, ms);
        return m;
      }
    }
    m.b = fresh();
    return m;
  };
  routes.status_json = [&] {
    made m = answer_from(status_cache);
    if (m.cached) return *m.cached;
    ojson j = board_json(m.b, a);
    if (!m.b.problem.empty()) j["error"] = m.b.problem;
    std::string body = dump(j);
    if (m.key) status_cache.keep(*m.key, body);
    return body;
  };
  routes.metrics = [&] {
    made m = answer_from(metrics_cache);
    std::string gauges;
    if (m.cached) {
      gauges = std::move(*m.cached);
    } else {
      gauges = prometheus(m.b, a, path);
      if (m.key) metrics_cache.keep(*m.key, gauges);
    }
    std::lock_guard<std::mutex> g(view.mu);
    return gauges + view.history_metrics;
  };
  // A page that connects gets the board as of now, its times carried
  // forward like every answer's; then each change as it happens.
  routes.first_event = [&] {
    const board b = fresh();
    std::lock_guard<std::mutex> g(view.mu);
    return event_json(b, view.recent, view.history_kept, a, path);
  };
  routes.history_json = [&] {
    std::lock_guard<std::mutex> g(view.mu);
    return view.history_json;
  };
  http_limits limits;
  limits.check_host = !a.allow_remote;
  std::string error;
  auto server = http_server::listen(host, port, routes, limits, error);
  if (!server) {
    say(error);
    return exit_system;
  }
  // Summed once before the address is told, so the first /metrics and
  // /history.json already carry the history (the watching thread keeps
  // them up to date from then on).
  sum_history(view, path);
  std::cout << printable("serving " + path + " on http://" + server->where() + "/") << std::endl;

  // The watching thread: the board on every change, the history's sums
  // when its files changed.
  os::wake_pipe stop_watching;
  std::atomic<bool> stopping{false};
  int ended_by = 0;
  std::thread watcher([&] {
    live_feed feed(a, gpus, path, kRecent);
    std::string last_shape;
    std::uint64_t summed = ~std::uint64_t{0};
    bool look = true;
    for (;;) {
      if (look) feed.refresh();
      look = false;
      {
        std::lock_guard<std::mutex> g(view.mu);
        view.seen = feed.now();
        view.seen_at = feed.looked_at();
        ++view.seen_version;
        view.recent = feed.recent();
        view.history_kept = feed.history_kept();
        view.usage = feed.usage();
        view.tokens.clear();
        for (const auto& i : feed.now().slots)
          if (i.held && !i.token.empty()) view.tokens.push_back(i.token);
      }
      if (feed.history_generation() != summed) {
        summed = feed.history_generation();
        sum_history(view, path);
      }
      const std::string shape = feed.shape();
      if (shape != last_shape)
        server->publish(event_json(feed.now(), feed.recent(), feed.history_kept(), a, path));
      last_shape = shape;
      if (feed.wait({signals, stop_watching.read_fd()})) {
        look = true;
        continue;
      }
      bool stop = false;
      while (auto s = os::next_caught()) {
        if (os::is_child_exit(*s)) continue;  // nvidia-smi's
        ended_by = s->signo;
        stop = true;
      }
      if (stop || stopping) break;
    }
    server->stop();
  });
  server->run();
  stopping = true;
  stop_watching.poke();
  watcher.join();
  return ended_by ? exit_signal_base + ended_by : exit_ok;
}

}  // namespace offload_lock::cli
