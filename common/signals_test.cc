#include "common/signals.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <thread>

namespace ps {
namespace {

TEST_CASE("a blocked SIGTERM is delivered to the waiting thread", "[common][signals]") {
  BlockShutdownSignals();
  std::thread sender([] { kill(getpid(), SIGTERM); });
  CHECK(WaitForShutdownSignal() == SIGTERM);
  sender.join();
}

}  // namespace
}  // namespace ps
