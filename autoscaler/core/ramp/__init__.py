"""The ramp: the warm-up gate, the stepwise traffic shift and the drain (docs/architecture.md,
"The warm-up gate and the traffic ramp"), as a pure state machine.

One service at a time. `advance(config, state, tick)` takes what the driver saw this tick and
returns a `Plan`: the next `RampState`, the `Action`s to carry out in order, and the `Outcome`s
worth telling (promoted, rolled back, held, released). `scale(...)` answers a replica change:
upward at once, downward through a drain, refused while new pods hold traffic.

**Inputs on request.** Some inputs cost a network call: warm-up probes, the health gate, the
in-flight requests of drain victims, whether the router has applied its weights. The core asks
for them with an action (`Probe`, `MeasureHealth`, `MeasurePodHealth`, `MeasureInFlight`,
`CheckSettled`) and
reads the answer in the next tick's `Tick`; an answer that never comes is asked for again. A
service with nothing to do asks for nothing.

**A new pod** carries the `warming` label and is not warm. Once it runs, its warm-up deadline
starts (`warmup_deadline_s`) and it is probed every `probe_interval_s`: it is warm when
`warmup_requests` probes all succeed and their median latency is within `warmup_latency_ratio`
of the serving pods' probe latency (a few serving pods are probed alongside), or under
`max_p95_latency_s` when that is set; with neither reference, success alone counts. Without a
warm-up probe configured, a pod is warm once running. Past the deadline the pod is reclaimed
with a Warning Event. A pod that warms up while a cohort ramps waits (not yet marked warm,
so outside every routed set) for the cohort's next step boundary and joins it there (see
below); one that turns up warm outside the cohort mid-ramp (a container restart) is taken out
again and warms up anew.

**The ramp** (a traffic router other than `none`). The warm pods still labelled `warming` form
a cohort of K pods next to the N serving pods. Step p of `steps_pct` routes
`share_pct(p, K, N)` = floor(p x K / (N + K)) percent to the cohort (at least 1), never an
absolute p; the step's clock starts when the router reports the weights applied. The gate
compares the cohort with the serving pods (`judge`) over the time since the step began: error
rate at most `max_error_rate` and at most the serving pods' plus `error_rate_slack`; P95
latency at most `max_p95_ratio` times theirs and under `max_p95_latency_s` when set.

- The early gate: once `min_dwell_ratio` of `step_interval_s` has passed, the cohort's health
  is measured on every tick, and the step is judged (passed or failed) as soon as the cohort
  has served `min_requests` requests (at least one). A busy service walks its steps in a
  fraction of the intervals, which under a sudden rise is capacity arriving sooner; a quiet
  one, still short of requests, waits for the full interval as before. Only the first interval
  of a step is watched so: a step still thin after it is judged once per extension. The early
  gate judges only a complete measurement: while the serving pods show a P95 (or an error
  rate) that the cohort's does not yet (its latency histogram not yet scraped twice in the
  window), it waits rather than pass on the half it has.
- Fewer than `min_requests` requests at the end of the interval: the step is extended by another
  interval, up to `max_step_extensions` times; then it is judged on what there is. No request at
  all passes (traffic is too thin to judge and the warm-up probe already vouched for the pods); a
  missing measurement (asked for and not answered for a whole interval), or a cohort whose error
  rate and latency are both unknown, holds: a missing metric never reads as healthy. An unknown
  error rate next to a known latency is judged on the latency alone: a server that creates its
  failure counter at its first failure (TGI) has no error series while it is healthy.
- Pass: the next step. The pods that passed their warm-up during the step join the cohort
  now, marked warm together with the new weights, which count them: step p gives
  `share_pct(p, K + J, N)`. A joining pod has not passed the earlier gates, so the bound the
  ramp keeps is on the step the cohort is at, not on the pod's history: the warming set never
  gets more than p x (its size) / (N + its size) at step p, and every pod in it is judged at
  that step's gate. After the last gate nothing joins: such pods wait for the promotion to end
  and form the next cohort. Without joining, under a sudden rise the new capacity would arrive
  one whole ramp at a time.
- After the last step, promotion in an order that never routes to an empty set:
  label the cohort `stable` while it is still `warming`, give the labels `propagation_s` and the
  router time to settle, set the warming weight to 0, wait until that is in effect, then remove
  `warming`.
- Fail: the warming weight goes to 0 first; once the router has applied it (or
  `settle_timeout_s` passed) the failing pods are reclaimed and their ReplicaSet makes fresh
  ones. A cohort of more than one pod is judged pod by pod first (`MeasurePodHealth`, each pod
  alone against the serving pods over the step's window, or a whole interval when the step
  was judged early, the same `judge` without the extensions): the pods that fail on their own
  are reclaimed with those too thin to judge, and the pods that pass on their own stay warm in
  the warming set to form the next cohort. When no pod can be blamed on its own (too few
  requests each, all fine alone, or no answer before `settle_timeout_s`) the whole cohort is
  reclaimed. Either way the gate failed:
  it counts towards `max_failures`.
  After `max_failures` failures in a row the service is held: new pods still warm up but
  none is ramped. A hold ends when any ramp setting changes (the state remembers a fingerprint
  of the settings it was held under) or when someone deletes the persisted state (the driver
  notices that). A promotion resets the count.
- A router that does not report its weights applied within `settle_timeout_s` also holds, with
  the weight back to 0: the ramp cannot know what the mesh does.
- With no serving pod at all there is nothing to compare with or fall back on: the warm pods
  are promoted without steps. With the `none` router (gate only), a pod is promoted as soon as
  it is warm.

**The standby pool** (`pool`). The Deployment's count may hold `standby` replicas more than
the serving ones (`RampState.standby`, set by `scale`; `Tick.replicas` is the count). A pod
that passes its warm-up while the serving count is met waits in the pool instead of being set
warm: still `warming`, its gate closed, so out of every routed set. When the serving side
falls short (a scale-up), the pool's pods are let out first, the oldest first, and ramp as
any warm pod; the new pods warm up behind them and refill it. A scale-down keeps the pool's
pods while serving ones can go (`victim_order`'s `pool`), but for its surplus when it shrinks.
The pool's members are saved with the state, so a new leader keeps them out of traffic.

A warm, running pod in neither set (its `stable` label removed by hand) is put back in the
stable set.

**Scale-down** never touches the serving set while a cohort holds traffic: it is refused with a
reason. Otherwise victims are chosen in the one scale-down order (`core.victims`, through
`victim_order`): warming pods first, the standby pool's last, then the lowest placement tier
(`shared` < `mig-*` < `whole`), then the least loaded; those in the Service's endpoints
leave them (`SetWarm` False, `stable` removed); once their in-flight requests are 0 (a missing
count is not 0) or `drain_grace_s` passed, each gets the lowest deletion cost and the replica
count drops (`ScaleTo`). A scale-up during a drain puts the victims back.

The state survives a restart as JSON (`dumps`/`loads`, all but the probe throttle); the first
tick after a restore re-asserts the weight it computes, so none stays stuck. It also starts the
ramp's overdue waits again (`Tick.resumed`): a step already due restarts its dwell with the
weights as they are, and a wait for the router that the gap used up gets its full time again. The
successor of a crashed leader finds the step's start long past and no measurement asked for in
between: on the old clock, that is a missing measurement and the ramp would hold, its new pods
kept warm at 0 % until someone edits a setting. A hold stays for what the gate measures, and for
a measurement asked for and not answered within an interval. `loads` reads text a tenant can
edit: through `untrusted.loads`, so any bad text is a `ValueError`.

The package by concern: `config` (the settings), `state` and `codec` (what is remembered and
its text), `inputs` and `actions` (what a tick reads and asks for), `gate` (the checks: shares,
the health gate, the warm-up verdict), and the transitions, one per phase: `warmup`, `steps`
(forming a cohort, each step), `promotion`, `rollback`, `drain` (with `scale`), `pool`, run in
order by `machine.advance` over the working copy of `work`.

Pure: no I/O, no clock (time is `tick.now_s`), no logging; `autoscaler.ramp_driver` gathers the
inputs and carries out the actions.
"""

