"""The Prometheus adapters reaching a Prometheus behind auth: basic auth and TLS served by the
real Prometheus (`--web.config.file`), a bearer token and a tenant header asked for by a
reverse proxy in front of it (`prom.gate`: Prometheus checks neither itself)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from prom import certs, server
from prom import gate as gate_
from prom.fixtures import Stack

from autoscaler import errors
from autoscaler.adapters import prometheus
from autoscaler.core import model

from .test_prometheus import serving, workloads

SATURATION = model.Signal.SATURATION
VLLM = prometheus.PRESETS["vllm"]

USER = "autoscaler"
PASSWORD = "correct horse"
# bcrypt (cost 4, the least) of PASSWORD, computed once with libxcrypt's crypt(3): the `bcrypt`
# package is not among the test dependencies. Prometheus keeps only the hash.
PASSWORD_BCRYPT = "$2b$04$Q0ZJtqCkWm1vF6ysU3Xq8e6yq5rdsCnWkdfdNbEvcpyBqqaZNN7B6"
TENANT = "tenant-a"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> certs.Certificates:
    """A throwaway CA and the server certificate it signs for 127.0.0.1."""
    binary = certs.openssl()
    if binary is None:
        pytest.skip("no `openssl` command to make test certificates with")
    return certs.make(tmp_path_factory.mktemp("certs"), binary=binary)


@pytest.fixture(scope="module")
def secured(
    prometheus_binary: str,
    prometheus_stack: Stack,
    certificates: certs.Certificates,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[server.Prometheus]:
    """A Prometheus serving HTTPS with the test CA's certificate and asking for basic auth,
    scraping the session's first exporter."""
    web_config = server.WebConfig(
        cert_file=certificates.cert_file,
        key_file=certificates.key_file,
        ca_file=certificates.ca_file,
        users={USER: PASSWORD_BCRYPT},
        user=(USER, PASSWORD),
    )
    with server.running(
        prometheus_binary,
        tmp_path_factory.mktemp("secured"),
        targets=[prometheus_stack.upper.target],
        web=web_config,
    ) as secured:
        yield secured


@pytest.fixture
async def gate(stack: Stack) -> AsyncIterator[gate_.Gate]:
    """A gate in front of the session's Prometheus, letting `first-token` through."""
    started = gate_.Gate(stack.prometheus.url, token="first-token", tenant=TENANT)
    await started.start()
    yield started
    await started.stop()


async def read_queue(url: str, access: prometheus.Access, namespace: str) -> float:
    """One service's queue, read once through a fresh `MetricsSource` with `access`."""
    services = {"a/chat": serving(namespace, "chat-0")}
    source = prometheus.MetricsSource(
        prometheus.Client(url, access=access), scrape_interval_s=server.SCRAPE_INTERVAL_S
    )
    try:
        values = await source.sample(workloads(services, "a/chat"), 0.0)
    finally:
        await source.client.close()
    return float(values[0, SATURATION])


async def read_in_flight(url: str, access: prometheus.Access, namespace: str) -> dict[str, float]:
    """The drain's in-flight count of one pod, through a fresh `HealthQueries` with `access`."""
    health = prometheus.HealthQueries(
        prometheus.Client(url, access=access), scrape_interval_s=server.SCRAPE_INTERVAL_S
    )
    try:
        return await health.in_flight(namespace, VLLM, ["chat-0"])
    finally:
        await health.client.close()


async def queue_scraped(stack: Stack, prometheus_: server.Prometheus, namespace: str) -> None:
    """Set a queue of 3 on `namespace`'s chat-0 and wait until `prometheus_` has scraped it."""
    stack.upper.set_vllm(namespace, "chat-0", waiting=3, running=1)
    await prometheus_.wait_for_series(
        f'vllm:num_requests_running{{namespace="{namespace}"}}', lambda result: len(result) == 1
    )


def basic(password: str = PASSWORD) -> tuple[str, prometheus.Secret]:
    return USER, prometheus.SecretText(password)


# -- Basic auth and TLS, served by Prometheus itself ----------------------------------------------


