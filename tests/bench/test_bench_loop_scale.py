"""The scale bench's exporter: the series it serves for Prometheus to scrape."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from bench import loop_scale_k8s as bench


def _samples(load: bench.Load, now_s: float) -> dict[tuple[str, str], float]:
    text = load.render(now_s).decode()
    return {
        (sample.name, sample.labels["pod"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _requests(load: bench.Load, now_s: float, pod: str) -> float:
    return _samples(load, now_s)[("vllm:request_success_total", pod)]


def test_every_pod_serves_its_counter_queue_and_gpu() -> None:
    """Each pod of each service has a request counter, a waiting gauge and a GPU gauge."""
    load = bench.Load(3, change_share=0.5, seed=1)
    for service in range(3):
        load.set_pods(service, [bench.pod_name(service, n) for n in range(2)], now_s=0.0)
    samples = _samples(load, 10.0)
    assert len(samples) == 3 * 2 * 3
    first = bench.pod_name(0, 0)
    assert samples[("vllm:request_success_total", first)] > 0
    assert 0 <= samples[("DCGM_FI_DEV_GPU_UTIL", first)] <= 100


def test_a_counter_never_goes_back_when_load_or_pods_change() -> None:
    """A pod's counter keeps counting from where it was when its service's load or pods change."""
    load = bench.Load(4, change_share=1.0, seed=2)
    for service in range(4):
        load.set_pods(service, [bench.pod_name(service, 0)], now_s=0.0)
    pod = bench.pod_name(0, 0)
    rate = load.rate_per_s[0]
    assert _requests(load, 10.0, pod) == round(10.0 * rate, 3)
    before = _requests(load, 20.0, pod)
    load.set_pods(0, [pod, bench.pod_name(0, 1)], now_s=20.0)
    assert _requests(load, 20.0, pod) == before
    assert _requests(load, 30.0, pod) == round(before + 10.0 * rate / 2, 3)
    load.change(30.0)
    assert load.rate_per_s[0] != rate
    assert _requests(load, 30.0, pod) == round(before + 10.0 * rate / 2, 3)
    assert load.pods() == 5
