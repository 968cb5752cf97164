"""`autoscaler validate`: offline lint of the annotations in multi-document YAML manifests."""

import io
import json
from pathlib import Path

import pytest
import yaml

from autoscaler import validate

P = "autoscaler.dsec.io/"
D = "deploy.yaml: document 1: Deployment ml"
"""The start of a finding on the first document's Deployment in namespace ml."""

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
  selector:
    matchLabels: {app: chat}
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
        f"{source}: document 3: Deployment ml/embed: {P}max-replica: unknown key; "
        f"did you mean {P}max-replicas?",
        f"{source}: document 3: Deployment ml/embed: "
        f'{P}min-replicas="5": must be <= {P}max-replicas (3)',
    ]


def test_clean_file_passes(tmp_path: Path) -> None:
    """A file whose annotated Deployments are all valid exits 0 with a one-line summary."""
    code, out, err = run(tmp_path, "---\n".join([GOOD, SERVICE, PLAIN]))
    assert (code, out, err) == (0, "OK: 1 autoscaled Deployment in 1 file, no problems\n", "")


def test_several_files_are_summed(tmp_path: Path) -> None:
    """The summary counts Deployments and files across every file given."""
    code, out, _ = run(tmp_path, GOOD, GOOD.replace("name: chat", "name: chat2"))
    assert (code, out) == (0, "OK: 2 autoscaled Deployments in 2 files, no problems\n")


def test_yaml_syntax_error_gives_the_line_and_exits_2(tmp_path: Path) -> None:
    """Broken YAML is unreadable input: one line on stderr naming the file and line, exit 2."""
    text = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a: b\n"
    code, out, err = run(tmp_path, text)
    assert (code, out) == (2, "")
    assert (
        err == f"{tmp_path / 'm0.yaml'}:4: YAML syntax error: mapping values are not allowed here\n"
    )


def test_syntax_error_in_one_file_does_not_hide_problems_in_another(tmp_path: Path) -> None:
    """The readable files are still checked; the exit code says some input was unreadable."""
    code, out, err = run(tmp_path, BAD, "a: [\n")
    assert code == 2
    assert len(out.splitlines()) == 2
    assert err.startswith(f"{tmp_path / 'm1.yaml'}:2: YAML syntax error: ")


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
    assert [line.split(": ", 3)[1:3] for line in lines] == [
        ["document 1 item 1", "Deployment ml/embed"]
    ] * 2


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
        f"{D}/chat: {P}enable: unknown key; did you mean {P}enabled?",
        f"{D}/chat: {P}enabled is missing, so the autoscaler ignores the {P} annotations here",
    ]


def test_bad_enabled_value_is_reported() -> None:
    """An enabled value other than true or false is a problem, not a silent opt-out."""
    assert lint(GOOD.replace('enabled: "true"', 'enabled: "yes"')) == [
        f'{D}/chat: {P}enabled="yes": must be "true" or "false"'
    ]


def test_unquoted_values_are_reported_and_parsed() -> None:
    """YAML numbers and booleans are not strings: say so, and still check the value."""
    text = GOOD.replace('"true"', "true").replace('max-replicas: "8"', "max-replicas: 8.5")
    assert lint(text) == [
        f"{D}/chat: {P}enabled: YAML reads true as a boolean; "
        f'annotations must be strings: write "true" in quotes',
        f"{D}/chat: {P}max-replicas: YAML reads 8.5 as a number; "
        f'annotations must be strings: write "8.5" in quotes',
        f'{D}/chat: {P}max-replicas="8.5": must be a whole number from 1 to 10000',
    ]


def test_annotations_on_the_pod_template_are_reported() -> None:
    """Our keys on the pod template have no effect and are reported as misplaced."""
    text = GOOD + "  template:\n    metadata:\n      annotations:\n" + f'        {P}window: "1m"\n'
    assert lint(text) == [
        f"{D}/chat: {P}window in spec.template.metadata.annotations has "
        "no effect; put it in the Deployment's metadata.annotations"
    ]