from autoscaler.core.ramp.actions import (
    DRAIN_CANCELLED,
    DRAIN_STARTED,
    DRAINED,
    RAMP_ABANDONED,
    RAMP_HELD,
    RAMP_PODS_SPARED,
    RAMP_PROMOTED,
    RAMP_RELEASED,
    RAMP_ROLLED_BACK,
    RAMP_STARTED,
    RAMP_STEP,
    REQUESTS,
    WARMUP_TIMED_OUT,
    Action,
    CheckSettled,
    EnsureRoutes,
    Event,
    EventType,
    Label,
    MarkVictim,
    MeasureHealth,
    MeasureInFlight,
    MeasurePodHealth,
    Outcome,
    Plan,
    Probe,
    Reclaim,
    Refusal,
    ScaleTo,
    SetWarm,
    SetWeights,
)
from autoscaler.core.ramp.codec import (
    LIMIT_BYTES,
    VERSION,
    dumps,
    loads,
)
from autoscaler.core.ramp.config import (
    RampConfig,
    fingerprint,
)
from autoscaler.core.ramp.drain import (
    scale,
    victim_order,
)
from autoscaler.core.ramp.gate import (
    Verdict,
    blame,
    judge,
    share_pct,
)
from autoscaler.core.ramp.inputs import (
    Health,
    Pod,
    Probed,
    Tick,
)
from autoscaler.core.ramp.machine import (
    advance,
    release,
)
from autoscaler.core.ramp.state import (
    RAMP_PHASES,
    Drain,
    Phase,
    RampState,
    Stage,
    Victim,
)

__all__ = [
    "DRAINED",
    "DRAIN_CANCELLED",
    "DRAIN_STARTED",
    "LIMIT_BYTES",
    "RAMP_ABANDONED",
    "RAMP_HELD",
    "RAMP_PHASES",
    "RAMP_PODS_SPARED",
    "RAMP_PROMOTED",
    "RAMP_RELEASED",
    "RAMP_ROLLED_BACK",
    "RAMP_STARTED",
    "RAMP_STEP",
    "REQUESTS",
    "VERSION",
    "WARMUP_TIMED_OUT",
    "Action",
    "CheckSettled",
    "Drain",
    "EnsureRoutes",
    "Event",
    "EventType",
    "Health",
    "Label",
    "MarkVictim",
    "MeasureHealth",
    "MeasureInFlight",
    "MeasurePodHealth",
    "Outcome",
    "Phase",
    "Plan",
    "Pod",
    "Probe",
    "Probed",
    "RampConfig",
    "RampState",
    "Reclaim",
    "Refusal",
    "ScaleTo",
    "SetWarm",
    "SetWeights",
    "Stage",
    "Tick",
    "Verdict",
    "Victim",
    "advance",
    "blame",
    "dumps",
    "fingerprint",
    "judge",
    "loads",
    "release",
    "scale",
    "share_pct",
    "victim_order",
]
