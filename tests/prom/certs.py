"""A throwaway certificate authority and a server certificate for 127.0.0.1, made with the
`openssl` command (the `cryptography` package is not among the test dependencies).

The CA is self-signed; the server certificate it signs names the loopback address in its
subjectAltName, so a client that trusts the CA verifies the server as a real one would.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
_SERVER_EXTENSIONS = """\
subjectAltName = IP:127.0.0.1
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


@dataclass(frozen=True)
class Certificates:
    ca_file: Path
    """The CA's certificate: the bundle a client trusts."""
    cert_file: Path
    """The server's certificate, for 127.0.0.1, signed by the CA."""
    key_file: Path
    """The server's private key."""


def openssl() -> str | None:
    """The `openssl` command, or None when it is not installed."""
    return shutil.which("openssl")


def make(directory: Path, *, binary: str = "openssl") -> Certificates:
    """A new CA and a server certificate for 127.0.0.1, valid one day, written in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    key, cert = directory / "server.key", directory / "server.crt"
    request = directory / "server.csr"
    extensions = directory / "server.ext"
    extensions.write_text(_SERVER_EXTENSIONS)
    _run(
        binary, "req", "-x509", *_EC_KEY, "-keyout", ca_key, "-out", ca_cert, "-days", "1",
        "-subj", "/CN=autoscaler test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    _run(binary, "req", *_EC_KEY, "-keyout", key, "-out", request, "-subj", "/CN=127.0.0.1")
    _run(
        binary, "x509", "-req", "-in", request, "-CA", ca_cert, "-CAkey", ca_key,
        "-CAcreateserial", "-out", cert, "-days", "1", "-extfile", extensions,
    )  # fmt: skip
    return Certificates(ca_file=ca_cert, cert_file=cert, key_file=key)


def _run(*arguments: str | Path) -> None:
    subprocess.run(
        [str(a) for a in arguments],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=30,
    )
