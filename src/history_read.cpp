// Reading the lock's history (include/offload_lock/history.hpp): which
// files are whose, and which of their lines are entries to trust.
#include <algorithm>
#include <map>
#include <string_view>

#include "history_line.hpp"
#include "offload_lock/history.hpp"
#include "os/files.hpp"
#include "os/logs.hpp"

namespace offload_lock {

namespace {

namespace sys = detail::sys;

// No writer lets a file grow past the rotation size (a few concurrent
// writers may each add a line beyond it): a larger file is junk, read only
// this far.
constexpr std::size_t kFileCap = std::size_t{32} * 1024 * 1024;
constexpr std::size_t kMaxNames = 4096;

// "<uid>.jsonl" (older: false) or "<uid>.jsonl.1" (older: true).
bool author_file(const std::string& n, std::uint32_t& uid, bool& older) {
  std::size_t digits = 0;
  while (digits < n.size() && n[digits] >= '0' && n[digits] <= '9') ++digits;
  if (digits == 0 || digits > 10 || (digits > 1 && n[0] == '0')) return false;
  const std::string rest = n.substr(digits);
  if (rest == ".jsonl") older = false;
  else if (rest == ".jsonl.1") older = true;
  else return false;
  const unsigned long long v = std::stoull(n.substr(0, digits));
  if (v > 0xffffffffULL) return false;
  uid = static_cast<std::uint32_t>(v);
  return true;
}

// The lines of one file's bytes. `cut_front`: the bytes start inside the
// file (a tail), so the first line is a piece of one and is left out.
// The last piece without its newline is an append still being written (or
// one cut short by a crash): left out, not counted.
void read_lines(const std::string& bytes, bool cut_front, std::uint32_t owner, std::int64_t since,
                const std::function<void(const history_entry&)>& visit, history_read& out, history_entry& e) {
  std::string_view all(bytes);
  std::size_t from = 0;
  if (cut_front) {
    const auto nl = all.find('\n');
    if (nl == std::string_view::npos) return;
    from = nl + 1;
  }
  while (from < all.size()) {
    const auto nl = all.find('\n', from);
    if (nl == std::string_view::npos) break;
    const std::string_view line = all.substr(from, nl - from);
    from = nl + 1;
    if (line.empty()) continue;
    if (since > 0)
      if (auto at = detail::history_line_at(line); at && *at < since) continue;
    if (!detail::parse_history_line(line, e)) {
      ++out.malformed;
      continue;
    }
    // A file speaks for its owner only.
    if (e.uid != owner) {
      ++out.untrusted;
      continue;
    }
    if (e.at < since) continue;
    visit(e);
  }
}

}  // namespace

history_read read_history(const std::string& path, std::int64_t since_ms,
                          const std::function<void(const history_entry&)>& visit, std::size_t tail_bytes) {
  history_read out;
  const std::string dir_path = history_dir(path);
  auto dir = sys::open_dir(sys::cwd, dir_path, true, dir_path);
  if (!dir) {
    const auto code = dir.error().code();
    if (code == std::errc::no_such_file_or_directory) return out;
    out.kept = code != std::errc::not_a_directory && code != std::errc::too_many_symbolic_link_levels;
    out.problem = dir.error().message();
    return out;
  }
  out.kept = true;
  auto names = sys::list_dir(dir->get(), dir_path);
  if (!names) {
    out.problem = names.error().message();
    return out;
  }
  // Author by author (in uid order), the older half of each first.
  std::map<std::uint32_t, std::pair<bool, bool>> authors;  // uid -> (has .1, has current)
  std::size_t looked = 0;
  for (const auto& n : *names) {
    if (++looked > kMaxNames) break;
    std::uint32_t uid = 0;
    bool older = false;
    if (!author_file(n, uid, older)) {
      ++out.foreign_files;
      continue;
    }
    (older ? authors[uid].first : authors[uid].second) = true;
  }
  history_entry e;
  for (const auto& [uid, halves] : authors) {
    for (const bool older : {true, false}) {
      if (!(older ? halves.first : halves.second)) continue;
      const std::string name = std::to_string(uid) + (older ? ".jsonl.1" : ".jsonl");
      const std::string shown = dir_path + "/" + name;
      auto f = tail_bytes > 0 ? sys::read_tail_at(dir->get(), name, std::min(tail_bytes, kFileCap), shown)
                              : sys::read_file_at(dir->get(), name, kFileCap, shown);
      // Not a regular file (a symlink, a FIFO), or a file whose owner is
      // not the uid it is named for: nobody's word.
      if (!f || f->st.uid != uid) {
        ++out.foreign_files;
        continue;
      }
      ++out.files;
      bool cut_front = false;
      if (f->truncated) {
        // A tail starts inside the file by design; a whole read stops at the cap.
        const auto size = static_cast<std::size_t>(std::max<std::int64_t>(0, f->st.size));
        if (tail_bytes > 0) cut_front = true;
        else out.unread_bytes += size > kFileCap ? size - kFileCap : 0;
      }
      read_lines(f->bytes, cut_front, uid, since_ms, visit, out, e);
    }
  }
  return out;
}

}  // namespace offload_lock
