// `offload-lock top`: the board and the recent history on a full terminal,
// redrawn as they change, with keys to leave (q), select a row, cancel a
// waiter of one's own (w) and ask a holder of one's own to make way (y).
#include "cli/top.hpp"

#include <algorithm>
#include <chrono>

#include "cli/exit_codes.hpp"
#include "cli/feed.hpp"
#include "cli/history.hpp"
#include "cli/history_view.hpp"
#include "cli/output.hpp"
#include "cli/top_actions.hpp"
#include "offload_lock/describe.hpp"
#include "posix/os.hpp"
#include "posix/screen.hpp"
#include "posix/signals.hpp"
#include "posix/ticker.hpp"

namespace offload_lock::cli {

namespace {

constexpr std::size_t kRecent = 50;

using clock = std::chrono::steady_clock;

std::size_t width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// `s` (escaped: no control characters) cut or padded to `cols` code points.
std::string fit(const std::string& s, int cols) {
  const auto want = static_cast<std::size_t>(std::max(0, cols));
  std::string out;
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size() && n <= want; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) != 0x80) {
      if (n == want) break;
      ++n;
    }
    out += s[i];
  }
  return out + std::string(want - std::min(want, n), ' ');
}

// Rows of cells, each column as wide as its widest cell.
std::vector<std::string> table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w;
  for (const auto& r : rows) {
    w.resize(std::max(w.size(), r.size()), 0);
    for (std::size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], width(r[i]));
  }
  std::vector<std::string> out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i)
      line += r[i] + (i + 1 < r.size() ? std::string(w[i] - width(r[i]) + 2, ' ') : std::string());
    out.push_back(line);
  }
  return out;
}

std::string dur(milliseconds d) { return describe_duration(d < milliseconds(0) ? milliseconds(0) : d); }

std::string holder_text(const info& i) {
  if (!i.present) return "free";
  if (!i.held) return status_line(i);  // "free (stale lock of ...)", escaped
  return printable(who(i));
}

}  // namespace

std::vector<key> parse_keys(const std::string& bytes) {
  std::vector<key> out;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    // Arrows: ESC [ A (or ESC O A, in application cursor mode).
    if (c == '\x1b' && i + 2 < bytes.size() && (bytes[i + 1] == '[' || bytes[i + 1] == 'O')) {
      const char d = bytes[i + 2];
      i += 2;
      if (d == 'A') out.push_back(key::up);
      else if (d == 'B') out.push_back(key::down);
      else out.push_back(key::other);
      continue;
    }
    switch (c) {
      case 'q': case 'Q': out.push_back(key::quit); break;
      case 'k': out.push_back(key::up); break;
      case 'j': out.push_back(key::down); break;
      case 'w': case 'W': out.push_back(key::cancel_wait); break;
      case 'y': case 'Y': out.push_back(key::ask_yield); break;
      case '\x0c': out.push_back(key::redraw); break;  // Ctrl-L
      default: out.push_back(key::other); break;
    }
  }
  return out;
}

std::vector<std::string> top_lines(const top_view& v, int cols, int rows) {
  const board& b = v.b;
  const milliseconds moved = v.moved;
  std::vector<std::string> lines;
  std::vector<int> marks;  // which line each selectable row is, by row index
  lines.push_back(printable("offload-lock top: " + v.path) + "   " + local_time(v.now_ms).substr(11));
  lines.push_back("q quit   up/down select   w cancel a wait of yours   y ask a holder of yours to make way");
  lines.emplace_back();
  std::vector<std::vector<std::string>> slots{{"GPU", "HOLDER", "HELD", "EXPECTED FREE", "MAX HOLD", "PRIORITY"}};
  for (std::size_t k = 0; k < b.slots.size(); ++k) {
    const info& i = b.slots[k];
    std::string expected = "-";
    if (i.held && i.expected.count() > 0) {
      const auto left = i.expected - i.held_for - moved;
      expected = left.count() >= 0 ? "in ~" + dur(left) : "overdue by " + dur(-left);
    }
    std::string max_hold = "-";
    if (i.held && i.max_hold_in) {
      const auto left = *i.max_hold_in - moved;
      max_hold = left.count() > 0 ? "in " + dur(left) : "passed";
    }
    std::string holder = holder_text(i) + idle_text(i, moved);
    if (i.held && i.yield_requested)
      holder += printable(", asked to make way for " + i.yield_requested->label);
    std::string held = i.held ? dur(i.held_for + moved) : "-";
    if (b.busy_by_lease(k)) {
      // The lock is free, but a gpulease holder has the GPU.
      const lease_info& l = b.gpulease->info;
      holder = printable("gpulease: " + (l.state == lease_state::unknown ? "cannot be judged (" + l.why + ")"
                                                                         : describe_lease_holder(l)));
      if (l.state == lease_state::held) held = dur(l.held_for + moved);
    }
    slots.push_back({"gpu" + std::to_string(v.slot_numbers[k]), holder, held, expected, max_hold,
                     i.held ? std::to_string(i.priority) : "-"});
  }
  auto t = table(slots);
  for (std::size_t r = 0; r < t.size(); ++r) {
    if (r > 0) marks.push_back(static_cast<int>(lines.size()));
    lines.push_back(t[r]);
  }
  lines.emplace_back();
  if (b.waiters.empty()) {
    lines.push_back("QUEUE: nobody waits");
  } else {
    std::vector<std::vector<std::string>> q{{"QUEUE", "WAITER", "PRIORITY", "WAITED", "ETA", "FOR"}};
    for (std::size_t k = 0; k < b.waiters.size(); ++k) {
      const waiter& w = b.waiters[k];
      const place& p = b.places[k];
      std::string eta = "-";
      if (p.eta) eta = "~" + dur(*p.eta - moved);
      std::string name = (w.label.empty() ? std::string("an unnamed process") : w.label) + " (pid " + std::to_string(w.pid) +
                         (w.host.empty() ? std::string() : ", host " + w.host) + ")";
      std::string slot = w.gpu >= 0 ? "gpu" + std::to_string(w.gpu) : w.gpus > 1 ? "any of " + std::to_string(w.gpus) : "gpu0";
      q.push_back({p.position > 0 ? "#" + std::to_string(p.position) : "-", printable(name), std::to_string(w.priority),
                   dur(w.waited + moved), eta, slot});
    }
    auto qt = table(q);
    for (std::size_t r = 0; r < qt.size(); ++r) {
      if (r > 0) marks.push_back(static_cast<int>(lines.size()));
      lines.push_back(qt[r]);
    }
  }
  lines.emplace_back();
  if (!v.history_kept) {
    lines.push_back("HISTORY: not kept (offload-lock history --start begins it)");
  } else {
    lines.push_back("HISTORY");
    // The last entries that fit, newest last, leaving the message line.
    const int room = std::max(0, rows - static_cast<int>(lines.size()) - 1);
    const std::size_t n = std::min(v.recent.size(), static_cast<std::size_t>(room));
    const bool multi = b.slots.size() > 1;
    for (std::size_t k = v.recent.size() - n; k < v.recent.size(); ++k)
      lines.push_back(local_time(v.recent[k].at).substr(11) + "  " + entry_text(v.recent[k], multi));
  }
  // Cut to the screen, the message on the last line.
  if (static_cast<int>(lines.size()) > rows - 1) lines.resize(static_cast<std::size_t>(std::max(0, rows - 1)));
  while (static_cast<int>(lines.size()) < rows - 1) lines.emplace_back();
  lines.push_back(printable(v.message));
  for (auto& l : lines) l = fit(l, cols);
  // The selected row in reverse video.
  if (v.selected >= 0 && v.selected < static_cast<int>(marks.size())) {
    const auto at = static_cast<std::size_t>(marks[static_cast<std::size_t>(v.selected)]);
    if (at < lines.size()) lines[at] = "\x1b[7m" + lines[at] + "\x1b[0m";
  }
  return lines;
}

