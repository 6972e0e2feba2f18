"""The scripted mock LLM (tests/mockllm) behind TLS under a non-loopback name, for the metering gateway's tests.

A test CA and a server certificate for ``api.mockllm.test`` (made with ``cryptography``); the mock's listening socket
wrapped in TLS. Nothing resolves the name but the gateway, told by ``BENCH_GATEWAY_RESOLVE`` (or ``resolve=``) to dial
127.0.0.1: the CLI in its sandbox only ever sees the gateway's plain-HTTP port. The mock also keeps each reply's
token counts (``usages``) and the model it was asked for (``models``), so a test can compare what the gateway metered
with what was served. Its Chat Completions streams carry usage only when asked, as OpenAI's API does.
"""

from __future__ import annotations

import datetime
import re
import ssl
import sys
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root: tests.mockllm
from tests.mockllm import MockLLM  # noqa: E402

HOST = "api.mockllm.test"


def make_certs(folder: Path, host: str = HOST) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) as PEM files in ``folder``."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "1GC-7RC test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # key_cert_sign, crl_sign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


class TlsMock(MockLLM):
    """The mock served over TLS; ``usages`` holds (input, output) of every model turn it answered."""

    def __init__(self, *args, cert: Path, key: Path, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cert, self.key = cert, key
        self.usages: list[tuple[int, int]] = []
        self.models: list[str | None] = []  # per entry of usages: the model in the request's body or path
        self.usage_only_when_asked = True
        self._usage_lock = threading.Lock()
        self.refused_handshakes = 0  # TLS handshakes the client broke off (_handle_error)

    def start(self) -> TlsMock:
        super().start()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        # the handshake happens in the handler's thread, not in the accepting loop
        self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True, do_handshake_on_connect=False)
        self._server.handle_error = self._handle_error
        return self

    def _handle_error(self, request, client_address) -> None:
        """A handshake the client refused (a test's unverified certificate: "unknown ca") is counted in
        ``refused_handshakes``, not printed: socketserver would print its traceback on the test run's terminal, from
        the handler's thread, as if something had failed. Any other error is printed as socketserver does."""
        if isinstance(sys.exc_info()[1], ssl.SSLError):
            self.refused_handshakes += 1
            return
        type(self._server).handle_error(self._server, request, client_address)

    def turn(self, req, tools, done):
        reply = super().turn(req, tools, done)
        in_path = re.search(r"/models/([^/:]+):", req.path)
        with self._usage_lock:
            self.usages.append((reply.input_tokens, reply.output_tokens))
            self.models.append(in_path[1] if in_path else (req.body or {}).get("model"))
        return reply

    def url_for(self, host: str = HOST) -> str:
        return f"https://{host}:{self.port}"
