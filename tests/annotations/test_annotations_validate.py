"""`autoscaler validate`: offline lint of the annotations in multi-document YAML manifests."""

import io
from pathlib import Path

import pytest

from autoscaler import validate

P = "autoscaler.dsec.io/"

GOOD = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: chat
  namespace: ml
  annotations:
    autoscaler.dsec.io/enabled: "true"
    autoscaler.dsec.io/max-replicas: "8"
    autoscaler.dsec.io/target-qps-per-replica: "4"
    autoscaler.dsec.io/status: '{"written": "by the controller"}'
spec:
  replicas: 2
"""

BAD = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: embed
  namespace: ml
  annotations:
    autoscaler.dsec.io/enabled: "true"
    autoscaler.dsec.io/min-replicas: "5"
    autoscaler.dsec.io/max-replicas: "3"
    autoscaler.dsec.io/target-queue-per-replica: "2"
    autoscaler.dsec.io/max-replica: "3"
"""

PLAIN = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: ml
spec:
  replicas: 3
"""

SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: chat
  namespace: ml
spec:
  ports: [{port: 80}]
"""


def run(tmp_path: Path, *texts: str) -> tuple[int, str, str]:
    paths = []
    for i, text in enumerate(texts):
        path = tmp_path / f"m{i}.yaml"
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    out, err = io.StringIO(), io.StringIO()
    code = validate.main(paths, out, err)
    return code, out.getvalue(), err.getvalue()


def lint(text: str) -> list[str]:
    return validate.validate_text(text, source="deploy.yaml")


def test_good_and_bad_deployment_in_one_file(tmp_path: Path) -> None:
    """A good and a bad Deployment in one file: exit 1, one line per problem of the bad one."""
    code, out, err = run(tmp_path, "---\n".join([GOOD, SERVICE, BAD, PLAIN]))
    source = tmp_path / "m0.yaml"
    assert code == 1
    assert err == ""
    assert out.splitlines() == [
        f"{source}: Deployment ml/embed: {P}max-replica: unknown key; "
        f"did you mean {P}max-replicas?",
        f'{source}: Deployment ml/embed: {P}min-replicas="5": must be <= {P}max-replicas (3)',
    ]


def test_clean_file_passes(tmp_path: Path) -> None:
    """A file whose annotated Deployments are all valid exits 0 with a one-line summary."""
    code, out, err = run(tmp_path, "---\n".join([GOOD, SERVICE, PLAIN]))
    assert (code, out, err) == (0, "OK: 1 autoscaled Deployment in 1 file, no problems\n", "")


def test_several_files_are_summed(tmp_path: Path) -> None:
    """The summary counts Deployments and files across every file given."""
    code, out, _ = run(tmp_path, GOOD, GOOD.replace("name: chat", "name: chat2"))
    assert (code, out) == (0, "OK: 2 autoscaled Deployments in 2 files, no problems\n")


def test_yaml_syntax_error_gives_the_line(tmp_path: Path) -> None:
    """Broken YAML is one problem that names the file and line."""
    code, out, _ = run(tmp_path, "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a: b\n")
    assert code == 1
    assert (
        out == f"{tmp_path / 'm0.yaml'}:4: YAML syntax error: mapping values are not allowed here\n"
    )


def test_documents_before_a_syntax_error_are_still_checked() -> None:
    """A syntax error in a later document does not hide problems in earlier ones."""
    lines = lint(BAD + "---\nname: a: b\n")
    assert len(lines) == 3
    assert lines[-1].startswith("deploy.yaml:13: YAML syntax error: ")


def test_unsafe_yaml_tags_are_refused() -> None:
    """Python object tags are a YAML error, never constructed."""
    lines = lint("!!python/object/apply:os.system ['true']\n")
    assert len(lines) == 1
    assert lines[0].startswith("deploy.yaml:1: YAML syntax error: ")


