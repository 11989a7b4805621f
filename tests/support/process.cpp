#include "process.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace pdkv::test_support {

pid_t spawn(const std::vector<std::string>& argv, int stdin_fd, int stdout_fd, int stderr_fd) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (stdin_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stdin_fd, 0);
  if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stdout_fd, 1);
  if (stderr_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stderr_fd, 2);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

int run_command(const std::vector<std::string>& argv, std::string* output) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return -1;
  pid_t pid;
  try {
    pid = spawn(argv, -1, out[1], out[1]);
  } catch (...) {
    close(out[0]);
    close(out[1]);
    return -1;
  }
  close(out[1]);
  std::string text;
  char buf[1024];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (output) *output = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace pdkv::test_support
