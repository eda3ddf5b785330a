#pragma once
// Subcommands of the `ratekeeper` executable. Each registers itself on the CLI11 app and
// runs from its callback; exit_code() is what main returns.

namespace CLI {
class App;
}

namespace ratekeeper::server {

void register_commands(CLI::App& app);
int exit_code();
void set_exit_code(int code);

void register_bench_command(CLI::App& app);   // bench/bench_command.cpp
void register_check_config_command(CLI::App& app);  // server/check_config.cpp
void register_script_command(CLI::App& app);  // server/script.cpp
void register_serve_command(CLI::App& app);   // server/serve.cpp

}  // namespace ratekeeper::server
