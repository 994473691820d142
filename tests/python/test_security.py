"""Tokens and TLS as tagictl takes them, against a real coordinator (no workers).

The API token (token= or token_file=) goes as "authorization: Bearer"; a
missing or wrong one is UNAUTHENTICATED with the server's message. With
tls_ca= (and tls_cert=/tls_key= for mutual TLS) the client talks TLS to a
coordinator whose certificate a throwaway CA (openssl) signed; plaintext to
it fails as UNAVAILABLE with tagictl's hint. Skips without openssl.
"""
import os
import shutil
import subprocess

import grpc
import pytest

from cluster import Cluster
from conftest import bin_dir
from tagi_ddp import Client, TagiError

API_TOKEN = "py-api-token-0123456789"

PKI = """set -e
K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'
openssl req -x509 $K -keyout ca.key -out ca.pem -days 1 -subj /CN=tagi-py-ca
openssl req $K -keyout server.key -out server.csr -subj /CN=localhost
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
  -out server.pem -extfile server.ext
openssl req $K -keyout client.key -out client.csr -subj /CN=py-client
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -out client.pem
"""


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (tools/install_deps.sh installs it)")
    tmp = str(tmp_path_factory.mktemp("security"))
    subprocess.run(["/bin/sh", "-c", PKI], cwd=tmp, check=True, capture_output=True)
    tokens = os.path.join(tmp, "api.tokens")
    with open(tokens, "w", encoding="utf-8") as f:
        f.write(f"# users\n\nbob-token\n{API_TOKEN}\n")
    with open(os.path.join(tmp, "mine.token"), "w", encoding="utf-8") as f:
        f.write(f"# mine\n{API_TOKEN}\n")
    pki = lambda name: os.path.join(tmp, name)  # noqa: E731
    cluster = Cluster(bin_dir(), tmp, workers=0, world=1, coordinator_flags=[
        "--api-tokens-file", tokens, "--tls-cert", pki("server.pem"),
        "--tls-key", pki("server.key"), "--tls-client-ca", pki("ca.pem")])
    try:
        yield cluster.address, pki
    finally:
        cluster.stop()


def test_token_and_mutual_tls_reach_the_coordinator(secured):
    address, pki = secured
    with Client(address, token_file=pki("mine.token"), tls_ca=pki("ca.pem"),
                tls_cert=pki("client.pem"), tls_key=pki("client.key")) as client:
        assert client.list() == []
    with Client(address, token=API_TOKEN, tls_ca=pki("ca.pem"), tls_cert=pki("client.pem"),
                tls_key=pki("client.key")) as client:
        assert client.workers() == []


@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_missing_or_wrong_token_is_unauthenticated_with_the_servers_message(secured, token):
    address, pki = secured
    with Client(address, token=token, tls_ca=pki("ca.pem"), tls_cert=pki("client.pem"),
                tls_key=pki("client.key")) as client:
        with pytest.raises(TagiError) as e:
            client.list()
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert "token" in e.value.message and "(check the token)" in str(e.value)


def test_plaintext_to_a_tls_coordinator_is_unavailable_with_a_hint(secured):
    address, _ = secured
    with Client(address, token=API_TOKEN, timeout=3) as client:
        with pytest.raises(TagiError) as e:
            client.list()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert "if the coordinator serves TLS, pass tls_ca" in str(e.value)


def test_token_file_with_more_than_one_token_is_refused(tmp_path):
    path = tmp_path / "two.tokens"
    path.write_text("a\nb\n")
    with pytest.raises(ValueError, match="holds 2 tokens; expected exactly one"):
        Client("127.0.0.1:1", token_file=str(path))
