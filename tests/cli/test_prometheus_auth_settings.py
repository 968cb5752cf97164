"""The settings that reach a Prometheus behind auth: parsing, the rules across them, the errors at
start, and secrets that no repr, log or error line shows."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import pydantic
import pytest

from autoscaler import app, errors, settings

from .conftest import Outcome

Run = Callable[..., Outcome]
SECRET = "s3cret-token-value"
PREFIX = "AUTOSCALER_PROMETHEUS__"


def test_auth_settings_default_to_plain_http_without_credentials() -> None:
    """Unset, no credentials, no header and the system's trust are used."""
    prom = settings.Settings().prometheus
    assert (prom.bearer_token_file, prom.bearer_token, prom.basic_auth_username) == (None,) * 3
    assert (prom.basic_auth_password_file, prom.basic_auth_password, prom.ca_file) == (None,) * 3
    assert (prom.insecure_skip_verify, prom.headers) == (False, {})
    assert app.prometheus_access(prom).request_headers() == {}


def test_a_bearer_token_variable_is_accepted_and_never_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`AUTOSCALER_PROMETHEUS__BEARER_TOKEN` is sent as the bearer token and hidden elsewhere."""
    monkeypatch.setenv(f"{PREFIX}BEARER_TOKEN", SECRET)
    config = settings.Settings()

    assert SECRET not in repr(config)
    assert SECRET not in str(config)
    assert SECRET not in config.model_dump_json()
    access = app.prometheus_access(config.prometheus)
    assert SECRET not in repr(access)
    assert access.request_headers() == {"Authorization": f"Bearer {SECRET}"}


def test_basic_auth_reads_its_password_from_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A user name and a password file make a basic-auth header; the file's newline is dropped."""
    password = tmp_path / "password"
    password.write_text("pässword\n")
    monkeypatch.setenv(f"{PREFIX}BASIC_AUTH_USERNAME", "autoscaler")
    monkeypatch.setenv(f"{PREFIX}BASIC_AUTH_PASSWORD_FILE", str(password))

    access = app.prometheus_access(settings.Settings().prometheus)

    pair = base64.b64encode("autoscaler:pässword".encode()).decode()
    assert access.request_headers() == {"Authorization": f"Basic {pair}"}


