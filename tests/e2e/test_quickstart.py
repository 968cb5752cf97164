"""The README's quick start, run as written: its shell lines are parsed from the fenced block
under "Quick start on a cluster" and carried out against a copy of the repository, the API
emulator and a controller.

Only the command forms the quick start uses are understood; any other line fails the test, so
an edit that adds a step nobody checked, or breaks one, is caught. `make` is not run (it would
call Docker): its targets and variables must exist in the Makefile and it records the image it
would push. `kustomize create` and `kustomize edit` write the kustomization.yaml as kustomize
does; `kubectl apply` renders with `kubectl kustomize` and creates or replaces each object in
the emulator, in order, refusing kinds with no CRD as the API server does.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy.support import ROOT, run_kustomize, version
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from autoscaler import cli

from .support import Controllers, Service, SteppedClock, advance_until, wait_for_load

README = ROOT / "README.md"
HEADING = "## Quick start on a cluster"
CONTROLLER = ("inference-autoscaler", "inference-autoscaler")
"""The controller's Deployment: namespace, name."""
OPERATOR_CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitors",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrules",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitors",
}
"""The Prometheus Operator's CRDs, which the quick start names as a prerequisite."""
MAKE_TARGETS = {"image", "push"}
"""The Makefile targets a quick start may call (what builds and pushes the image)."""
KUSTOMIZATION = "kustomization.yaml"