async def test_basic_auth_and_a_ca_bundle_reach_a_secured_prometheus(
    stack: Stack, secured: server.Prometheus, certificates: certs.Certificates, unique: str
) -> None:
    """With the right password and the CA bundle, the metrics and the health queries answer."""
    await queue_scraped(stack, secured, unique)
    access = prometheus.Access(basic_auth=basic(), ca_file=certificates.ca_file)

    assert await read_queue(secured.url, access, unique) == 3.0
    assert await read_in_flight(secured.url, access, unique) == {"chat-0": 4.0}


@pytest.mark.parametrize("credentials", [None, basic("wrong horse")], ids=["missing", "wrong"])
async def test_missing_or_wrong_basic_auth_reads_as_a_refusal(
    secured: server.Prometheus,
    certificates: certs.Certificates,
    credentials: tuple[str, prometheus.Secret] | None,
) -> None:
    """Without the right password both paths raise an `ObservationError` saying HTTP 401."""
    access = prometheus.Access(basic_auth=credentials, ca_file=certificates.ca_file)

    with pytest.raises(errors.ObservationError, match="refused: HTTP 401 Unauthorized") as metrics:
        await read_queue(secured.url, access, "ns-a")
    with pytest.raises(errors.ObservationError, match="refused: HTTP 401 Unauthorized"):
        await read_in_flight(secured.url, access, "ns-a")
    assert not isinstance(metrics.value, prometheus.QueryRejected)  # an outage: never bisected
    assert PASSWORD not in str(metrics.value)
    assert "wrong horse" not in str(metrics.value)


async def test_a_server_signed_by_an_unknown_ca_is_refused(secured: server.Prometheus) -> None:
    """Without the CA bundle the system's trust refuses the certificate: the query fails."""
    access = prometheus.Access(basic_auth=basic())

    with pytest.raises(errors.ObservationError, match="certificate verify failed"):
        await read_queue(secured.url, access, "ns-a")


async def test_insecure_skip_verify_reaches_the_server_without_the_ca(
    stack: Stack, secured: server.Prometheus, unique: str
) -> None:
    """With insecure-skip-verify and no CA bundle, the query answers."""
    await queue_scraped(stack, secured, unique)
    access = prometheus.Access(basic_auth=basic(), insecure_skip_verify=True)

    assert await read_queue(secured.url, access, unique) == 3.0


def test_an_unreadable_ca_bundle_stops_the_start(tmp_path: Path) -> None:
    """A CA bundle that is missing or not PEM is a `ConfigError` naming the setting."""
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")

    for path in (tmp_path / "missing.pem", garbage):
        with pytest.raises(errors.ConfigError, match=r"^CA_FILE: cannot load a CA bundle from "):
            prometheus.Access(ca_file=path, ca_setting="CA_FILE")


# -- A bearer token and a tenant header, asked for by a gateway ----------------------------------


async def test_a_bearer_token_and_the_tenant_header_pass_the_gateway(
    stack: Stack, gate: gate_.Gate, unique: str, tmp_path: Path
) -> None:
    """A token from a file and `X-Scope-OrgID` go with every query of both paths."""
    await queue_scraped(stack, stack.prometheus, unique)
    token = tmp_path / "token"
    token.write_text("first-token\n")
    access = prometheus.Access(
        bearer_token=prometheus.SecretFile(token, setting="TOKEN"),
        headers={"X-Scope-OrgID": TENANT},
    )

    assert await read_queue(gate.url, access, unique) == 3.0
    assert await read_in_flight(gate.url, access, unique) == {"chat-0": 4.0}


@pytest.mark.parametrize(
    ("token", "headers", "refusal"),
    [
        (None, {"X-Scope-OrgID": TENANT}, "HTTP 401 Unauthorized"),
        ("stolen-token", {"X-Scope-OrgID": TENANT}, "HTTP 401 Unauthorized"),
        ("first-token", {}, "HTTP 403 Forbidden"),
    ],
    ids=["no-token", "wrong-token", "no-tenant"],
)
async def test_a_gateway_refusal_reads_as_401_or_403(
    gate: gate_.Gate, token: str | None, headers: dict[str, str], refusal: str
) -> None:
    """A missing or wrong token, or no tenant, is an `ObservationError` naming the status and
    what the gateway said, not a complaint about its non-JSON answer."""
    secret = None if token is None else prometheus.SecretText(token)
    access = prometheus.Access(bearer_token=secret, headers=headers)

    with pytest.raises(errors.ObservationError, match=f"refused: {refusal}") as refused:
        await read_queue(gate.url, access, "ns-a")
    assert "not JSON" not in str(refused.value)
    assert "the server said: 'invalid bearer token'" in str(refused.value) or (
        "the server said: 'no org id'" in str(refused.value)
    )


