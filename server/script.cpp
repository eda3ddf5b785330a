// `ratekeeper script NAME`: prints one of the embedded Redis scripts (built from lua/*.lua,
// exactly as RedisStore sends them), e.g. for `redis-cli -x SCRIPT LOAD` or redis-benchmark;
// `--list` prints their names, `--library` the library of Redis Functions holding them all.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "commands.hpp"
#include "store/redis/lua_scripts.hpp"

namespace ratekeeper::server {
namespace {

struct ScriptOptions {
  std::string name;
  bool list = false;
  bool library = false;
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
  if (o.library) {
    const auto library = store::lua_library();
    std::fwrite(library.source.data(), 1, library.source.size(), stdout);
    return 0;
  }
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
  sub->add_flag("--library", o->library,
                "Print the library of Redis Functions holding every script (for redis-cli -x FUNCTION LOAD)");
  sub->callback([o] {
    const int rc = run_script(*o);
    if (rc != 0) set_exit_code(rc);
  });
}

}  // namespace ratekeeper::server
