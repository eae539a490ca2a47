"""TLS between the emulated lab's libvirtds: a throwaway certificate authority per lab and, for
each hypervisor host, the server and client certificates libvirt's "TLS x.509 certificate
configuration" asks for, written with the `cryptography` library.

A real lab brings its own certificates (docs/testbed.md).  Here each host's libvirtd listens for
TLS on its migration-link address, with the server certificate naming that address
(subjectAltName IP, which libvirt's client checks against the URI's host).  The other host's
daemon connects with ``qemu+tls://<address>/system?pkipath=<dir>`` and its client certificate
from that directory.  File names are libvirt's (cacert.pem, servercert.pem, serverkey.pem,
clientcert.pem, clientkey.pem), and keys are written 0600.

RSA keys: libvirt checks that a server certificate's key usage permits key encipherment, which
an ECDSA key cannot do."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_BITS = 2048
VALID_DAYS = 30
#: certificates start an hour back: a host whose clock is a little behind still accepts them
BACKDATE = dt.timedelta(hours=1)
FILES = ("cacert.pem", "servercert.pem", "serverkey.pem", "clientcert.pem", "clientkey.pem")
#: where a hypervisor host keeps them: lab-up writes them there, hosts-setup installs an
#: inventory's ``libvirt_tls`` files there, libvirtd.conf and the peer URIs' pkipath name it
LIBVIRT_PKI_DIR = "/etc/libvirt/pki"


@dataclass(frozen=True)
class Authority:
    """A lab's certificate authority (its key is never written: lab-up issues every certificate
    while it holds it in memory)."""

    key: rsa.RSAPrivateKey
    cert: x509.Certificate

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "vrmig lab"), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign, content_commitment=False, key_encipherment=not cert_sign,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign, crl_sign=cert_sign,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip


def new_authority(lab: str, now: dt.datetime | None = None) -> Authority:
    """A self-signed CA for lab ``lab`` (basicConstraints CA, keyCertSign)."""
    now = now or dt.datetime.now(dt.UTC)
    key = _key()
    name = _name(f"vrmig lab {lab} CA")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Authority(key, cert)


def issue(
    ca: Authority, cn: str, purpose: str, ip: str | None = None, now: dt.datetime | None = None
) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) signed by ``ca`` for ``purpose`` "server" (with ``ip`` as its
    subjectAltName) or "client"."""
    if purpose not in ("server", "client"):
        raise ValueError(f"purpose {purpose!r}: server or client")
    now = now or dt.datetime.now(dt.UTC)
    key = _key()
    eku = ExtendedKeyUsageOID.SERVER_AUTH if purpose == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if ip is not None:
        b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False)
    cert = b.sign(ca.key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_host(dest: Path, ca: Authority, role: str, ip: str) -> None:
    """libvirt's files for hypervisor host ``role`` (server on ``ip``, and the client it is when
    it migrates to the other host) into ``dest`` (created 0700)."""
    dest.mkdir(mode=0o700, exist_ok=True)
    server, server_key = issue(ca, f"{role} libvirtd", "server", ip)
    client, client_key = issue(ca, f"{role} libvirtd (client)", "client")
    _write(dest / "cacert.pem", ca.pem, 0o644)
    _write(dest / "servercert.pem", server, 0o644)
    _write(dest / "serverkey.pem", server_key, 0o600)
    _write(dest / "clientcert.pem", client, 0o644)
    _write(dest / "clientkey.pem", client_key, 0o600)