def quick_start_lines(readme: str) -> list[str]:
    """The shell lines of the fenced block(s) of the quick start's section, comments dropped."""
    section = readme.split(HEADING, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert blocks, f"no ```sh block under {HEADING!r} in README.md"
    return [line for block in blocks for line in block.splitlines() if line.strip()]


class QuickStart:
    """Carries out the quick start's commands in a copy of the repository."""

    def __init__(self, checkout: Path, kube: Kube) -> None:
        self.root = checkout
        self.cwd = checkout
        self.kube = kube
        self.pushed: list[str] = []
        self.explained: list[str] = []
        for (api_version, kind), plural in OPERATOR_CRDS.items():
            kube.store.register(f"{api_version}/{plural}", kind=kind)

    def run(self, line: str) -> None:
        words = shlex.split(line, comments=True)
        while words:
            if "&&" in words:
                at = words.index("&&")
                command, words = words[:at], words[at + 1 :]
            else:
                command, words = words, []
            self.command(command, line)

    def command(self, words: list[str], line: str) -> None:
        match words:
            case ["make", *arguments]:
                self.make(arguments)
            case ["mkdir", directory] | ["mkdir", "-p", directory]:
                self.path(directory).mkdir(parents=words[1] == "-p")
            case ["cd", directory]:
                self.cwd = self.path(directory)
                assert self.cwd.is_dir(), line
            case ["kustomize", "create", "--resources", resources]:
                assert not (self.cwd / KUSTOMIZATION).exists(), line
                for resource in resources.split(","):
                    assert self.path(resource).is_dir(), line
                self.write_kustomization(
                    {
                        "apiVersion": "kustomize.config.k8s.io/v1beta1",
                        "kind": "Kustomization",
                        "resources": resources.split(","),
                    }
                )
            case ["kustomize", "edit", "add", "component", component]:
                assert (self.path(component) / KUSTOMIZATION).is_file(), line
                kustomization = self.kustomization()
                kustomization.setdefault("components", []).append(component)
                self.write_kustomization(kustomization)
            case ["kustomize", "edit", "set", "image", image]:
                name, _, replacement = image.partition("=")
                new_name, _, new_tag = replacement.rpartition(":")
                assert name, line
                assert new_name, line
                assert new_tag, line
                kustomization = self.kustomization()
                images = [i for i in kustomization.get("images", []) if i["name"] != name]
                kustomization["images"] = [
                    *images,
                    {"name": name, "newName": new_name, "newTag": new_tag},
                ]
                self.write_kustomization(kustomization)
            case ["kubectl", "apply", "-k", directory]:
                self.apply(run_kustomize(self.path(directory)))
            case ["kubectl", "apply", "-f", file]:
                self.apply(self.path(file).read_text())
            case ["autoscaler", "explain", target]:
                self.explained.append(target)
            case _:
                pytest.fail(f"README quick start: a command this test does not know: {line!r}")

    def path(self, relative: str) -> Path:
        found = (self.cwd / relative).resolve()
        assert found.is_relative_to(self.root), f"{relative} leaves the checkout"
        return found

    def make(self, arguments: list[str]) -> None:
        makefile = (self.root / "Makefile").read_text()
        variables = dict(a.split("=", 1) for a in arguments if "=" in a)
        targets = [a for a in arguments if "=" not in a]
        assert set(targets) <= MAKE_TARGETS, f"make {targets}: only {MAKE_TARGETS} are checked"
        for target in targets:
            assert re.search(rf"^{target}:", makefile, flags=re.MULTILINE), target
        for variable in variables:
            assert re.search(rf"^{variable} \?=", makefile, flags=re.MULTILINE), variable
        assert "docker push $(IMAGE):$(VERSION)" in makefile
        if "push" in targets:
            self.pushed.append(f"{variables['IMAGE']}:{version()}")

    def kustomization(self) -> dict[str, Any]:
        found = yaml.safe_load((self.cwd / KUSTOMIZATION).read_text())
        assert isinstance(found, dict)
        return found

    def write_kustomization(self, kustomization: dict[str, Any]) -> None:
        (self.cwd / KUSTOMIZATION).write_text(yaml.safe_dump(kustomization, sort_keys=False))

    def apply(self, text: str) -> None:
        """`kubectl apply`: each object created, or replaced when it exists, in order."""
        for obj in (d for d in yaml.safe_load_all(text) if d):
            ref = self.resource(obj)
            metadata = obj["metadata"]
            namespace = metadata.get("namespace")
            found = [
                o
                for o in self.kube.store.list_objects(ref, namespace)
                if o["metadata"]["name"] == metadata["name"]
            ]
            if not found:
                self.kube.store.create(ref, obj, namespace=namespace)
                continue
            metadata["resourceVersion"] = found[0]["metadata"]["resourceVersion"]
            self.kube.store.replace(ref, namespace, metadata["name"], obj)

    def resource(self, obj: dict[str, Any]) -> str:
        key = (obj["apiVersion"], obj["kind"])
        if key in OPERATOR_CRDS:
            return f"{key[0]}/{OPERATOR_CRDS[key]}"
        group, _, api_version = key[0].rpartition("/")
        for rtype in self.kube.store.resource_types():
            if (rtype.group, rtype.version, rtype.kind) == (group, api_version, key[1]):
                return f"{key[0]}/{rtype.plural}"
        pytest.fail(f"no matches for kind {key[1]} in version {key[0]}: install its CRD first")


def test_the_readme_quick_start_block_is_parsed_strictly(tmp_path: Path, kube: Kube) -> None:
    """A line the quick start's interpreter does not know fails the test, naming the line."""
    quick = QuickStart(tmp_path, kube)
    with pytest.raises(pytest.fail.Exception, match="does not know: 'helm install autoscaler'"):
        quick.run("helm install autoscaler")


async def test_the_readme_quick_start_installs_and_explains_a_decision(
    tmp_path: Path,
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The README's quick start, run line by line, installs the controller with the image it
    pushed and an example, and its `autoscaler explain` prints the example's last decision."""
    checkout = tmp_path / "checkout"
    for part in ("manifests", "dashboards"):
        shutil.copytree(ROOT / part, checkout / part)
    shutil.copy(ROOT / "Makefile", checkout / "Makefile")
    quick = QuickStart(checkout, kube)
    kubelet.add_node("gpu-1", gpus=8)

    for line in quick_start_lines(README.read_text()):
        quick.run(line)

    (image,) = quick.pushed
    controller = kube.store.get("apps/v1/deployments", *CONTROLLER)
    (container,) = controller["spec"]["template"]["spec"]["containers"]
    assert container["image"] == image
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert quick.explained, "the quick start ends with no `autoscaler explain`"
    await kubelet.settle()
    served = []
    for target in quick.explained:
        namespace, name = target.split("/")
        service = Service(kube, kubelet, stack.upper, namespace, name)
        assert service.pods(), f"{target}: the quick start made no pods"
        service.serve(rate_per_s=1.0)
        await wait_for_load(stack.prometheus, service, 1.0 * len(service.pods()))
        served.append(service)
    # The harness's controller, with the installed Deployment's settings that change what it
    # writes and where.
    installed: dict[str, Any] = {"dry_run": env.get("AUTOSCALER_KUBERNETES__DRY_RUN") == "true"}
    if env.get("AUTOSCALER_KUBERNETES__NAMESPACES"):
        installed["namespaces"] = env["AUTOSCALER_KUBERNETES__NAMESPACES"]
    await cluster.start(**installed)
    try:
        for service in served:
            await advance_until(
                clock, lambda s=service: s.status() is not None, limit_s=5, what="a decision"
            )
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
        for target, service in zip(quick.explained, served, strict=True):
            capsys.readouterr()
            code = await asyncio.to_thread(cli.main, ["explain", target])
            captured = capsys.readouterr()
            assert (code, captured.err) == (0, ""), captured
            lines = captured.out.splitlines()
            assert lines[0] == f"Deployment {target}"
            status = service.status()
            assert status is not None
            assert f"Last decision ({status['time']})" in lines
            assert any(line.startswith("  replicas ") for line in lines), lines
    finally:
        for service in served:
            for pod in service.pods():
                stack.upper.drop(service.namespace, pod)
