// What the parts of section 9 share (goals_bench.cpp, goals_trust.cpp).
#ifndef OFFLOAD_LOCK_BENCH_GOALS_PARTS_HPP
#define OFFLOAD_LOCK_BENCH_GOALS_PARTS_HPP

#include <optional>
#include <string>

#include "goals_bench.hpp"
#include "util.hpp"

namespace bench::goals {

// The goals as printed at the end of the section, and their JSON.
struct goal_list {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  std::string text;
  // held: nullopt when not measured (then `figure` says why).
  void add(const std::string& goal, std::optional<bool> held, const std::string& figure);
};

// Reads lines of `c` until one starts with `prefix` and returns the rest;
// an "e ..." line of the child, its exit or the timeout throws, naming `what`.
std::string expect(child& c, const std::string& prefix, int timeout_ms, const std::string& what);

// A new directory `name` in the section's directory.
std::string fresh_dir(const setup& s, const std::string& name);

// Issue 23's rows: a waiter on a free lock while another user churns the
// queue (`rounds` acquisitions), and `junk_files` junk files of another
// user in the queue against none (`junk_ops` acquisitions of each).
void trust_rows(const setup& s, int rounds, int junk_files, int junk_ops, const printer& print,
                nlohmann::ordered_json& out, goal_list& g);

}  // namespace bench::goals

#endif  // OFFLOAD_LOCK_BENCH_GOALS_PARTS_HPP
