// The `ratekeeper` executable: one binary, one subcommand per job.

#include <CLI/CLI.hpp>

#include <cstdio>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"ratekeeper: a distributed rate limiter (token bucket, sliding and fixed windows) "
               "on Redis or in memory"};
  app.set_version_flag("--version", std::string("ratekeeper ") + RATEKEEPER_VERSION);
  app.require_subcommand(0, 1);
  ratekeeper::server::register_commands(app);
  CLI11_PARSE(app, argc, argv);
  if (app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stdout);
  }
  return ratekeeper::server::exit_code();
}
