// The device layers' host-side decisions, on any machine (no GPU needed): the report of a failed device wait from
// the abort word the kernels raise on every rank; with the NCCL device API, the NCCL release check against the
// library this process loaded (ncclGetVersion) and the verdict on the GPU pairs that every rank gathers before the
// symmetric window is created.
#include "cuda/Rank.hpp"

#include <tessel/core/Config.hpp>
#include <tessel/core/Error.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#if defined(TESSEL_ENABLE_NCCL) && defined(TESSEL_MOE_NCCL_DEVICE_API)
#include "cuda/SymmetricWindow.hpp"

#include <nccl.h>
#endif

namespace {

using namespace tessel::moe::cuda::Impl;

// Every rank reads the same word, so every rank throws the same sentence, naming the rank whose wait failed.
TEST(CudaDeviceChecks, abort_word_report) {
  int peer = -2;
  auto const message = device_failure(abort_word(timeout_message, 3, 17), no_error, 0, 2.5, &peer);
  EXPECT_EQ(message, "rank 3's device wait for message 17 gave up after 2.5 s; every rank's kernels stopped");
  EXPECT_EQ(peer, 3);
  EXPECT_EQ(
      device_failure(abort_word(timeout_packed, 0, 5), timeout_split, 9, 1, &peer),
      "rank 0's device wait for the packed flag of source rank 5 gave up after 1 s; every rank's kernels stopped");
  EXPECT_EQ(peer, 5) << "a wait on a peer's flag names that peer";
  EXPECT_NE(device_failure(abort_word(timeout_split, 1023, 7), no_error, 0, 1)
                .find("rank 1023's device wait for the "
                      "GEMM tiles of column block 7"),
            std::string::npos);
  EXPECT_NE(device_failure(abort_word(timeout_combine, 2, 0), no_error, 0, 1).find("the combine stores of rank 0"),
            std::string::npos);
  EXPECT_EQ(device_failure(0, timeout_split, 4, 1), "a device wait for the GEMM tiles of column block 4 gave up after "
                                                    "1 s; every rank's kernels stopped");
}

std::string refusal(int loaded, int compiled) {
  try {
    require_nccl_release(loaded, compiled);
  } catch (tessel::Exception const &e) {
    return e.what();
  }
  return {};
}

#if defined(TESSEL_ENABLE_NCCL) && defined(TESSEL_MOE_NCCL_DEVICE_API)
TEST(CudaDeviceChecks, nccl_release) {
  int loaded = 0;
  ASSERT_EQ(ncclGetVersion(&loaded), ncclSuccess);
  // This build links the series it was written for (CMake pins the headers; the loaded library must agree).
  EXPECT_EQ(refusal(loaded, NCCL_VERSION_CODE), "") << "loaded NCCL " << loaded;
  EXPECT_EQ(refusal(NCCL_VERSION(2, 28, 3), NCCL_VERSION(2, 28, 9)), "") << "a patch release of the same series";
  auto const older = refusal(NCCL_VERSION(2, 27, 7), NCCL_VERSION(2, 28, 9));
  EXPECT_NE(older.find("loaded at run time is 2.27.7"), std::string::npos) << older;
  EXPECT_NE(older.find("written for 2.28.9"), std::string::npos) << older;
  EXPECT_NE(older.find("Tessel_MOE_NCCL_DEVICE_API=OFF"), std::string::npos) << older;
  EXPECT_NE(refusal(NCCL_VERSION(2, 29, 1), NCCL_VERSION(2, 28, 9)), "") << "a newer series";
  EXPECT_NE(refusal(NCCL_VERSION(2, 28, 9), NCCL_VERSION(2, 29, 0)), "") << "headers of another series";
}

TEST(CudaDeviceChecks, peer_links_verdict) {
  std::vector<std::string> const bus{"0000:18:00.0", "0000:2a:00.0", "0000:3b:00.0"};
  PeerLinks links;
  links.world = 3;
  links.links.assign(9, PeerLink::ok);
  EXPECT_EQ(links.problem(bus), "");
  EXPECT_EQ(links.unchecked(), 0);
  links.links[1 * 3 + 2] = PeerLink::unchecked; // rank 1 cannot see rank 2's GPU: not a refusal
  EXPECT_EQ(links.problem(bus), "");
  EXPECT_EQ(links.unchecked(), 1);
  links.links[2 * 3 + 0] = PeerLink::no_atomics;
  auto const atomics = links.problem(bus);
  EXPECT_NE(atomics.find("rank 2's GPU (0000:3b:00.0) has peer access but no native peer atomics to rank 0's GPU "
                         "(0000:18:00.0)"),
            std::string::npos)
      << atomics;
  links.links[0 * 3 + 1] = PeerLink::no_access; // the first bad pair in rank order is the one every rank names
  auto const access = links.problem(bus);
  EXPECT_NE(access.find("rank 0's GPU (0000:18:00.0) has no peer access"), std::string::npos) << access;
  links.links.assign(9, PeerLink::ok);
  links.links[1 * 3 + 0] = PeerLink::same_device;
  EXPECT_NE(links.problem(bus).find("is the same GPU as rank 0's"), std::string::npos) << links.problem(bus);
}
#endif

} // namespace
