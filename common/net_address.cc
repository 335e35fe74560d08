#include "common/net_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// An address of one of this host's interfaces.
struct InterfaceAddress {
  std::string interface;
  std::string address;  // numeric
  bool loopback = false;
  bool ipv6 = false;
};

std::string NumericAddress(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text,
              sizeof(text));
  } else if (address->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text,
              sizeof(text));
  }
  return text;
}

// The addresses of the interfaces that are up, IPv4 first, in the kernel's order.
std::vector<InterfaceAddress> InterfaceAddresses() {
  std::vector<InterfaceAddress> v4, v6;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || (a->ifa_flags & IFF_UP) == 0) continue;
    const int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress entry;
    entry.interface = a->ifa_name;
    entry.address = NumericAddress(a->ifa_addr);
    entry.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0 || IsLoopbackHost(entry.address);
    entry.ipv6 = family == AF_INET6;
    // Link-local IPv6 addresses need a scope to be dialled: no use to advertise.
    if (entry.ipv6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr)) {
      continue;
    }
    (entry.ipv6 ? v6 : v4).push_back(std::move(entry));
  }
  freeifaddrs(list);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

// The numeric addresses `host` resolves to. INVALID_ARGUMENT when it does not resolve.
absl::StatusOr<std::vector<std::string>> Resolve(absl::string_view host) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const std::string name(host);
  const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve host \"", host, "\": ", gai_strerror(rc)));
  }
  std::vector<std::string> addresses;
  for (const addrinfo* a = result; a != nullptr; a = a->ai_next) {
    addresses.push_back(NumericAddress(a->ai_addr));
  }
  freeaddrinfo(result);
  return addresses;
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, AddressUse use) {
  auto bad = [text](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address \"", text, "\": ", why, " (expected HOST:PORT, [IPv6]:PORT)"));
  };
  HostPort parsed;
  absl::string_view port;
  if (absl::StartsWith(text, "[")) {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) return bad("no closing bracket");
    parsed.host = std::string(text.substr(1, close - 1));
    if (parsed.host.empty()) return bad("empty host in brackets");
    if (close + 1 >= text.size() || text[close + 1] != ':') return bad("no port");
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) return bad("no port");
    parsed.host = std::string(text.substr(0, colon));
    if (absl::StrContains(parsed.host, ':')) return bad("an IPv6 host needs brackets");
    if (absl::StrContains(parsed.host, '[') || absl::StrContains(parsed.host, ']')) {
      return bad("stray bracket");
    }
    if (parsed.host.empty()) {
      if (use == AddressUse::kDial) return bad("empty host");
      parsed.host = "0.0.0.0";
    }
    port = text.substr(colon + 1);
  }
  if (std::any_of(parsed.host.begin(), parsed.host.end(),
                  [](char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); })) {
    return bad("space in host");
  }
  const int lowest = use == AddressUse::kDial ? 1 : 0;
  if (port.empty() || !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port, &parsed.port) || parsed.port < lowest || parsed.port > 65535) {
    return bad(absl::StrCat("the port must be a number from ", lowest, " to 65535"));
  }
  return parsed;
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "[")) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

bool IsWildcardHost(absl::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr v4;
  const std::string name(host);
  return inet_pton(AF_INET, name.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

absl::StatusOr<std::string> DefaultAdvertiseHost() {
  const std::vector<InterfaceAddress> interfaces = InterfaceAddresses();
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') {
    // Debian maps the host's name to 127.0.1.1 unless DNS says otherwise: only a name that
    // reaches one of this host's real addresses is worth advertising.
    absl::StatusOr<std::vector<std::string>> addresses = Resolve(name);
    if (addresses.ok()) {
      for (const std::string& address : *addresses) {
        for (const InterfaceAddress& a : interfaces) {
          if (!a.loopback && a.address == address) return std::string(name);
        }
      }
    }
  }
  for (const InterfaceAddress& a : interfaces) {
    if (!a.loopback) return a.address;
  }
  return absl::FailedPreconditionError(
      "this host has no network address other than loopback; pass --advertise (127.0.0.1 when "
      "every process of the job runs on this machine)");
}

absl::StatusOr<std::string> ResolveAdvertiseHost(const HostPort& listen,
                                                 absl::string_view advertise) {
  if (!advertise.empty()) {
    if (IsWildcardHost(advertise)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--advertise=", advertise,
                       " is no address to dial: name this host or one of its "
                       "addresses"));
    }
    in6_addr v6;
    const std::string name(advertise);
    if (absl::StrContains(advertise, ':') && inet_pton(AF_INET6, name.c_str(), &v6) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--advertise=", advertise, " takes a host, without a port (the port is the one bound)"));
    }
    return std::string(advertise);
  }
  if (!IsWildcardHost(listen.host)) return listen.host;
  return DefaultAdvertiseHost();
}

absl::StatusOr<DaemonAddress> ParseDaemonAddress(absl::string_view listen,
                                                 absl::string_view advertise) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(listen);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: ", parsed.status().message()));
  }
  absl::StatusOr<std::string> host = ResolveAdvertiseHost(*parsed, advertise);
  if (!host.ok()) return host.status();
  return DaemonAddress{*std::move(parsed), *std::move(host)};
}

absl::Status CheckCanListen(const HostPort& listen) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const std::string port = absl::StrCat(listen.port);
  const int rc = getaddrinfo(listen.host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve listen host \"", listen.host, "\": ", gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(result, freeaddrinfo);
  std::string why;
  for (const addrinfo* a = result; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    // As gRPC binds: a port in TIME_WAIT is free.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    const bool bound = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!bound) why = std::strerror(errno);
    close(fd);
    if (bound) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot listen on ", JoinHostPort(listen.host, listen.port), ": ", why));
}

absl::StatusOr<std::string> InterfaceWithAddress(absl::string_view host) {
  absl::StatusOr<std::vector<std::string>> addresses = Resolve(host);
  if (!addresses.ok()) return addresses.status();
  for (const InterfaceAddress& a : InterfaceAddresses()) {
    for (const std::string& address : *addresses) {
      if (a.address == address) return a.interface;
    }
  }
  return absl::NotFoundError(absl::StrCat("no network interface of this host has address ", host));
}

}  // namespace ps