def test_annotations_on_other_kinds_are_reported() -> None:
    """Our keys on a DaemonSet do nothing, and the lint says where they belong."""
    text = BAD.replace("kind: Deployment", "kind: DaemonSet")
    assert lint(text) == [
        f"deploy.yaml: document 1: DaemonSet ml/embed: {P}enabled, {P}min-replicas, "
        f"{P}max-replicas and 2 more: they only take effect on a Deployment, StatefulSet, "
        "LeaderWorkerSet or Rollout"
    ]


def test_a_statefulset_and_a_rollout_are_linted_as_a_deployment_is() -> None:
    """The other scale targets' annotations are parsed, and their problems reported."""
    sts = BAD.replace("kind: Deployment", "kind: StatefulSet")
    assert lint(sts) == [
        f"deploy.yaml: document 1: StatefulSet ml/embed: {P}max-replica: unknown key; "
        f"did you mean {P}max-replicas?",
        f'deploy.yaml: document 1: StatefulSet ml/embed: {P}min-replicas="5": '
        f"must be <= {P}max-replicas (3)",
    ]
    rollout = GOOD.replace("apps/v1", "argoproj.io/v1alpha1").replace("Deployment", "Rollout")
    assert lint(rollout) == []
    old_api = GOOD.replace("apps/v1", "argoproj.io/v1beta9").replace("Deployment", "Rollout")
    assert lint(old_api) == [
        f"deploy.yaml: document 1: Rollout ml/chat: {P}enabled, {P}max-replicas, "
        f"{P}target-qps-per-replica and 1 more: the autoscaler manages argoproj.io/v1alpha1 "
        "Rollouts only"
    ]


def test_deployment_only_features_on_a_statefulset_are_problems() -> None:
    """Placement tiers and the warm-up gate on a StatefulSet are refused, naming key and value."""
    text = (
        GOOD.replace("kind: Deployment", "kind: StatefulSet")
        + "  template:\n    spec:\n      readinessGates:\n"
        + f"        - conditionType: {P}warm\n"
    ).replace(
        f'{P}max-replicas: "8"\n',
        f'{P}max-replicas: "8"\n    {P}placement: "mig"\n    {P}model-memory: "20Gi"\n',
    )
    found = lint(text)
    assert [line.split(": ")[3] for line in found] == [
        f'{P}placement="mig"',
        f'{P}warm="readinessGates"',
    ]
    assert all("Deployment-only" in line for line in found)


def test_an_hpa_on_the_same_statefulset_is_a_conflict() -> None:
    """An HPA whose scaleTargetRef names the managed StatefulSet conflicts; one on a
    Deployment of the same name does not."""
    sts = GOOD.replace("kind: Deployment", "kind: StatefulSet")

    def hpa(kind: str) -> str:
        return (
            "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n"
            "metadata: {name: chat, namespace: ml}\n"
            f"spec:\n  scaleTargetRef: {{apiVersion: apps/v1, kind: {kind}, name: chat}}\n"
        )

    (conflict,) = lint(sts + "---\n" + hpa("StatefulSet"))
    assert "also scales it" in conflict
    assert "refuses a StatefulSet with two owners" in conflict
    assert lint(sts + "---\n" + hpa("Deployment")) == []


def test_old_deployment_api_is_reported() -> None:
    """An annotated Deployment of a removed API version is reported, not parsed."""
    text = GOOD.replace("apps/v1", "extensions/v1beta1")
    assert lint(text) == [
        f"{D}/chat: {P}enabled, {P}max-replicas, "
        f"{P}target-qps-per-replica and 1 more: the autoscaler manages apps/v1 Deployments only"
    ]


def hpa(target: str, *, name: str = "h", namespace: str = "ml", api: str = "v2") -> str:
    return (
        f"apiVersion: autoscaling/{api}\nkind: HorizontalPodAutoscaler\n"
        f"metadata: {{name: {name}, namespace: {namespace}}}\n"
        f"spec:\n  scaleTargetRef: {target}\n"
    )


def scaled_object(target: str, *, name: str = "k") -> str:
    return (
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\n"
        f"metadata: {{name: {name}, namespace: ml}}\n"
        f"spec:\n  scaleTargetRef: {target}\n"
    )


