// The loopback connections of the tests that speak raw bytes to a server they started (the
// payments demo's servers, the hardened cpp-httplib binding): a slow client, a pipelined or
// badly framed request, a crowd of idle connections; and a port nobody listens on.
#ifndef IDEM_TESTS_SUPPORT_LOOPBACK_HPP
#define IDEM_TESTS_SUPPORT_LOOPBACK_HPP

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace idem_test {

/// A TCP socket connected to 127.0.0.1:port, or -1 (errno says why). `type_flags` are added to
/// SOCK_STREAM: with SOCK_NONBLOCK a connection still under way (EINPROGRESS) is answered too,
/// for the caller to poll.
inline int connect_loopback(int port, int type_flags = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | type_flags, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 ||
      ((type_flags & SOCK_NONBLOCK) != 0 && errno == EINPROGRESS)) {
    return fd;
  }
  const int failed = errno;
  ::close(fd);
  errno = failed;
  return -1;
}

/// A loopback port nothing listens on now (the kernel's choice, bound, read and released), or -1:
/// for a server a test starts again on the same port, or a port that refuses connections.
inline int unused_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  return bound ? ntohs(address.sin_port) : -1;
}

}  // namespace idem_test

#endif  // IDEM_TESTS_SUPPORT_LOOPBACK_HPP
