"""The emulated lab's TLS certificates for libvirt (migrate.testbed.pki): what libvirt's x.509
setup asks of each file, checked by OpenSSL's verifier where it is installed and by reading the
certificates back."""

from __future__ import annotations

import ipaddress
import shutil
import stat
import subprocess

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from migrate.testbed import pki


@pytest.fixture(scope="module")
def host_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki") / "R2"
    pki.write_host(d, pki.new_authority("t1"), "R2", "198.19.255.2")
    return d


def _cert(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_libvirts_file_names_and_private_keys_0600(host_dir):
    assert sorted(p.name for p in host_dir.iterdir()) == sorted(pki.FILES)
    for name in ("serverkey.pem", "clientkey.pem"):
        assert stat.S_IMODE((host_dir / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE(host_dir.stat().st_mode) == 0o700


def test_server_certificate_names_the_migration_address_and_serves(host_dir):
    c = _cert(host_dir / "servercert.pem")
    san = c.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("198.19.255.2")]
    assert ExtendedKeyUsageOID.SERVER_AUTH in c.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    usage = c.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment  # libvirt checks both for a server
    assert c.issuer == _cert(host_dir / "cacert.pem").subject


def test_client_certificate_is_for_clients(host_dir):
    c = _cert(host_dir / "clientcert.pem")
    assert ExtendedKeyUsageOID.CLIENT_AUTH in c.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert not c.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
@pytest.mark.parametrize(("cert", "purpose"), [("servercert.pem", "sslserver"), ("clientcert.pem", "sslclient")])
def test_openssl_verifies_the_chain_for_its_purpose(host_dir, cert, purpose):
    ok = subprocess.run(
        ["openssl", "verify", "-CAfile", str(host_dir / "cacert.pem"), "-purpose", purpose, str(host_dir / cert)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # and a certificate of another lab's CA is refused
    other = pki.new_authority("t2")
    bad = subprocess.run(
        ["openssl", "verify", "-CAfile", "/dev/stdin", "-purpose", purpose, str(host_dir / cert)],
        input=other.pem.decode(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode != 0


def test_purpose_is_server_or_client():
    with pytest.raises(ValueError, match="server or client"):
        pki.issue(pki.new_authority("t3"), "x", "peer")
