"""The embedding client's TLS (row S29): httpx's default context, its CAs read before the first TLS connection
instead of when the client is made (certifi's bundle was ~25-50 ms of CPU of every process that embeds a query,
though a local http:// server never uses it). Real servers on 127.0.0.1 (tests/apiserver.py), one over HTTPS with a
certificate made here by openssl."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from saipling.config.settings import Settings
from saipling.embeddings.http_guard import DeferredTrust
from saipling.embeddings.openai import OpenAIProvider
from saipling.errors import ProviderError


def _provider(url: str) -> OpenAIProvider:
    return OpenAIProvider(Settings(provider="openai", base_url=url + "/v1", openai_api_key="sk-test", dimensions=8))


def _cas(provider: OpenAIProvider) -> int:
    """The CA certificates in the context of the provider's client (httpx 0.28's transport and httpcore's pool)."""
    client = provider.http._http()
    return client._transport._pool._ssl_context.cert_store_stats()["x509_ca"]  # type: ignore[attr-defined]


def test_a_query_to_a_plain_http_server_reads_no_certificates(api_server: FakeEmbeddingAPI) -> None:  # noqa: F811
    provider = _provider(api_server.url)
    try:
        assert len(provider.embed_query("storm over the harbour")) == 8 and api_server.count == 1
        assert _cas(provider) == 0
    finally:
        provider.close()


def test_the_deferred_context_is_httpx_default_once_a_connection_is_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    ctx = DeferredTrust()
    assert ctx.cert_store_stats()["x509_ca"] == 0
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    ctx.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="example.org")
    default = httpx.create_ssl_context()
    assert ctx.cert_store_stats() == default.cert_store_stats() and default.cert_store_stats()["x509_ca"] > 50
    assert ctx.check_hostname == default.check_hostname and ctx.verify_mode == default.verify_mode
    assert ctx.minimum_version == default.minimum_version and ctx.options == default.options
    assert ctx.verify_flags == default.verify_flags  # (3.13+: X509_STRICT and PARTIAL_CHAIN, as httpx's has)
    assert ctx.maximum_version == default.maximum_version and ctx.security_level == default.security_level


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)]
        + ["-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_an_https_server_is_verified_against_the_trusted_cas(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A self-signed server is refused (no request reaches it), and trusted through SSL_CERT_FILE as httpx does."""
    cert, key = certificate
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    api = FakeEmbeddingAPI().start(tls=server_side)  # (a `with` would start it again, plain)
    try:
        assert api.url.startswith("https://127.0.0.1:")
        refused = _provider(api.url)
        try:
            with pytest.raises(ProviderError, match="(?i)certificate|ssl"):
                refused.embed_query("storm over the harbour")
            assert api.count == 0 and _cas(refused) > 50  # (certifi's CAs, read for that connection)
        finally:
            refused.close()
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        trusted = _provider(api.url)
        try:
            assert len(trusted.embed_query("storm over the harbour")) == 8 and api.count == 1
            assert _cas(trusted) == 1
        finally:
            trusted.close()
    finally:
        api.stop()
