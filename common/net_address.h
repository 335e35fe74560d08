// Where a daemon listens and the address it gives others to dial: every daemon takes
// --listen=HOST:PORT (what it binds; "0.0.0.0:0" is any address and a free port) and
// --advertise=HOST (what other hosts dial; by default this host's name when it resolves to an
// address of one of this host's interfaces other than loopback, else the first such address).
#ifndef PS_COMMON_NET_ADDRESS_H_
#define PS_COMMON_NET_ADDRESS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// A host (a name, an IPv4 address, or an IPv6 address without brackets) and a port.
struct HostPort {
  std::string host;
  int port = 0;
};

// What an address is for. One to listen on may leave the host out (":7000": every address) and
// give port 0 (a free one); one to dial (an address a member registers with) may not.
enum class AddressUse { kListen, kDial };

// Parses "host:port" or "[v6]:port"; for kListen also ":port" (the host is then "0.0.0.0").
// INVALID_ARGUMENT, naming `text` and saying what is wrong, when the port is missing, not all
// digits, or outside [0, 65535] (kListen) or [1, 65535] (kDial); or the host is malformed: empty
// (in brackets, or at all for kDial), an unbracketed IPv6 address, stray brackets, whitespace.
// The one host:port parser of the project: daemons' --listen, members' addresses.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text,
                                       AddressUse use = AddressUse::kListen);

// "host:port", with brackets around an IPv6 host.
std::string JoinHostPort(absl::string_view host, int port);

// Whether `host` is "0.0.0.0", "::" or empty: binding it listens on every address, and it is no
// address to dial.
bool IsWildcardHost(absl::string_view host);

// Whether `host` is "localhost" or an address of the loopback range (127.0.0.0/8, ::1).
bool IsLoopbackHost(absl::string_view host);

// The default advertised host, as the header comment says. FAILED_PRECONDITION when this host has
// no address other than loopback (a machine without network: then pass --advertise=127.0.0.1).
absl::StatusOr<std::string> DefaultAdvertiseHost();

// The host others should dial for a daemon started with --listen=`listen` and
// --advertise=`advertise` (may be empty): `advertise` when given; else the listen host when it
// is a specific address; else DefaultAdvertiseHost(). INVALID_ARGUMENT for an advertised
// wildcard ("0.0.0.0" cannot be dialled); FAILED_PRECONDITION as DefaultAdvertiseHost.
absl::StatusOr<std::string> ResolveAdvertiseHost(const HostPort& listen,
                                                 absl::string_view advertise);

// A daemon's --listen and --advertise flags, checked: what it binds and what others dial.
struct DaemonAddress {
  HostPort listen;
  std::string advertise;  // ResolveAdvertiseHost's answer
};

// Parses --listen=`listen` (INVALID_ARGUMENT "--listen: bad address ...") and resolves the
// advertised host from it and --advertise=`advertise` (ResolveAdvertiseHost's errors).
absl::StatusOr<DaemonAddress> ParseDaemonAddress(absl::string_view listen,
                                                 absl::string_view advertise);

// Binds a TCP socket to `listen` and closes it at once: checks that a daemon could listen there.
// INVALID_ARGUMENT when the host does not resolve; FAILED_PRECONDITION, with the reason (address
// in use, not an address of this host, permission denied), when it cannot be bound.
absl::Status CheckCanListen(const HostPort& listen);

// The name of this host's network interface that has address `host` (an IP address or a name
// that resolves to one), e.g. "eth0". NOT_FOUND when no interface has it; INVALID_ARGUMENT when
// it does not resolve.
absl::StatusOr<std::string> InterfaceWithAddress(absl::string_view host);

}  // namespace ps

#endif  // PS_COMMON_NET_ADDRESS_H_