def conflict(title: str, *, document: int = 2, source: str = "deploy.yaml") -> str:
    return (
        f"deploy.yaml: document 1: Deployment ml/chat: {title} ({source}, document {document}) "
        "also scales it through spec.scaleTargetRef; the autoscaler refuses a Deployment with "
        "two owners of replicas: remove one of them"
    )


@pytest.mark.parametrize(
    ("scaler", "title"),
    [
        (
            hpa("{apiVersion: apps/v1, kind: Deployment, name: chat}", name="chat-hpa"),
            "HorizontalPodAutoscaler ml/chat-hpa",
        ),
        (hpa("{kind: Deployment, name: chat}", api="v1"), "HorizontalPodAutoscaler ml/h"),
        (scaled_object("{name: chat}", name="chat-keda"), "ScaledObject ml/chat-keda"),
        (
            scaled_object("{apiVersion: apps/v1, kind: Deployment, name: chat}"),
            "ScaledObject ml/k",
        ),
    ],
)
def test_second_owner_of_replicas_is_reported(scaler: str, title: str) -> None:
    """An HPA or KEDA ScaledObject whose scaleTargetRef names the Deployment is a conflict."""
    assert lint(GOOD + "---\n" + scaler) == [conflict(title)]


@pytest.mark.parametrize(
    "scaler",
    [
        hpa("{apiVersion: apps/v1, kind: StatefulSet, name: chat}"),
        hpa("{apiVersion: argoproj.io/v1alpha1, kind: Deployment, name: chat}"),
        hpa("{kind: Deployment, name: chat-2}"),
        hpa("{kind: Deployment, name: chat}", namespace="other"),
        scaled_object("{kind: StatefulSet, name: chat}"),
        scaled_object("{name: embed}"),
    ],
)
def test_scaler_of_something_else_is_no_conflict(scaler: str) -> None:
    """A scaleTargetRef of another kind, API group, name or namespace is not a conflict."""
    assert lint(GOOD + "---\n" + scaler) == []


def test_scaler_of_a_switched_off_deployment_is_no_conflict() -> None:
    """An HPA may own a Deployment whose autoscaler switch is "false"."""
    text = GOOD.replace('enabled: "true"', 'enabled: "false"')
    assert lint(text + "---\n" + hpa("{kind: Deployment, name: chat}")) == []


def test_scaler_conflict_is_reported_for_an_invalid_deployment_too() -> None:
    """The two-owner conflict is reported alongside the annotation problems."""
    lines = lint(BAD + "---\n" + hpa("{kind: Deployment, name: embed}"))
    assert len(lines) == 3
    assert lines[-1].startswith(
        "deploy.yaml: document 1: Deployment ml/embed: HorizontalPodAutoscaler ml/h "
        "(deploy.yaml, document 2) also scales it"
    )


def test_scaler_conflict_across_files(tmp_path: Path) -> None:
    """The conflict check spans every file of one run and names the scaler's file."""
    code, out, _ = run(tmp_path, GOOD, hpa("{kind: Deployment, name: chat}"))
    assert code == 1
    assert out == (
        f"{tmp_path / 'm0.yaml'}: document 1: Deployment ml/chat: HorizontalPodAutoscaler ml/h "
        f"({tmp_path / 'm1.yaml'}, document 1) also scales it through spec.scaleTargetRef; the "
        "autoscaler refuses a Deployment with two owners of replicas: remove one of them\n"
    )


def test_namespace_defaults_to_default() -> None:
    """A Deployment without a namespace is shown in `default`, as kubectl would create it."""
    lines = lint(BAD.replace("  namespace: ml\n", ""))
    assert lines[0].startswith("deploy.yaml: document 1: Deployment default/embed: ")


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
        "deploy.yaml: document 1: Deployment default/a: "
        "metadata.annotations must be a mapping of strings"
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
        f'{D}/"evil\\nname": {P}max-replicas="3\\u202e": must be a whole number from 1 to 10000',
        f'{D}/"evil\\nname": {P}target-qps-per-replica="{"9" * 80}..." '
        "(10000 characters): must be a decimal number > 0",
    ]
    assert all(line.isprintable() for line in lines)


