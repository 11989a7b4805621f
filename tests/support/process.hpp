// Starting helper processes from tests and benchmarks: posix_spawn with chosen standard streams,
// and running a command to completion.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace pdkv::test_support {

// Spawns argv[0] (searched in PATH when it has no '/') with argv; each fd >= 0 becomes the child's
// stdin / stdout / stderr, a negative one leaves the caller's. Throws std::runtime_error naming
// argv[0] when it cannot start.
pid_t spawn(const std::vector<std::string>& argv, int stdin_fd, int stdout_fd, int stderr_fd);

// Runs a command to completion (stdout and stderr into *output when given); returns its exit
// status (-1 when it could not run or was killed by a signal).
int run_command(const std::vector<std::string>& argv, std::string* output = nullptr);

}  // namespace pdkv::test_support
