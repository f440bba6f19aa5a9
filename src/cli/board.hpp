// The status board: who holds each slot of the lock and who waits, read in
// one look, and its text, JSON and Prometheus forms. `status` prints it,
// `status --watch` and `top` redraw it, `serve` sends it.
#ifndef OFFLOAD_LOCK_SRC_CLI_BOARD_HPP
#define OFFLOAD_LOCK_SRC_CLI_BOARD_HPP

#include <optional>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/gpus.hpp"
#include "cli/lease_view.hpp"
#include "cli/output.hpp"
#include "offload_lock/lock.hpp"

namespace offload_lock::cli {

// A waiter's place in its slot's queue: position 1 is next; the ETA is the
// holder's expected free time plus the declared durations ahead of it,
// unknown as soon as one of them is undeclared.
struct place {
  int position = 0;
  std::optional<milliseconds> eta;
};

struct board {
  std::vector<info> slots;
  std::vector<std::optional<gpu_device>> devices;  // each slot's GPU, as nvidia-smi reported it
  std::vector<waiter> waiters;
  std::vector<place> places;  // one per waiter
  std::string problem;
  bool multi = false;
  // Per slot: whether it decides the exit status. Slot 0, and any slot the
  // command was asked about, always; a slot found beside the lock only when
  // it is a lock (another user's `touch <lock>.gpu1` is not a free GPU).
  std::vector<bool> counts;
  // The gpulease lease of current upstream runners, where a root exists
  // (nullopt elsewhere). Where offload-lock's acquisitions take it too, it
  // keeps slot 0's GPU busy while it is held, whatever the lock says.
  std::optional<lease_board> gpulease;
  // Per slot: whether the GPU is busy, by its lock or (slot 0) the lease.
  bool busy(std::size_t k) const;
  // Per slot: the lease, not the lock, keeps it busy.
  bool busy_by_lease(std::size_t k) const;
  std::vector<int> slot_numbers;  // each slot's number (slot_of)
};

// The slot shown at `index` (--gpu K shows K alone).
int slot_of(const args& a, std::size_t index);

// One look at the lock at `path`: its slots (those of `gpus`, else slot 0
// and every slot that exists or is waited for) and its queue. `usage`:
// what nvidia-smi last said about the GPUs (nullopt: nothing). Never
// blocks.
board look(const args& a, const gpu_plan& gpus, const std::string& path,
           const std::optional<std::vector<gpu_device>>& usage);

// The board `elapsed` later, by time alone: how long each holder has held
// the lock and each waiter waited grow by it, expected free times and ETAs
// shrink by it (never below 0). What a view shows between two looks.
board aged(board b, milliseconds elapsed);

// ", expected free in ~12m", ", overdue by 3m", or nothing when undeclared.
std::string expectation(const info& i);
// ", max hold in 12m", ", max hold passed 3m ago", or nothing when the
// holder declared none.
std::string max_hold_text(const info& i);
// ", idle for 12m" (the site policy's idle rule marked the holder idle),
// or nothing; `moved` is how long ago `i` was looked at.
std::string idle_text(const info& i, milliseconds moved);
// ", yield requested by llm-eval (priority 10)", escaped; nothing when
// nobody asked.
std::string yield_text(const info& i);
// "waiting: train (pid 373, host vm) for 4s, #1, ETA ~19m52s" (not escaped).
std::string waiter_line(const waiter& w, const place& p, bool multi);
// The board as `status` prints it, escaped, one line per slot and waiter.
std::string render(const board& b, const args& a);
// The `--json status` object.
ojson board_json(const board& b, const args& a);
// The gauges of `status --prometheus` (offload_lock_held, ...).
std::string prometheus(const board& b, const args& a, const std::string& path);
// What a watcher of the board must see again: the holders and the queue,
// without the durations that change every second.
std::string shape_of(const board& b);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_BOARD_HPP