async def test_a_rotated_token_file_is_read_at_the_next_query(
    stack: Stack, gate: gate_.Gate, unique: str, tmp_path: Path
) -> None:
    """When the kubelet swaps in a new token file, the next query sends the new token."""
    await queue_scraped(stack, stack.prometheus, unique)
    token = tmp_path / "token"
    token.write_text("first-token")
    access = prometheus.Access(
        bearer_token=prometheus.SecretFile(token, setting="TOKEN"),
        headers={"X-Scope-OrgID": TENANT},
    )
    services = {"a/chat": serving(unique, "chat-0")}
    source = prometheus.MetricsSource(
        prometheus.Client(gate.url, access=access),
        scrape_interval_s=server.SCRAPE_INTERVAL_S,
    )
    load = workloads(services, "a/chat")
    try:
        assert (await source.sample(load, 0.0))[0, SATURATION] == 3.0
        gate.token = "second-token"  # the old token expires
        with pytest.raises(errors.ObservationError, match="HTTP 401"):
            await source.sample(load, 0.0)
        # Written beside and renamed over, as the kubelet's atomic writer does: a new inode.
        (tmp_path / "token.new").write_text("second-token")
        os.replace(tmp_path / "token.new", token)

        assert (await source.sample(load, 0.0))[0, SATURATION] == 3.0
    finally:
        await source.client.close()


def test_a_token_file_rewritten_in_place_is_read_again(tmp_path: Path) -> None:
    """A token file changed in place (another modification time) is read again."""
    token = tmp_path / "token"
    token.write_text("first-token")
    secret = prometheus.SecretFile(token, setting="TOKEN")
    token.write_text("other-token")
    stamp = token.stat()
    os.utime(token, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1_000_000_000))

    assert secret.value() == "other-token"


def test_a_missing_or_empty_token_file_stops_the_start(tmp_path: Path) -> None:
    """A token file that is missing or empty is a `ConfigError` naming the setting and path."""
    empty = tmp_path / "empty"
    empty.write_text("\n")

    with pytest.raises(errors.ConfigError, match=r"^TOKEN: cannot read .*missing: No such file"):
        prometheus.SecretFile(tmp_path / "missing", setting="TOKEN")
    with pytest.raises(errors.ConfigError, match=r"^TOKEN: cannot read .*empty: the file is empty"):
        prometheus.SecretFile(empty, setting="TOKEN")


def test_a_token_file_gone_later_holds_rather_than_send_an_old_token(tmp_path: Path) -> None:
    """A token file that vanishes after start fails the query (services hold)."""
    token = tmp_path / "token"
    token.write_text("first-token")
    secret = prometheus.SecretFile(token, setting="TOKEN")
    token.unlink()

    with pytest.raises(errors.ObservationError, match=r"^TOKEN: cannot read"):
        secret.value()


def test_access_never_shows_a_secret(tmp_path: Path) -> None:
    """The `repr` of the access and its secrets name the kind, files and header names only."""
    token = tmp_path / "token"
    token.write_text("file-secret")
    by_file = prometheus.Access(
        bearer_token=prometheus.SecretFile(token, setting="TOKEN"),
        headers={"X-Scope-OrgID": TENANT},
    )
    by_text = prometheus.Access(basic_auth=basic("text-secret"))

    shown = repr(by_file) + repr(by_text) + repr(by_file.bearer_token) + repr(by_text.basic_auth)
    assert "file-secret" not in shown
    assert "text-secret" not in shown
    assert "bearer" in repr(by_file)
    assert "X-Scope-OrgID" in repr(by_file)
    assert TENANT not in repr(by_file)


def test_credentials_in_a_header_are_refused() -> None:
    """`Authorization` is set by the credentials, never as an extra header."""
    with pytest.raises(ValueError, match="not a header"):
        prometheus.Access(headers={"authorization": "Bearer x"})
