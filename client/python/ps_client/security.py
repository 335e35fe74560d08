"""TLS and bearer tokens of the client's channels (the Python side of common/grpc/security.h).

ClientOptions.tls_ca, tls_cert, tls_key and token_file name PEM files and a token file as the
daemons' --tls_ca, --tls_cert, --tls_key and --token_file do. With tls_ca the client dials with
TLS, checking the servers' certificates against that CA; tls_cert and tls_key (both or neither)
are this client's certificate for clusters that require client certificates (mutual TLS). A token file
(lines "ROLE TOKEN", see common/grpc/auth.h) makes every call carry its worker token, or its
admin token when it has no worker token, as "authorization: Bearer <token>"; it needs TLS.
"""

import errno
import re

import grpc

from . import errors

MIN_TOKEN_LENGTH = 16
MAX_TOKEN_LENGTH = 512
_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9\-._~+/=]+$")
_ROLES = ("admin", "worker")


def unreachable_hint(tls):
    """What to add to an UNAVAILABLE error: a failed TLS handshake looks the same as nobody
    listening, so this names the likeliest mismatch (common/grpc/security.cc UnreachableHint)."""
    if tls:
        return ("this process dials with TLS: the server must serve TLS with a certificate of "
                "tls_ca's CA naming the address dialled and, where it requires client "
                "certificates, accept this process's tls_cert (of its CA, not expired)")
    return ("this process dials in plaintext: a cluster that serves TLS needs tls_ca "
            "(and tls_cert/tls_key where it requires client certificates)")


def _read(option, path):
    """The bytes of ``path``; an error naming the option and the file when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        what = "ClientOptions.%s %s: %s" % (option, path, e.strerror or e)
        if e.errno == errno.ENOENT:
            raise errors.NotFoundError(what) from None
        if e.errno == errno.EACCES:
            raise errors.PermissionDeniedError(what) from None
        raise errors.InternalError(what) from None


def _read_pem(option, path):
    """The bytes of the PEM file ``path``; InvalidArgumentError when it is not PEM."""
    pem = _read(option, path)
    if b"-----BEGIN " not in pem:
        raise errors.InvalidArgumentError(
            'ClientOptions.%s %s: not a PEM file (no "-----BEGIN " line)' % (option, path))
    return pem


def load_token_file(path):
    """The tokens of a token file as [(role, token)], in the file's order. Errors name the file
    and the line, never the token (as common/grpc/auth.cc LoadTokenFile)."""
    try:
        text = _read("token_file", path).decode("utf-8")
    except UnicodeDecodeError:
        raise errors.InvalidArgumentError("%s: not UTF-8 text" % path) from None
    tokens = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue

        def bad(what):
            return errors.InvalidArgumentError("%s:%d: %s" % (path, number, what))
        fields = line.split()
        if len(fields) != 2:
            raise bad('expected "ROLE TOKEN" (ROLE is admin or worker), got %d fields' %
                      len(fields))
        role, secret = fields
        if role not in _ROLES:
            raise bad('unknown role "%s" (admin or worker)' % role)
        if not MIN_TOKEN_LENGTH <= len(secret) <= MAX_TOKEN_LENGTH:
            raise bad("the token has %d characters; %d to %d are allowed" %
                      (len(secret), MIN_TOKEN_LENGTH, MAX_TOKEN_LENGTH))
        if not _TOKEN_CHARS.match(secret):
            raise bad("the token has a character other than A-Z a-z 0-9 - . _ ~ + / =")
        if any(secret == earlier for _, earlier in tokens):
            raise bad("this token is listed twice")
        tokens.append((role, secret))
    if not tokens:
        raise errors.InvalidArgumentError('%s: no token (lines "ROLE TOKEN")' % path)
    return tokens


def presented_token(tokens, path):
    """The token a client presents: the file's first worker token, else its first admin token."""
    for wanted in ("worker", "admin"):
        for role, secret in tokens:
            if role == wanted:
                return secret
    raise errors.FailedPreconditionError(  # unreachable: every token is worker or admin
        "ClientOptions.token_file %s: no worker or admin token" % path)


class Security:
    """The credentials of a client's channels, loaded once from its options."""

    def __init__(self, credentials=None):
        self._credentials = credentials  # grpc.ChannelCredentials, None for plaintext

    @classmethod
    def load(cls, options):
        """Loads the files ``options`` (a ClientOptions) names. InvalidArgumentError for a
        certificate without its key or the reverse, FailedPreconditionError for a token file
        without TLS, and an error naming the option and the file for a file that cannot be read
        or parsed."""
        if bool(options.tls_cert) != bool(options.tls_key):
            given, missing = (("tls_cert", "tls_key") if options.tls_cert else
                              ("tls_key", "tls_cert"))
            raise errors.InvalidArgumentError(
                "ClientOptions.%s is given without ClientOptions.%s: a client certificate needs "
                "both" % (given, missing))
        if options.token_file and not options.tls_ca:
            raise errors.FailedPreconditionError(
                "ClientOptions.token_file %s needs TLS (tls_ca): a bearer token must not cross "
                "the network in plaintext" % options.token_file)
        if not options.tls_ca and not options.tls_cert:
            return cls()
        # Without tls_ca (only a client certificate) the servers are checked against gRPC's
        # default roots, as the C++ client does.
        ca = _read_pem("tls_ca", options.tls_ca) if options.tls_ca else None
        cert = key = None
        if options.tls_cert:
            cert = _read_pem("tls_cert", options.tls_cert)
            key = _read_pem("tls_key", options.tls_key)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=key, certificate_chain=cert)
        if options.token_file:
            token = presented_token(load_token_file(options.token_file), options.token_file)
            credentials = grpc.composite_channel_credentials(
                credentials, grpc.access_token_call_credentials(token))
        return cls(credentials)

    @property
    def tls(self):
        """Whether the channels use TLS."""
        return self._credentials is not None

    def channel(self, address, options):
        """A channel to ``address`` with gRPC ``options``: TLS or plaintext."""
        if self._credentials is None:
            return grpc.insecure_channel(address, options=options)
        return grpc.secure_channel(address, self._credentials, options=options)