def test_unreadable_file_exits_2(tmp_path: Path) -> None:
    """A missing file is reported on stderr with exit code 2, after linting the others."""
    good = tmp_path / "good.yaml"
    good.write_text(BAD, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = validate.main([str(tmp_path / "missing.yaml"), str(good)], out, err)
    assert code == 2
    assert (
        err.getvalue() == f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory\n"
    )
    assert len(out.getvalue().splitlines()) == 2


def test_binary_file_exits_2(tmp_path: Path) -> None:
    """A file that is not UTF-8 text is unreadable, not a crash."""
    path = tmp_path / "blob.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    out, err = io.StringIO(), io.StringIO()
    assert validate.main([str(path)], out, err) == 2
    assert err.getvalue() == f"{path}: cannot read: not UTF-8 text\n"


def test_no_paths_exits_2() -> None:
    """Without a file there is nothing to validate."""
    out, err = io.StringIO(), io.StringIO()
    assert validate.main([], out, err) == 2
    assert "no manifest" in err.getvalue()


def test_list_items_are_checked() -> None:
    """Deployments inside a `kind: List` are linted like top-level ones."""
    indented = "".join("    " + line + "\n" for line in BAD.splitlines())
    text = "apiVersion: v1\nkind: List\nitems:\n  - " + indented.lstrip()
    lines = lint(text)
    assert [line.split(": ", 2)[1] for line in lines] == ["Deployment ml/embed"] * 2


def test_deployment_without_annotations_is_skipped() -> None:
    """A Deployment that does not mention the autoscaler is none of its business."""
    assert lint(PLAIN) == []


def test_switched_off_deployment_is_skipped() -> None:
    """enabled "false" keeps its settings without linting them."""
    assert lint(BAD.replace('enabled: "true"', 'enabled: "false"')) == []


def test_settings_without_enabled_are_reported() -> None:
    """Settings with a misspelt switch say that the autoscaler ignores them, and suggest."""
    text = GOOD.replace(f'{P}enabled: "true"', f'{P}enable: "true"')
    assert lint(text) == [
        f"deploy.yaml: Deployment ml/chat: {P}enable: unknown key; did you mean {P}enabled?",
        f"deploy.yaml: Deployment ml/chat: {P}enabled is missing, so the autoscaler ignores "
        f"the {P} annotations here",
    ]


def test_bad_enabled_value_is_reported() -> None:
    """An enabled value other than true or false is a problem, not a silent opt-out."""
    assert lint(GOOD.replace('enabled: "true"', 'enabled: "yes"')) == [
        f'deploy.yaml: Deployment ml/chat: {P}enabled="yes": must be "true" or "false"'
    ]


def test_unquoted_values_are_reported_and_parsed() -> None:
    """YAML numbers and booleans are not strings: say so, and still check the value."""
    text = GOOD.replace('"true"', "true").replace('max-replicas: "8"', "max-replicas: 8.5")
    assert lint(text) == [
        f"deploy.yaml: Deployment ml/chat: {P}enabled: YAML reads true as a boolean; "
        f'annotations must be strings: write "true" in quotes',
        f"deploy.yaml: Deployment ml/chat: {P}max-replicas: YAML reads 8.5 as a number; "
        f'annotations must be strings: write "8.5" in quotes',
        f'deploy.yaml: Deployment ml/chat: {P}max-replicas="8.5": '
        "must be a whole number from 1 to 10000",
    ]


def test_annotations_on_the_pod_template_are_reported() -> None:
    """Our keys on the pod template have no effect and are reported as misplaced."""
    text = GOOD + "  template:\n    metadata:\n      annotations:\n" + f'        {P}window: "1m"\n'
    assert lint(text) == [
        f"deploy.yaml: Deployment ml/chat: {P}window in spec.template.metadata.annotations has "
        "no effect; put it in the Deployment's metadata.annotations"
    ]


def test_annotations_on_other_kinds_are_reported() -> None:
    """Our keys on a StatefulSet do nothing, and the lint says where they belong."""
    text = BAD.replace("kind: Deployment", "kind: StatefulSet")
    assert lint(text) == [
        f"deploy.yaml: StatefulSet ml/embed: {P}enabled, {P}min-replicas, {P}max-replicas "
        "and 2 more: they only take effect on an apps/v1 Deployment"
    ]


def test_old_deployment_api_is_reported() -> None:
    """An annotated Deployment of a removed API version is reported, not parsed."""
    text = GOOD.replace("apps/v1", "extensions/v1beta1")
    assert lint(text) == [
        f"deploy.yaml: Deployment ml/chat: {P}enabled, {P}max-replicas, "
        f"{P}target-qps-per-replica and 1 more: the autoscaler manages apps/v1 Deployments only"
    ]


@pytest.mark.parametrize(
    ("scaler", "title"),
    [
        (
            "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n"
            "metadata: {name: chat-hpa, namespace: ml}\n"
            "spec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: chat}\n",
            "HorizontalPodAutoscaler ml/chat-hpa",
        ),
        (
            "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\n"
            "metadata: {name: chat-keda, namespace: ml}\n"
            "spec:\n  scaleTargetRef: {name: chat}\n",
            "ScaledObject ml/chat-keda",
        ),
    ],
)
def test_second_owner_of_replicas_is_reported(scaler: str, title: str) -> None:
    """An HPA or KEDA ScaledObject on an autoscaled Deployment is a conflict (DESIGN §7)."""
    assert lint(GOOD + "---\n" + scaler) == [
        f"deploy.yaml: Deployment ml/chat: {title} also scales it; the autoscaler refuses a "
        "Deployment with two owners of replicas: remove one of them"
    ]


def test_scaler_conflict_is_reported_for_an_invalid_deployment_too() -> None:
    """The two-owner conflict is reported alongside the annotation problems."""
    hpa = (
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n"
        "metadata: {name: h, namespace: ml}\n"
        "spec:\n  scaleTargetRef: {kind: Deployment, name: embed}\n"
    )
    lines = lint(BAD + "---\n" + hpa)
    assert len(lines) == 3
    assert lines[-1].startswith("deploy.yaml: Deployment ml/embed: HorizontalPodAutoscaler ml/h ")


def test_scaler_in_another_namespace_is_no_conflict() -> None:
    """An HPA for a same-named Deployment elsewhere is not a conflict."""
    hpa = (
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n"
        "metadata: {name: chat, namespace: other}\n"
        "spec:\n  scaleTargetRef: {kind: Deployment, name: chat}\n"
    )
    assert lint(GOOD + "---\n" + hpa) == []


def test_scaler_conflict_across_files(tmp_path: Path) -> None:
    """The conflict check spans every file of one run."""
    hpa = (
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n"
        "metadata: {name: h, namespace: ml}\n"
        "spec:\n  scaleTargetRef: {kind: Deployment, name: chat}\n"
    )
    code, out, _ = run(tmp_path, GOOD, hpa)
    assert code == 1
    assert "HorizontalPodAutoscaler ml/h also scales it" in out


def test_namespace_defaults_to_default() -> None:
    """A Deployment without a namespace is shown in `default`, as kubectl would create it."""
    lines = lint(BAD.replace("  namespace: ml\n", ""))
    assert lines[0].startswith("deploy.yaml: Deployment default/embed: ")


def test_non_object_documents_are_reported() -> None:
    """A YAML document that is not a mapping cannot be a Kubernetes object."""
    assert lint("- a\n- b\n---\n\n---\nplain\n") == [
        "deploy.yaml: document 1: not a Kubernetes object (a mapping)",
        "deploy.yaml: document 3: not a Kubernetes object (a mapping)",
    ]


def test_annotations_that_are_not_a_mapping_are_reported() -> None:
    """metadata.annotations as a list is a problem, not a crash."""
    text = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a\n  annotations: [x]\n"
    assert lint(text) == [
        "deploy.yaml: Deployment default/a: metadata.annotations must be a mapping of strings"
    ]


def test_hostile_names_and_values_are_escaped() -> None:
    """Names and values from the manifest reach the output escaped and bounded."""
    text = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n"
        '  name: "evil\\nname"\n  namespace: ml\n  annotations:\n'
        f'    {P}enabled: "true"\n'
        f'    {P}max-replicas: "3\\u202e"\n'
        f'    {P}target-qps-per-replica: "{"9" * 10_000}"\n'
    )
    lines = lint(text)
    assert lines == [
        f'deploy.yaml: Deployment ml/"evil\\nname": {P}max-replicas="3\\u202e": '
        "must be a whole number from 1 to 10000",
        f'deploy.yaml: Deployment ml/"evil\\nname": {P}target-qps-per-replica="{"9" * 80}..." '
        "(10000 characters): must be a decimal number > 0",
    ]
    assert all(line.isprintable() for line in lines)


def test_deeply_nested_yaml_is_not_a_crash() -> None:
    """A pathologically nested document is reported, not a RecursionError."""
    lines = lint("a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert len(lines) == 1
    assert lines[0].startswith("deploy.yaml")