def test_deeply_nested_yaml_is_not_a_crash() -> None:
    """A pathologically nested document is reported, not a RecursionError."""
    lines = lint("a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert len(lines) == 1
    assert lines[0].startswith("deploy.yaml")


# -- the ramp's readiness gate and labels -----------------------------------------------------

GATE = f"      readinessGates:\n        - conditionType: {P}warm\n"
WARMING = f'        {P}warming: "true"\n'


def routed(router: str = "istio", *, gate: str = GATE, warming: str = WARMING) -> str:
    """A managed Deployment with a traffic router, its pod template built from the parts given."""
    return (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: chat\n  namespace: ml\n"
        "  annotations:\n"
        f'    {P}enabled: "true"\n    {P}max-replicas: "8"\n'
        f'    {P}target-qps-per-replica: "4"\n    {P}traffic-router: "{router}"\n'
        "spec:\n  selector:\n    matchLabels: {app: chat}\n"
        "  template:\n    metadata:\n      labels:\n        app: chat\n"
        f"{warming}    spec:\n{gate}      containers: [{{name: vllm, image: vllm}}]\n"
    )


@pytest.mark.parametrize("router", ["istio", "gateway-api", "smi"])
def test_traffic_router_with_gate_and_warming_label_passes(router: str) -> None:
    """Each traffic router passes with the readiness gate and the warming label in the template."""
    assert lint(routed(router)) == []


@pytest.mark.parametrize("router", ["istio", "gateway-api", "smi"])
def test_traffic_router_without_gate_or_label_is_a_problem(router: str) -> None:
    """A router whose pod template has neither gate nor label is one problem naming both."""
    assert lint(routed(router, gate="", warming="")) == [
        f'{D}/chat: {P}traffic-router="{router}": the pod template has neither the readiness '
        f"gate {P}warm (spec.template.spec.readinessGates) nor the label "
        f'{P}warming: "true" (spec.template.metadata.labels), so the controller never gates or '
        "ramps its new pods and the traffic router does nothing: add both"
    ]


def test_traffic_router_without_the_gate_is_a_problem() -> None:
    """The warming label alone lets cold pods into the Service: the missing gate is named."""
    other_gate = "      readinessGates:\n        - conditionType: example.com/other\n"
    assert lint(routed(gate=other_gate)) == [
        f"{D}/chat: spec.template.spec.readinessGates: no conditionType {P}warm; "
        f'{P}traffic-router="istio" needs it, or new pods take the Service\'s traffic before they '
        "are warm"
    ]


def test_traffic_router_without_the_warming_label_is_a_problem() -> None:
    """The gate alone keeps new pods out of the ramp: the missing label is named."""
    assert lint(routed(warming="")) == [
        f'{D}/chat: spec.template.metadata.labels: no {P}warming: "true"; '
        f'{P}traffic-router="istio" needs it, or new pods never join the ramp\'s warming set and '
        "get no traffic in steps"
    ]


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ('"false"', 'must be "true" (a string)'),
        ("true", 'YAML reads true as a boolean; write "true" in quotes'),
    ],
)
def test_warming_label_other_than_true_is_a_problem(value: str, rule: str) -> None:
    """The warming label counts only as the string "true"; anything else names its value."""
    text = routed(warming=f"        {P}warming: {value}\n")
    shown = value.strip('"')
    assert lint(text) == [
        f'{D}/chat: spec.template.metadata.labels["{P}warming"]="{shown}": {rule}'
    ]


def test_no_traffic_router_needs_no_gate() -> None:
    """With traffic-router none (or unset) the gate and label are the owner's choice."""
    assert lint(routed("none", gate="", warming="")) == []
    assert lint(GOOD) == []


