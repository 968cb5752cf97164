"""The controller's own configuration, read once at start from the environment.

Variables carry the `AUTOSCALER_` prefix and `__` between a group and its field, e.g.
`AUTOSCALER_LOG__LEVEL=debug` or `AUTOSCALER_SMOOTHING__HALF_LIFE_S=60`. One frozen `Settings`
is built by the CLI and handed down group by group; nothing else reads the environment.

Only what the commands use today lives here; per-Deployment settings are annotations, not this.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_GROUP = ConfigDict(frozen=True, extra="forbid")


class LoopSettings(BaseModel):
    model_config = _GROUP

    tick_s: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Seconds between two ticks of the control loop (one sample per service per tick).
    Default 1. The simulator always ticks every second; `simulate` warns when this differs."""


class SmoothingSettings(BaseModel):
    model_config = _GROUP

    window_s: float = Field(300.0, gt=0, allow_inf_nan=False)
    """Seconds of history each smoothed signal sees (DESIGN §3.2). Default 300. The simulator
    always uses 300; `simulate` warns when this differs."""
    half_life_s: float = Field(30.0, gt=0)
    """Half-life in seconds of the exponential weights over the window; `inf` for a plain mean.
    Default 30."""


class LogSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    """Lowest level written. Default `info`."""
    # Named `json_lines` in Python because `json` shadows a BaseModel attribute; the setting
    # (AUTOSCALER_LOG__JSON) keeps the short name.
    json_lines: bool | None = Field(None, validation_alias=AliasChoices("json", "json_lines"))
    """JSON lines (true) or console rendering (false); unset: JSON unless stderr is a terminal."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AUTOSCALER_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
    )

    loop: LoopSettings = LoopSettings()
    smoothing: SmoothingSettings = SmoothingSettings()
    log: LogSettings = LogSettings()

    @model_validator(mode="after")
    def _window_holds_a_tick(self) -> Self:
        if self.smoothing.window_s < self.loop.tick_s:
            raise ValueError(
                f"smoothing.window_s ({self.smoothing.window_s:g}) must be at least "
                f"loop.tick_s ({self.loop.tick_s:g})"
            )
        return self
