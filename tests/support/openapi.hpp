#pragma once
// What docs/openapi.yaml says of the API's answers, for tests that hold real answers to it.

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace ratekeeper::testing {

// docs/openapi.yaml's components.schemas.
inline YAML::Node openapi_schemas() {
  return YAML::LoadFile(RATEKEEPER_SOURCE_DIR "/docs/openapi.yaml")["components"]["schemas"];
}

// The fields docs/openapi.yaml requires of `schema`.
inline std::set<std::string> openapi_required(const char* schema) {
  std::set<std::string> out;
  for (const auto& field : openapi_schemas()[schema]["required"]) out.insert(field.as<std::string>());
  return out;
}

// The keys of a JSON object.
inline std::set<std::string> json_keys(const nlohmann::json& object) {
  std::set<std::string> out;
  for (const auto& [key, value] : object.items()) out.insert(key);
  return out;
}

}  // namespace ratekeeper::testing