def test_a_standby_pool_without_the_gate_is_a_problem() -> None:
    """A pool's pods wait behind the closed gate: without it the key, value and rule are named."""
    text = routed("none", gate="", warming="").replace(
        f'{P}traffic-router: "none"\n', f'{P}standby-replicas: "auto"\n'
    )
    assert lint(text) == [
        f'{D}/chat: {P}standby-replicas="auto": needs the readiness gate {P}warm and the label '
        f'{P}warming: "true" in the pod template, or the controller keeps no pool'
    ]
    gated = routed("none").replace(f'{P}traffic-router: "none"\n', f'{P}standby-replicas: "1"\n')
    assert lint(gated) == []


def test_invalid_traffic_router_is_reported_once() -> None:
    """An unknown router is the annotation's problem, not also a missing gate."""
    lines = lint(routed("linkerd", gate="", warming=""))
    assert lines == [
        f'{D}/chat: {P}traffic-router="linkerd": must be one of: none, istio, gateway-api, smi'
    ]


SELECTOR_RULE = (
    "must not be in a selector: the controller relabels pods as they warm up, and a pod whose "
    "labels leave the selector is orphaned"
)


def test_warming_label_in_the_deployment_selector_is_a_problem() -> None:
    """The ramp's labels in matchLabels or matchExpressions would orphan relabelled pods."""
    text = routed().replace(
        "    matchLabels: {app: chat}\n",
        f'    matchLabels: {{app: chat, {P}warming: "true"}}\n'
        f"    matchExpressions: [{{key: {P}stable, operator: Exists}}]\n",
    )
    assert lint(text) == [
        f'{D}/chat: spec.selector.matchLabels["{P}warming"]="true": {SELECTOR_RULE}',
        f'{D}/chat: spec.selector.matchExpressions[0].key="{P}stable": {SELECTOR_RULE}',
    ]


def test_warming_label_in_a_service_selector_is_a_problem() -> None:
    """A Service selecting on the ramp's labels would drop pods from its endpoints."""
    selector = f'  selector: {{app: chat, {P}warming: "true"}}\n'
    service = SERVICE.replace("  ports:", selector + "  ports:")
    assert lint(service) == [
        f'deploy.yaml: document 1: Service ml/chat: spec.selector["{P}warming"]="true": must not '
        "be in a selector: the controller relabels pods as they warm up, and the Service would "
        "drop or gain them as it does"
    ]


# -- spec.replicas: a warning ------------------------------------------------------------------

REPLICAS_WARNING = (
    f"{D}/chat: warning: spec.replicas=2: the controller owns replicas; every kubectl apply of "
    "this manifest resets them to 2: leave spec.replicas out"
)


def test_replicas_in_a_managed_deployment_is_a_warning(tmp_path: Path) -> None:
    """spec.replicas is printed as a warning, and warnings alone still exit 0."""
    text = GOOD + "  replicas: 2\n"
    assert lint(text) == [REPLICAS_WARNING]
    code, out, err = run(tmp_path, text)
    assert code == validate.EXIT_OK == 0
    assert err == ""
    assert out.splitlines() == [
        REPLICAS_WARNING.replace("deploy.yaml", str(tmp_path / "m0.yaml")),
        "OK: 1 autoscaled Deployment in 1 file, no problems, 1 warning",
    ]


