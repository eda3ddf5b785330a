#include "commands.hpp"

#include <CLI/CLI.hpp>

namespace ratekeeper::server {
namespace {
int g_exit_code = 0;
}  // namespace

int exit_code() { return g_exit_code; }
void set_exit_code(int code) { g_exit_code = code; }

void register_commands(CLI::App& app) {
  (void)app;
  register_bench_command(app);
  register_check_config_command(app);
  register_script_command(app);
  register_serve_command(app);
}

}  // namespace ratekeeper::server
