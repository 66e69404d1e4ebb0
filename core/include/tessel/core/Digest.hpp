#ifndef TESSEL_CORE_DIGEST_HPP
#define TESSEL_CORE_DIGEST_HPP

/// \file Digest.hpp
/// \brief FNV-1a, the digest ranks compare to check that they hold the same bytes (files, command lines, graphs).
#include <cstddef>
#include <cstdint>

namespace tessel {

/// The FNV-1a offset basis: the digest of no bytes, where a digest starts.
inline constexpr std::uint64_t fnv1a_basis = 0xcbf29ce484222325ull;

/// FNV-1a over the \p bytes at \p data, continuing from \p h.
inline std::uint64_t fnv1a(std::uint64_t h, void const *data, std::size_t bytes) {
  auto const *p = static_cast<unsigned char const *>(data);
  for (std::size_t i = 0; i < bytes; ++i)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

} // namespace tessel

#endif
