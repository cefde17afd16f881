"""A certificate authority made for one command, trusted by that command's sandbox only.

When the egress proxy injects a credential (:mod:`stockade.egress.inject`), it terminates the
command's TLS for the bound hosts, with a leaf certificate issued by this authority. The
authority is made when the command's proxy starts and lives in the proxy's memory: its key
is never written anywhere. Its certificate carries a name constraint: it can vouch only for
the bound hosts, so even a client that trusted it elsewhere would refuse it for any other
name. The command trusts it through :attr:`RunAuthority.bundle`, a copy of the system's
bundle with the authority appended, written in the proxy's private folder; the sandbox
makes that file readable and points the command's CA variables at it
(:func:`stockade.confine.provider.proxy_env`). The host's own trust store is never touched.

Keys and certificates come from ``cryptography`` (EC P-256, SHA-256); the TLS contexts from
the standard ``ssl`` module. A leaf's key reaches ``ssl`` through a sealed memory file
(``/proc/self/fd/N``), since ``ssl`` loads keys only from paths.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import threading
from collections.abc import Callable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .rules import literal_ip

__all__ = ["BUNDLE_NAME", "RunAuthority", "system_bundle", "upstream_context"]

BUNDLE_NAME = "ca-bundle.pem"
LIFETIME = datetime.timedelta(days=1)  # longer than any command may run (timeout.max)
BACKDATE = datetime.timedelta(minutes=5)  # clock skew between the proxy and a client
_SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Alpine, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL
    "/etc/ssl/ca-bundle.pem",  # openSUSE
    "/etc/ssl/cert.pem",  # Alpine, macOS
)


def system_bundle() -> bytes:
    """The system's CA bundle as PEM (empty if none is found)."""
    paths = ssl.get_default_verify_paths()
    for path in (paths.cafile, paths.openssl_cafile, *_SYSTEM_BUNDLES):
        if path and os.path.isfile(path):
            with open(path, "rb") as handle:
                return handle.read()
    return b""


def _name(value: str) -> x509.GeneralName:
    ip = literal_ip(value)
    if ip is None:
        return x509.DNSName(value)
    return x509.IPAddress(ip)


def _subtree(value: str) -> x509.GeneralName:
    ip = literal_ip(value)
    if ip is None:
        return x509.DNSName(value)
    return x509.IPAddress(ipaddress.ip_network(ip))


class RunAuthority:
    """A CA for ``hosts`` only; ``folder`` (private to the host) receives the bundle.

    Attributes:
        bundle: the path of the trust bundle (system CAs + this authority), mode 0644.
        certificate: this authority's certificate, PEM.
    """

    def __init__(self, hosts: Sequence[str], folder: str) -> None:
        self._hosts = tuple(dict.fromkeys(hosts))
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Stockade"),
                x509.NameAttribute(
                    NameOID.COMMON_NAME, f"Stockade run authority {os.urandom(4).hex()}"
                ),
            ]
        )
        public = self._key.public_key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(self._subject)
            .issuer_name(self._subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.NameConstraints([_subtree(h) for h in self._hosts], None), critical=True
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self._cert = cert
        self.certificate = cert.public_bytes(serialization.Encoding.PEM)
        self.bundle = os.path.join(folder, BUNDLE_NAME)
        fd = os.open(self.bundle, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as out:
            system = system_bundle()
            out.write(system + (b"" if system.endswith(b"\n") or not system else b"\n"))
            out.write(self.certificate)
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a fresh leaf for ``host`` (one of the hosts),
        HTTP/1.1 only (ALPN), made on first use."""
        with self._lock:
            found = self._contexts.get(host)
            if found is None:
                found = self._contexts[host] = self._leaf_context(host)
            return found

    def _leaf_context(self, host: str) -> ssl.SSLContext:
        if host not in self._hosts:
            raise ValueError(f"{host!r} is not a host this authority vouches for")
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self._subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + LIFETIME)
            .add_extension(x509.SubjectAlternativeName([_name(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        pem = leaf.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        context.sni_callback = _only(host)
        fd = os.memfd_create("stockade-leaf", os.MFD_CLOEXEC)
        try:
            os.write(fd, pem)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return context


def _only(host: str) -> Callable[[ssl.SSLObject, str | None, ssl.SSLContext], int | None]:
    """An SNI check: a ClientHello may name ``host`` or nothing (as for a literal IP)."""

    def check(_conn: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> int | None:
        if name is None or name.lower().rstrip(".") == host:
            return None
        return ssl.ALERT_DESCRIPTION_ACCESS_DENIED

    return check


def upstream_context(extra_ca: str | None) -> ssl.SSLContext:
    """The proxy's own client context toward an injected host: default verification (the
    system's CAs, the name checked), HTTP/1.1; ``extra_ca`` is trusted too (for tests)."""
    context = ssl.create_default_context()
    if extra_ca:
        context.load_verify_locations(cafile=extra_ca)
    context.set_alpn_protocols(["http/1.1"])
    return context
