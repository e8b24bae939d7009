// SHA-256 against the FIPS 180-4 / NIST example vectors, including inputs that straddle the 64-byte
// block and the 56-byte padding boundary, fed whole and in pieces.
#include "core/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace gradcomp {
namespace {

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PiecewiseUpdatesEqualOneUpdate) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += static_cast<char>('a' + i % 26);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{55}, size_t{56}, size_t{63}, size_t{64}, size_t{65}, size_t{200}}) {
    Sha256 h;
    h.update(std::string_view(text).substr(0, cut)).update(std::string_view(text).substr(cut));
    EXPECT_EQ(h.hexDigest(), sha256Hex(text)) << cut;
  }
}

}  // namespace
}  // namespace gradcomp
