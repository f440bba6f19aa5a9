// The offload-lock command: parsing and dispatch.
// Parses the command line, resolves the lock path and the GPU slots once,
// and runs the command (cli/commands.hpp). Exit codes: cli/exit_codes.hpp.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/doctor.hpp"
#include "cli/exit_codes.hpp"
#include "cli/history.hpp"
#include "cli/serve.hpp"
#include "cli/top.hpp"
#include "cli/gpus.hpp"
#include "cli/output.hpp"
#include "posix/os.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/path.hpp"

namespace ol = offload_lock;
using namespace offload_lock::cli;

int main(int argc, char** argv) {
  os::open_missing_standard_fds();
  std::vector<std::string> argl(argv + 1, argv + argc);
  args a;
  if (auto e = parse(argl, a)) {
    say(*e);
    return exit_usage;
  }
  if (a.help) {
    std::cout << (a.command.empty() ? usage() : command_help(a.command));
    return exit_ok;
  }
  if (a.version) {
    std::cout << "offload-lock " << ol::version() << "\n";
    return exit_ok;
  }
  const ol::path_resolution resolved = ol::resolve_path(a.lock_path);
  const std::string& path = resolved.path;
  // The D7 split: Node's rule and ours read $TMP and $TEMP, Go's does not.
  if (resolved.go_disagrees() && !a.quiet && (a.command == "run" || a.command == "acquire" || a.command == "status"))
    say("note: Go readers (gpulock) look at " + resolved.go_path + ", not " + path +
        ": Go reads only $TMPDIR; set TMPDIR or GPU_LOCK for both (offload-lock path --explain)");
  try {
    // Once per command, before any command catches signals: --gpus auto may
    // run nvidia-smi.
    std::string usage_error;
    const gpu_plan gpus = plan_gpus(a, usage_error);
    if (!usage_error.empty()) {
      say(usage_error);
      return exit_usage;
    }
    if (a.command == "path") return cmd_path(a);
    if (a.command == "status") return cmd_status(a, gpus, path);
    if (a.command == "acquire") return cmd_acquire(a, gpus, path);
    if (a.command == "release") return cmd_release(a, gpus, path);
    if (a.command == "run") return cmd_run(a, gpus, path);
    if (a.command == "hold") return cmd_hold(a, gpus, path);
    if (a.command == "wait-free") return cmd_wait_free(a, path);
    if (a.command == "doctor") return cmd_doctor(a);
    if (a.command == "history") return cmd_history(a, path);
    if (a.command == "top") return cmd_top(a, gpus, path);
    if (a.command == "serve") return cmd_serve(a, gpus, path);
  } catch (const std::exception& ex) {
    say(std::string("internal error: ") + ex.what());
    return exit_system;
  }
  say("unknown command '" + a.command + "'");
  return exit_usage;
}
