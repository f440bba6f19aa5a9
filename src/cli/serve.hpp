// `offload-lock serve`: a read-only web view of the lock (page, JSON,
// Prometheus exposition, Server-Sent Events).
#ifndef OFFLOAD_LOCK_SRC_CLI_SERVE_HPP
#define OFFLOAD_LOCK_SRC_CLI_SERVE_HPP

#include <string>

#include "cli/args.hpp"
#include "cli/gpus.hpp"

namespace offload_lock::cli {

// "ADDRESS:PORT", "[IPv6]:PORT" or "PORT" (on 127.0.0.1).
bool parse_listen(const std::string& text, std::string& host, int& port);

// Serves until SIGINT, SIGTERM or SIGHUP: exit 128+N. 2 for a --listen
// that does not parse, or is not a loopback address without
// --allow-remote; 4 when it cannot listen.
int cmd_serve(const args& a, const gpu_plan& gpus, const std::string& path);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_SERVE_HPP
