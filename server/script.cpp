// `ratekeeper script NAME`: prints one of the embedded Redis scripts (built from lua/*.lua,
// exactly as RedisStore sends them), e.g. for `redis-cli -x SCRIPT LOAD` or redis-benchmark;
// `--list` prints their names.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "commands.hpp"
#include "ratekeeper/store/lua_scripts.hpp"

namespace ratekeeper::server {
namespace {

struct ScriptOptions {
  std::string name;
  bool list = false;
};

std::string script_names() {
  std::string names;
  for (const auto& s : store::lua_scripts()) {
    if (!names.empty()) names += ", ";
    names += s.name;
  }
  return names.empty() ? "none" : names;
}

int run_script(const ScriptOptions& o) {
  if (o.list) {
    for (const auto& s : store::lua_scripts()) {
      std::fwrite(s.name.data(), 1, s.name.size(), stdout);
      std::fputc('\n', stdout);
    }
    return 0;
  }
  if (o.name.empty()) {
    std::fprintf(stderr, "ratekeeper script: a script name is required (%s)\n", script_names().c_str());
    return 2;
  }
  auto source = store::lua_script(o.name);
  if (!source) {
    std::fprintf(stderr, "ratekeeper script: unknown script '%s' (%s)\n", o.name.c_str(),
                 script_names().c_str());
    return 2;
  }
  std::fwrite(source->data(), 1, source->size(), stdout);
  return 0;
}

}  // namespace

void register_script_command(CLI::App& app) {
  auto o = std::make_shared<ScriptOptions>();
  CLI::App* sub = app.add_subcommand("script", "Print an embedded Lua script (e.g. token_bucket)");
  sub->add_option("name", o->name, "Script name, e.g. token_bucket (see --list)");
  sub->add_flag("--list", o->list, "Print the names of the embedded scripts");
  sub->callback([o] {
    const int rc = run_script(*o);
    if (rc != 0) set_exit_code(rc);
  });
}

}  // namespace ratekeeper::server
