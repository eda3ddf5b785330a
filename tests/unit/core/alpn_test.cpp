#include "core/alpn.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ratekeeper {
namespace {

// A ProtocolNameList as a client sends it: each name a length byte and then its bytes.
std::vector<unsigned char> offer(std::initializer_list<std::string_view> names) {
  std::vector<unsigned char> out;
  for (const auto name : names) {
    out.push_back(static_cast<unsigned char>(name.size()));
    out.insert(out.end(), name.begin(), name.end());
  }
  return out;
}

std::optional<std::string> chosen(const std::vector<unsigned char>& offered, bool h2) {
  const auto name = choose_alpn(offered, h2);
  if (!name) return std::nullopt;
  // The name lies in the client's list, as OpenSSL needs it.
  EXPECT_GE(name->data(), offered.data());
  EXPECT_LE(name->data() + name->size(), offered.data() + offered.size());
  return std::string(name->begin(), name->end());
}

TEST(Alpn, H2WhenTheListenerSpeaksItAndTheClientOffersIt) {
  EXPECT_EQ(chosen(offer({"http/1.1", "h2"}), true), "h2");
  EXPECT_EQ(chosen(offer({"h2", "http/1.1"}), true), "h2");
}

TEST(Alpn, Http11WhenTheListenerDoesNotSpeakH2OrTheClientDoesNotOfferIt) {
  EXPECT_EQ(chosen(offer({"h2", "http/1.1"}), false), "http/1.1");
  EXPECT_EQ(chosen(offer({"spdy/3", "http/1.1"}), true), "http/1.1");
}

TEST(Alpn, NothingWhenNeitherIsOffered) {
  EXPECT_EQ(chosen(offer({"h2"}), false), std::nullopt);
  EXPECT_EQ(chosen(offer({"h3", "http/1.0"}), true), std::nullopt);
  EXPECT_EQ(chosen({}, true), std::nullopt);
}

TEST(Alpn, NamesAreMatchedWhole) {
  EXPECT_EQ(chosen(offer({"h2c", "http/1.10"}), true), std::nullopt);
  EXPECT_EQ(chosen(offer({"", "h2"}), true), "h2");  // an empty name is skipped over
}

TEST(Alpn, AListCutShortIsReadUpToItsLastWholeName) {
  auto list = offer({"http/1.1", "h2"});
  list.pop_back();  // "h2" lost its last byte: its length says 2, one is left
  EXPECT_EQ(chosen(list, true), "http/1.1");
  EXPECT_EQ(chosen({200, 'h', '2'}, true), std::nullopt);  // a length past the end
}

}  // namespace
}  // namespace ratekeeper
