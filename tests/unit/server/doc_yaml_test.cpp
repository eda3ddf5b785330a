// Every fenced YAML block of README.md and docs/**/*.md loads as its text says, so that no
// documented example drifts from what the loaders accept. An HTML comment on the line right
// before the block says what the block is:
//
//   <!-- yaml: config -->                        a whole configuration file (as `ratekeeper
//                                                check-config` and `serve` load it)
//   <!-- yaml: domain -->                        a whole domain file of the gRPC rate limit
//                                                service (envoyproxy/ratelimit's format)
//   <!-- yaml: config fragment of rules -->      a part of a configuration: the value of the
//   <!-- yaml: domain fragment of descriptors -->  field named (dotted for nested fields); a
//                                                mapping given for `rules` or `descriptors` is
//                                                one item of that list
//   <!-- yaml: config error: FIELD: REASON -->   refused, naming FIELD, with REASON in the
//   <!-- yaml: domain error: FIELD: REASON -->   message (FIELD may be empty: the document)
//   <!-- yaml: not ratekeeper's: WHAT -->        another program's YAML (Envoy's): only
//                                                checked to be YAML
//
// A config or domain marker may end with `; files: PATH as KIND[, PATH as KIND]`: files the
// block names that exist only where it is deployed (KIND: ca, cert or key). The block is
// loaded with each PATH replaced by a test file of that kind (tests/support/tls_certs.hpp).
//
// A ```yaml or ```yml block without such a comment, a comment the test does not know, and a
// fence without a language fail the test.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "config.hpp"
#include "rls_config.hpp"
#include "support/doc_blocks.hpp"
#include "support/tls_certs.hpp"