def test_strict_makes_a_warning_fail(tmp_path: Path) -> None:
    """With strict, a warning alone exits 1 and no OK line is printed."""
    path = tmp_path / "deploy.yaml"
    path.write_text(GOOD + "  replicas: 2\n", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert validate.main([str(path)], out, err, strict=True) == validate.EXIT_PROBLEMS == 1
    assert out.getvalue().splitlines() == [REPLICAS_WARNING.replace("deploy.yaml", str(path))]


@pytest.mark.parametrize(
    "text",
    [
        PLAIN,
        GOOD.replace('enabled: "true"', 'enabled: "false"') + "  replicas: 2\n",
        GOOD.replace('"true"\n', f'"true"\n    {P}mode: "dry-run"\n', 1) + "  replicas: 2\n",
    ],
    ids=["unmanaged", "switched-off", "dry-run"],
)
def test_replicas_is_fine_where_the_controller_writes_none(text: str) -> None:
    """Unmanaged, switched-off and dry-run Deployments keep their own spec.replicas."""
    assert lint(text) == []


def test_min_replicas_of_zero_is_a_problem() -> None:
    """A service at 0 replicas would hold on missing data forever: validate refuses it."""
    (line,) = lint(GOOD.replace('"8"\n', f'"8"\n    {P}min-replicas: "0"\n', 1))
    assert line.startswith(f'{D}/chat: {P}min-replicas="0": must be a whole number from 1 to ')


# -- inputs: directories, JSON, standard input -------------------------------------------------


def test_directory_is_read_recursively_in_sorted_order(tmp_path: Path) -> None:
    """A directory gives every .yaml, .yml and .json below it, sorted by path, and nothing else."""
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "deep").mkdir()
    bad = {name: BAD.replace("name: embed", f"name: {name}") for name in ("one", "two", "three")}
    (tmp_path / "b" / "deep" / "two.yml").write_text(bad["two"], encoding="utf-8")
    (tmp_path / "b" / "one.yaml").write_text(bad["one"], encoding="utf-8")
    (tmp_path / "c.json").write_text(json.dumps(yaml.safe_load(bad["three"])), encoding="utf-8")
    (tmp_path / "a-notes.md").write_text("not: [a manifest\n", encoding="utf-8")
    (tmp_path / "b" / "kustomization.txt").write_text(": nonsense", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert validate.main([str(tmp_path)], out, err) == 1
    assert err.getvalue() == ""
    named = [line.split(": ")[0] for line in out.getvalue().splitlines()]
    assert named == [
        str(tmp_path / "b" / "deep" / "two.yml"),
        str(tmp_path / "b" / "deep" / "two.yml"),
        str(tmp_path / "b" / "one.yaml"),
        str(tmp_path / "b" / "one.yaml"),
        str(tmp_path / "c.json"),
        str(tmp_path / "c.json"),
    ]


def test_clean_directory_counts_its_files(tmp_path: Path) -> None:
    """The summary counts the files found in a directory."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "deploy.yaml").write_text(GOOD, encoding="utf-8")
    (tmp_path / "sub" / "service.yml").write_text(SERVICE, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert validate.main([str(tmp_path)], out, err) == 0
    assert out.getvalue() == "OK: 1 autoscaled Deployment in 2 files, no problems\n"


def test_directory_without_manifests_exits_2(tmp_path: Path) -> None:
    """A directory with no manifest in it is unreadable input, not a silent pass."""
    (tmp_path / "README.md").write_text("# nothing here\n", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert validate.main([str(tmp_path)], out, err) == validate.EXIT_UNREADABLE == 2
    assert err.getvalue() == (
        f"{tmp_path}: cannot read: no *.yaml, *.yml, *.json file in this directory or below\n"
    )


def test_json_file_with_tabs_is_read_as_json(tmp_path: Path) -> None:
    """A .json manifest is JSON, tabs and all (YAML would refuse the tabs)."""
    path = tmp_path / "deploy.json"
    path.write_text(json.dumps(yaml.safe_load(BAD), indent="\t"), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert validate.main([str(path)], out, err) == 1
    assert err.getvalue() == ""
    assert out.getvalue().startswith(f"{path}: document 1: Deployment ml/embed: ")


def test_broken_json_exits_2(tmp_path: Path) -> None:
    """A .json file that is not JSON is unreadable input, named with its line."""
    path = tmp_path / "deploy.json"
    path.write_text('{\n  "kind": "Deployment",\n}\n', encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert validate.main([str(path)], out, err) == 2
    assert err.getvalue().startswith(f"{path}:3: JSON syntax error: ")


def test_standard_input_is_read_for_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """`-` reads the manifest from standard input and names it <stdin>."""
    monkeypatch.setattr("sys.stdin", io.StringIO(BAD))
    out, err = io.StringIO(), io.StringIO()
    assert validate.main(["-"], out, err) == 1
    assert out.getvalue().startswith("<stdin>: document 1: Deployment ml/embed: ")
