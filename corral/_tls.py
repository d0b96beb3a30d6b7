"""TLS settings in a ``rediss://`` URL: checked when given, and explained when refused.

redis-py reads the TLS options from the URL's query (``ssl_ca_certs``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_cert_reqs``, ``ssl_check_hostname``, ``ssl_password``...) and uses them
only when it first connects: a missing file, a misspelt option or a TLS option on a plain
``redis://`` URL would then fail far from where it was written, as a connection error a worker
takes for an outage. :func:`check_url` refuses them at construction instead. When a handshake
is refused (a CA that did not sign the server's certificate, no client certificate for a
server that requires one, a name the certificate does not list), :func:`explain` turns
redis-py's connection error into one line naming TLS and the likely fix; ``errors.
server_error_kind`` classifies those as "configuration", so nobody retries them.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from corral.errors import InvalidOptionError, tls_failure

#: The TLS options redis-py's asyncio and blocking connections both accept from a URL.
URL_OPTIONS = frozenset(
    {
        "ssl_ca_certs",
        "ssl_ca_data",
        "ssl_ca_path",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_cert_reqs",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_ciphers",
        "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
    }
)
#: What ``ssl_cert_reqs`` may say: verify the server's certificate always, when it sends
#: one, or never.
CERT_REQS = ("required", "optional", "none")
#: Spellings of a boolean that redis-py reads as such (case-insensitive).
_BOOLEANS = ("1", "0", "true", "false", "yes", "no", "y", "n", "t", "f")
#: Options that name a file, and one that names a directory.
_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


def check_url(url: str) -> None:
    """Refuse TLS options of ``url`` (a ``redis://``, ``rediss://`` or ``unix://`` URL that
    redis-py parsed) that would only fail at the first connection.

    Raises:
        InvalidOptionError: naming the option: an unknown ``ssl_*`` option, one on a URL that
            is not ``rediss://``, a bad ``ssl_cert_reqs`` or ``ssl_check_hostname``, a file
            that does not exist, a key or a key password without a certificate.
    """
    parsed = urlparse(url)
    options = {k: v[0] for k, v in parse_qs(parsed.query).items() if k.startswith("ssl_")}
    if not options:
        return
    for name in sorted(options):
        if name not in URL_OPTIONS:
            raise InvalidOptionError(
                f"connection: unknown TLS option {name} (known: {', '.join(sorted(URL_OPTIONS))})"
            )
    if parsed.scheme != "rediss":
        first = sorted(options)[0]
        raise InvalidOptionError(
            f"connection: {first} is a TLS option, but the URL is {parsed.scheme}://: use "
            "rediss:// to connect over TLS"
        )
    reqs = options.get("ssl_cert_reqs")
    if reqs is not None and reqs not in CERT_REQS:
        raise InvalidOptionError(
            f"connection: ssl_cert_reqs must be one of {', '.join(CERT_REQS)}, got {reqs!r}"
        )
    check = options.get("ssl_check_hostname")
    if check is not None and check.lower() not in _BOOLEANS:
        raise InvalidOptionError(
            f"connection: ssl_check_hostname must be true or false, got {check!r}"
        )
    for name in _FILES:
        path = options.get(name)
        if path is not None and not Path(path).is_file():
            raise InvalidOptionError(f"connection: {name}: no such file: {path}")
    ca_path = options.get("ssl_ca_path")
    if ca_path is not None and not Path(ca_path).is_dir():
        raise InvalidOptionError(f"connection: ssl_ca_path: no such directory: {ca_path}")
    if "ssl_certfile" not in options:
        for name in ("ssl_keyfile", "ssl_password"):
            if name in options:
                raise InvalidOptionError(
                    f"connection: {name} is given without ssl_certfile: a client certificate "
                    "needs its certificate file (which may hold the key too)"
                )


def explain(exc: BaseException) -> str | None:
    """One line on why the TLS handshake behind ``exc`` failed and what to change, or
    ``None`` when ``exc`` is not a refused handshake."""
    error = tls_failure(exc)
    if error is None:
        return None
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = error.verify_message or error.reason or str(error)
        if error.verify_code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, IP_ADDRESS_...
            fix = (
                "connect with a host name the server's certificate lists, or add "
                "ssl_check_hostname=false (the certificate is still checked against the CA)"
            )
        elif error.verify_code in (9, 10):  # not yet valid, expired
            fix = "renew the server's certificate (or check this machine's clock)"
        else:
            fix = "point ssl_ca_certs at the CA that signed the server's certificate"
        return f"TLS: the server's certificate was refused ({detail}): {fix} [{exc}]"
    reason = error.reason or ""
    if "CERTIFICATE_REQUIRED" in reason:
        what = "the server requires a client certificate: give ssl_certfile and ssl_keyfile"
    elif "UNKNOWN_CA" in reason or "BAD_CERTIFICATE" in reason or "CERTIFICATE_" in reason:
        what = (
            "the server refused the client certificate: give ssl_certfile and ssl_keyfile "
            "of a certificate signed by a CA the server trusts (its tls-ca-cert-file)"
        )
    elif "WRONG_VERSION_NUMBER" in reason:
        what = "the server does not speak TLS on this port: use its TLS port, or redis://"
    elif "KEY_VALUES_MISMATCH" in reason or "PEM_LIB" in reason:
        what = (
            "the client certificate or key cannot be loaded: ssl_keyfile must be the key of "
            "ssl_certfile (and ssl_password its password, when it has one)"
        )
    else:
        what = "the handshake was refused: check the rediss:// URL's ssl_* options"
    return f"TLS: {what} [{exc}]"