namespace ratekeeper::server {
namespace {

namespace fs = std::filesystem;
using ratekeeper::testing::FencedBlock;

const fs::path kRoot = RATEKEEPER_SOURCE_DIR;

std::vector<fs::path> documents() {
  std::vector<fs::path> out{kRoot / "README.md"};
  for (const auto& entry : fs::recursive_directory_iterator(kRoot / "docs")) {
    if (entry.is_regular_file() && entry.path().extension() == ".md") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

enum class Loader { config, domain };

struct Marker {
  enum class Kind { whole, fragment, error, foreign } kind = Kind::whole;
  Loader loader = Loader::config;
  std::string field;   // fragment: where it goes; error: the field named
  std::string reason;  // error
  std::vector<std::pair<std::string, std::string>> files;  // (path in the block, kind)
};

// "PATH as KIND, PATH as KIND"; false when malformed.
bool parse_files(std::string_view text, Marker& m) {
  while (!text.empty()) {
    const auto comma = text.find(", ");
    const std::string_view item = text.substr(0, comma);
    const auto as = item.rfind(" as ");
    if (as == std::string_view::npos || as == 0) return false;
    const std::string kind(item.substr(as + 4));
    if (kind != "ca" && kind != "cert" && kind != "key") return false;
    m.files.emplace_back(std::string(item.substr(0, as)), kind);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 2);
  }
  return !m.files.empty();
}

std::optional<Marker> parse_marker(std::string_view text) {
  constexpr std::string_view kPrefix = "yaml: ";
  if (!text.starts_with(kPrefix)) return std::nullopt;
  text.remove_prefix(kPrefix.size());
  Marker m;
  if (const auto files = text.find("; files: "); files != std::string_view::npos) {
    if (!parse_files(text.substr(files + 9), m)) return std::nullopt;
    text = text.substr(0, files);
  }
  if (text.starts_with("not ratekeeper's: ") && text.size() > 18) {
    m.kind = Marker::Kind::foreign;
    return m;
  }
  if (text.starts_with("config")) {
    m.loader = Loader::config;
    text.remove_prefix(6);
  } else if (text.starts_with("domain")) {
    m.loader = Loader::domain;
    text.remove_prefix(6);
  } else {
    return std::nullopt;
  }
  if (text.empty()) return m;
  if (text.starts_with(" fragment of ") && text.size() > 13) {
    m.kind = Marker::Kind::fragment;
    m.field = std::string(text.substr(13));
    return m;
  }
  if (text.starts_with(" error: ")) {
    text.remove_prefix(8);
    const auto colon = text.find(": ");
    if (colon == std::string_view::npos || colon + 2 >= text.size()) return std::nullopt;
    m.kind = Marker::Kind::error;
    m.field = std::string(text.substr(0, colon));
    m.reason = std::string(text.substr(colon + 2));
    return m;
  }
  return std::nullopt;
}

// The document a fragment stands in: `block` as the value of the dotted `field`.
std::string fragment_document(const std::string& block, const std::string& field) {
  YAML::Node value = YAML::Load(block);
  std::vector<std::string> parts;
  std::stringstream path(field);
  for (std::string part; std::getline(path, part, '.');) parts.push_back(part);
  if ((parts.back() == "rules" || parts.back() == "descriptors") && value.IsMap()) {
    YAML::Node list(YAML::NodeType::Sequence);
    list.push_back(value);
    value.reset(list);
  }
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    YAML::Node parent(YAML::NodeType::Map);
    parent[*it] = value;
    value.reset(parent);
  }
  YAML::Emitter out;
  out << value;
  return out.c_str();
}

// `text` with the files its marker names replaced by test files of their kinds.
std::string with_test_files(std::string text, const Marker& marker) {
  if (marker.files.empty()) return text;
  const auto& certs = ratekeeper::testing::tls_certs();
  for (const auto& [path, kind] : marker.files) {
    const auto& file = kind == "ca"     ? certs.ca
                       : kind == "cert" ? certs.client_cert
                                        : certs.client_key;
    const auto at = text.find(path);
    if (at == std::string::npos) {
      throw std::runtime_error(fmt::format("the marker names {}, the block does not", path));
    }
    for (auto i = at; i != std::string::npos; i = text.find(path, i + file.string().size())) {
      text.replace(i, path.size(), file.string());
    }
  }
  return text;
}

void load(Loader loader, const std::string& text, const std::string& source) {
  if (loader == Loader::config) {
    parse_config(text, source);
  } else {
    parse_rls_domain(text, source);
  }
}

void check_block(const fs::path& file, const FencedBlock& block) {
  const auto where = fmt::format("{}:{}", fs::relative(file, kRoot).string(), block.line);
  SCOPED_TRACE(where);
  if (block.language.empty()) {
    ADD_FAILURE() << "a fence without a language: name it (```yaml, ```sh, ...)";
    return;
  }
  const bool yaml = block.language == "yaml" || block.language == "yml";
  const auto marker = parse_marker(block.marker);
  if (!yaml) {
    EXPECT_FALSE(marker) << "a yaml marker before a ```" << block.language << " block";
    return;
  }
  if (!marker) {
    ADD_FAILURE() << "a YAML block needs a marker on the line before it (see doc_yaml_test.cpp), "
                  << (block.marker.empty() ? "there is none" : "not '" + block.marker + "'");
    return;
  }
  switch (marker->kind) {
    case Marker::Kind::foreign:
      EXPECT_NO_THROW(YAML::Load(block.text)) << "not YAML";
      return;
    case Marker::Kind::whole:
      try {
        load(marker->loader, with_test_files(block.text, *marker), where);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "refused: " << e.what();
      }
      return;
    case Marker::Kind::fragment:
      try {
        load(marker->loader, fragment_document(with_test_files(block.text, *marker), marker->field),
             where);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "refused as a fragment of " << marker->field << ": " << e.what();
      }
      return;
    case Marker::Kind::error:
      try {
        load(marker->loader, with_test_files(block.text, *marker), where);
        ADD_FAILURE() << "loaded, but the text says it is refused";
      } catch (const ConfigError& e) {
        EXPECT_EQ(e.field(), marker->field) << e.what();
        EXPECT_NE(e.reason().find(marker->reason), std::string::npos) << e.what();
      }
      return;
  }
}

TEST(DocYaml, EveryYamlBlockOfTheDocsLoadsAsItsTextSays) {
  std::size_t checked = 0;
  for (const auto& file : documents()) {
    for (const auto& block : ratekeeper::testing::fenced_blocks(file)) {
      check_block(file, block);
      if (block.language == "yaml" || block.language == "yml") ++checked;
    }
  }
  EXPECT_GE(checked, 10u);  // the docs have YAML blocks: the walk found them
}

TEST(DocYaml, MarkersAreParsedAsDocumented) {
  EXPECT_EQ(parse_marker("yaml: config")->kind, Marker::Kind::whole);
  EXPECT_EQ(parse_marker("yaml: domain")->loader, Loader::domain);
  const auto fragment = parse_marker("yaml: config fragment of store.tls");
  ASSERT_TRUE(fragment);
  EXPECT_EQ(fragment->kind, Marker::Kind::fragment);
  EXPECT_EQ(fragment->field, "store.tls");
  const auto error = parse_marker("yaml: domain error: descriptors[0].key: must not be empty");
  ASSERT_TRUE(error);
  EXPECT_EQ(error->kind, Marker::Kind::error);
  EXPECT_EQ(error->field, "descriptors[0].key");
  EXPECT_EQ(error->reason, "must not be empty");
  EXPECT_EQ(parse_marker("yaml: not ratekeeper's: Envoy")->kind, Marker::Kind::foreign);
  const auto files = parse_marker("yaml: config; files: /etc/ca.pem as ca, /etc/c.key as key");
  ASSERT_TRUE(files);
  EXPECT_EQ(files->kind, Marker::Kind::whole);
  const std::vector<std::pair<std::string, std::string>> named = {{"/etc/ca.pem", "ca"},
                                                                  {"/etc/c.key", "key"}};
  EXPECT_EQ(files->files, named);
  EXPECT_FALSE(parse_marker("yaml: config; files: /etc/ca.pem"));
  EXPECT_FALSE(parse_marker("yaml: config; files: /etc/ca.pem as pem"));
  EXPECT_FALSE(parse_marker("yaml: conf"));
  EXPECT_FALSE(parse_marker("yaml: config error: no reason"));
  EXPECT_FALSE(parse_marker("yaml: not ratekeeper's: "));
  EXPECT_FALSE(parse_marker("a comment"));
  // A fragment goes where its marker says; a mapping for a list is one item of it.
  const auto doc = fragment_document("{name: r, limits: [{rate: 1/s}]}", "rules");
  const auto rule = YAML::Load(doc)["rules"][0]["name"];
  ASSERT_TRUE(rule.IsDefined());
  EXPECT_EQ(rule.as<std::string>(), "r");
  EXPECT_NO_THROW(parse_config(doc));
  const auto nested = YAML::Load(fragment_document("{ca_file: x}", "store.tls"));
  EXPECT_EQ(nested["store"]["tls"]["ca_file"].as<std::string>(), "x");
}

}  // namespace
}  // namespace ratekeeper::server
