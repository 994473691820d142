#include "tests/testing/coordinator_process.h"

#include <filesystem>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace tagi::testing {
namespace {

// The port once the file holds a whole line (the writer ends it with '\n').
int ReadPortFile(const std::string& path) {
  const std::string text = ReadFileOrEmpty(path);
  if (text.empty() || text.back() != '\n') return 0;
  const int port = std::atoi(text.c_str());
  return port > 0 && port < 65536 ? port : 0;
}

}  // namespace

StartedCoordinator StartCoordinator(const std::string& binary, const TempDir& dir,
                                    const CoordinatorLaunch& launch) {
  StartedCoordinator c;
  const std::string port_file = dir.File(launch.name + ".port");
  const absl::Duration timeout = launch.timeout;
  std::error_code ec;
  std::filesystem::remove(port_file, ec);  // a restart must not read its predecessor's port
  std::vector<std::string> argv = launch.wrapper;
  argv.insert(argv.end(), {binary, "--listen", launch.listen, "--port-file", port_file});
  argv.insert(argv.end(), launch.flags.begin(), launch.flags.end());
  c.process = std::make_unique<ChildProcess>(argv, dir, launch.name);
  const bool up =
      WaitUntil([&] { return ReadPortFile(port_file) > 0 || !c.process->Alive(); }, timeout);
  c.port = ReadPortFile(port_file);
  if (c.port > 0) {
    c.address = "127.0.0.1:" + std::to_string(c.port);
    return c;
  }
  const auto status = c.process->WaitExit(absl::ZeroDuration());
  c.error = (up ? std::string("it ended (") + status->ToString() + ")"
                : "no port in " + port_file + " after " + absl::FormatDuration(timeout)) +
            " before writing its port; stderr:\n" + c.process->Stderr();
  return c;
}

int PickFreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot bind a port on 127.0.0.1");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace tagi::testing