def test_headers_are_comma_separated_name_value_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Name=value,Name2=value2` gives one header each, blanks around them dropped."""
    monkeypatch.setenv(f"{PREFIX}HEADERS", " X-Scope-OrgID=tenant-a|tenant-b , X-Team=ml,")
    config = settings.Settings()

    assert config.prometheus.headers == {"X-Scope-OrgID": "tenant-a|tenant-b", "X-Team": "ml"}
    assert app.prometheus_access(config.prometheus).request_headers() == {
        "X-Scope-OrgID": "tenant-a|tenant-b",
        "X-Team": "ml",
    }


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"HEADERS": "Authorization=Bearer x"}, "carries credentials"),
        ({"HEADERS": "X-Scope-OrgID"}, "is not Name=value"),
        ({"HEADERS": "X Scope=a"}, "is not an HTTP header name"),
        ({"HEADERS": "X-A=\x7f"}, "printable ASCII"),
        ({"BASIC_AUTH_USERNAME": "a:b", "BASIC_AUTH_PASSWORD": "p"}, "holds no ':'"),
        ({"BASIC_AUTH_USERNAME": "a"}, "basic auth needs both"),
        ({"BASIC_AUTH_PASSWORD": "p"}, "basic auth needs both"),
        ({"BEARER_TOKEN": "t", "BEARER_TOKEN_FILE": "/t"}, "set one of"),
        ({"CA_FILE": "/ca.pem"}, "apply to an https URL"),
        ({"INSECURE_SKIP_VERIFY": "true"}, "apply to an https URL"),
        (
            {"URL": "https://p:9090", "CA_FILE": "/ca.pem", "INSECURE_SKIP_VERIFY": "true"},
            "are exclusive",
        ),
        ({"URL": "http://user:pw@p:9090"}, "carries no user or password"),
    ],
)
def test_auth_settings_refuse_bad_values(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    """Bad headers, half a basic auth, two tokens, TLS on plain HTTP: refused at start."""
    for name, value in variables.items():
        monkeypatch.setenv(PREFIX + name, value)
    with pytest.raises(pydantic.ValidationError, match=message):
        settings.Settings()


def test_a_bearer_token_and_basic_auth_together_is_one_line_naming_both(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both kinds of credentials end `run` with one line naming both variables, no secret."""
    monkeypatch.setenv(f"{PREFIX}BEARER_TOKEN", SECRET)
    monkeypatch.setenv(f"{PREFIX}BASIC_AUTH_USERNAME", "autoscaler")
    monkeypatch.setenv(f"{PREFIX}BASIC_AUTH_PASSWORD", SECRET)

    result = run("run", "--kubeconfig", tmp_path / "missing")

    assert result.code == 2
    assert result.err == (
        "error: AUTOSCALER_PROMETHEUS: AUTOSCALER_PROMETHEUS__BEARER_TOKEN and "
        "AUTOSCALER_PROMETHEUS__BASIC_AUTH_USERNAME are exclusive: send a bearer token or basic "
        "auth, not both\n"
    )


@pytest.mark.parametrize("variable", ["BEARER_TOKEN_FILE", "BASIC_AUTH_PASSWORD_FILE"])
def test_a_missing_credential_file_is_one_line_at_start(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """A credential file that cannot be read ends `run` before it connects: one line, code 2."""
    monkeypatch.setenv(PREFIX + variable, str(tmp_path / "gone"))
    if variable.startswith("BASIC"):
        monkeypatch.setenv(f"{PREFIX}BASIC_AUTH_USERNAME", "autoscaler")

    result = run("run", "--kubeconfig", tmp_path / "missing")

    assert result.code == 2
    assert result.err == (
        f"error: {PREFIX}{variable}: cannot read {tmp_path / 'gone'}: No such file or directory\n"
    )


def test_an_unreadable_ca_bundle_stops_the_start(tmp_path: Path) -> None:
    """A CA bundle that is no PEM is a `ConfigError` naming the variable."""
    bundle = tmp_path / "ca.pem"
    bundle.write_text("not a certificate")
    config = settings.PrometheusSettings(url="https://prometheus:9090", ca_file=bundle)

    with pytest.raises(errors.ConfigError, match=rf"^{PREFIX}CA_FILE: cannot load a CA bundle"):
        app.prometheus_access(config)


def test_no_command_prints_the_token(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run` and `explain` failing at start, and `validate`, print nothing of the token."""
    monkeypatch.setenv(f"{PREFIX}BEARER_TOKEN", SECRET)
    monkeypatch.setenv("AUTOSCALER_LOG__LEVEL", "debug")
    results = [
        run("run", "--kubeconfig", tmp_path / "missing"),
        run("explain", "ns/chat", "--kubeconfig", tmp_path / "missing"),
        run("validate", tmp_path / "missing.yaml"),
    ]

    assert all(result.code == 2 for result in results)
    for result in results:
        assert SECRET not in result.out + result.err


def test_run_flags_set_the_token_file_and_keep_the_other_variables(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--prometheus-bearer-token-file` is read at start, beside the group's other variables."""
    monkeypatch.setenv(f"{PREFIX}HEADERS", "X-Scope-OrgID=tenant-a")
    monkeypatch.setenv(f"{PREFIX}BEARER_TOKEN", SECRET)

    both = run("run", "--prometheus-bearer-token-file", tmp_path / "gone")
    monkeypatch.delenv(f"{PREFIX}BEARER_TOKEN")
    gone = run(
        "run",
        "--kubeconfig",
        tmp_path / "missing",
        "--prometheus-bearer-token-file",
        tmp_path / "gone",
    )

    assert both.err.startswith("error: AUTOSCALER_PROMETHEUS: set one of ")
    assert gone.err == (
        f"error: {PREFIX}BEARER_TOKEN_FILE: cannot read {tmp_path / 'gone'}: "
        "No such file or directory\n"
    )
