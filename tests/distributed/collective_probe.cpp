// tests/distributed/collective_probe.cpp — a job of all_reduces in which one rank can stall
// or die, for the fault tests (check_faults.sh): every other rank must end with a named error
#include "jit/dist/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

int usage(const char* program) {
  std::fprintf(stderr,
               "usage: %s [--steps N] [--stall RANK:STEP:SECONDS] [--die RANK:STEP]\n"
               "          [--stop-inside RANK,RANK...:STEP]\n"
               "  N all_reduces of 1000 floats, one per step; a stalling rank sleeps before\n"
               "  its all_reduce of STEP, a dying one kills itself (SIGKILL) there, and the\n"
               "  ranks listed by --stop-inside start that all_reduce, then stop (SIGSTOP)\n",
               program);
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  int steps = 10, stall_rank = -1, stall_step = -1, die_rank = -1, die_step = -1;
  double stall_seconds = 0;
  std::vector<int> stop_ranks;
  int stop_step = -1;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc) return usage(argv[0]);
    const char* value = argv[++i];
    if (arg == "--steps")
      steps = std::atoi(value);
    else if (arg == "--stall" &&
             std::sscanf(value, "%d:%d:%lf", &stall_rank, &stall_step, &stall_seconds) == 3)
      continue;
    else if (arg == "--die" && std::sscanf(value, "%d:%d", &die_rank, &die_step) == 2)
      continue;
    else if (arg == "--stop-inside" && std::strchr(value, ':')) {
      std::string ranks(value, std::strchr(value, ':'));
      stop_step = std::atoi(std::strchr(value, ':') + 1);
      for (std::size_t at = 0; at < ranks.size(); at = ranks.find(',', at) + 1) {
        stop_ranks.push_back(std::atoi(ranks.c_str() + at));
        if (ranks.find(',', at) == std::string::npos) break;
      }
    } else
      return usage(argv[0]);
  }
  try {
    sinter::Communicator& world = sinter::world();
    std::vector<float> data(1000, 1.0f);
    for (int step = 1; step <= steps; ++step) {
      world.set_step(step);
      if (world.rank() == stall_rank && step == stall_step)
        std::this_thread::sleep_for(std::chrono::duration<double>(stall_seconds));
      if (world.rank() == die_rank && step == die_step) raise(SIGKILL);
      const bool stop = step == stop_step && std::find(stop_ranks.begin(), stop_ranks.end(),
                                                       world.rank()) != stop_ranks.end();
      auto pending = world.start_all_reduce(data.data(), data.data(), 1000, sinter::DType::f32,
                                            sinter::ReduceOp::sum);
      if (stop) raise(SIGSTOP); // inside the collective: entered, never polled again
      world.wait(pending);
      std::fill(data.begin(), data.end(), 1.0f);
    }
    std::printf("probe: rank %d done after %d steps\n", world.rank(), steps);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe: %s\n", e.what());
    return 3;
  }
}