int cmd_top(const args& a, const gpu_plan& gpus, const std::string& path) {
  os::full_screen screen;
  if (!screen.enter()) {
    say("top needs a terminal on its standard input and output (off one, status --watch shows the same)");
    return exit_usage;
  }
  // Signals end the view through the loop below, which gives the terminal
  // back; a resize only redraws.
  const int signals = os::catch_resize();
  os::ticker tick(1000);
  live_feed feed(a, gpus, path, kRecent);
  top_view v;
  v.path = path;
  top_actions actions(path, gpus);
  int ended_by = 0;
  bool look = true;
  std::string last;
  for (;;) {
    if (look) {
      v.looked_at = clock::now();
      feed.refresh();
      look = false;
      v.b = feed.now();
      v.slot_numbers.clear();
      for (std::size_t k = 0; k < v.b.slots.size(); ++k) v.slot_numbers.push_back(slot_of(a, k));
    }
    if (actions.update(v, v.message)) look = true;
    v.recent = feed.recent();
    v.history_kept = feed.history_kept();
    v.moved = std::chrono::duration_cast<milliseconds>(clock::now() - feed.looked_at());
    v.now_ms = now_epoch_ms();
    v.selected = std::clamp(v.selected, 0, std::max(0, static_cast<int>(v.b.slots.size() + v.b.waiters.size()) - 1));
    const auto lines = top_lines(v, screen.cols(), screen.rows());
    std::string frame = "\x1b[H";
    for (std::size_t k = 0; k < lines.size(); ++k) frame += lines[k] + (k + 1 < lines.size() ? "\r\n" : "");
    if (frame != last) screen.draw(frame);
    last = frame;

    // The clocks on the screen move only while someone holds or waits:
    // otherwise nothing wakes this process but a change.
    const bool moving = !v.b.waiters.empty() ||
                        std::any_of(v.b.slots.begin(), v.b.slots.end(), [](const info& i) { return i.held; });
    tick.run(moving);
    const bool changed = feed.wait({signals, os::full_screen::keys_fd(), tick.fd()});
    if (changed) look = true;
    (void)tick.take();
    while (auto s = os::next_caught()) {
      if (os::is_child_exit(*s)) continue;  // nvidia-smi's
      if (os::is_resize(s->signo)) {
        last.clear();  // redraw all of it at the new size
        screen.draw("\x1b[2J");
        continue;
      }
      ended_by = s->signo;
    }
    if (ended_by) break;
    bool quit = false;
    for (const key k : parse_keys(screen.read_keys())) {
      if (k == key::quit) quit = true;
      else if (k == key::up) v.selected = std::max(0, v.selected - 1);
      else if (k == key::down) ++v.selected;
      else if (k == key::redraw) last.clear();
      else if (k == key::cancel_wait || k == key::ask_yield || k == key::other)
        look = actions.key_pressed(k, v, v.message) || look;
    }
    if (quit) break;
  }
  actions.stop();
  screen.leave();
  return ended_by ? exit_signal_base + ended_by : exit_ok;
}

}  // namespace offload_lock::cli
