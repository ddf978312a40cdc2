"""SGLD's step-size schedule and kept steps (:class:`Schedule`), as functions of the step index;
the formulas are in :mod:`bnnpp.inference.sgld`'s module docstring."""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from bnnpp.inference.chunks import segments

__all__ = ["STEP_SIZES", "Schedule", "step_size_of"]

STEP_SIZES = {"psgld": 1e-2, "sgld": 1e-3, "sghmc": 1e-3}
"""The default ``step_size`` per variant. psgld's is an RMSprop learning rate: every
coordinate drifts about h per step, so from a start ~2 away the chains need ~2/h steps: 1e-2
reaches the posterior within the default 2,000 burn-in steps, 1e-3 does not."""


def step_size_of(variant: str, step_size: float | None) -> float:
    """The base step size h: ``step_size``, or the variant's default (:data:`STEP_SIZES`)."""
    return STEP_SIZES[variant] if step_size is None else step_size


def _xp(t):
    return np if isinstance(t, (int, np.integer, np.ndarray)) else jnp


@dataclass(frozen=True)
class Schedule:
    """Step size, exploration stages and kept draws as functions of the step index ``t``
    (0-based, burn-in included); see the module docstring for the formulas.

    The methods take an integer or an integer array (NumPy on the host, JAX inside the
    compiled step) and return the same kind.
    """

    kind: str
    step_size: float
    burn_in: int
    thinning: int
    num_samples: int
    decay_steps: float = 1000.0
    gamma: float = 0.55
    num_cycles: int = 1
    exploration: float = 0.0

    @classmethod
    def from_options(cls, options) -> Schedule:
        """The schedule of :class:`~bnnpp.inference.sgld.SGLDOptions` or a full option dict
        (as ``DEFAULTS``)."""
        opts = options if isinstance(options, dict) else options.as_dict()
        step = step_size_of(opts["variant"], opts["step_size"])
        return cls(
            opts["schedule"],
            float(step),
            int(opts["burn_in"]),
            int(opts["thinning"]),
            int(opts["num_samples"]),
            float(opts["decay_steps"]),
            float(opts["gamma"]),
            int(opts["num_cycles"]),
            float(opts["exploration"]),
        )

    @property
    def sampling_steps(self) -> int:
        """Steps in the sampling stage of a cycle: ``(num_samples / num_cycles) · thinning``."""
        return self.num_samples // self.num_cycles * self.thinning

    @property
    def cycle_length(self) -> int:
        """Steps per cycle ``L`` (cyclical schedule)."""
        s = self.sampling_steps
        return s + math.ceil(self.exploration * s / (1.0 - self.exploration) - 1e-9)

    @property
    def exploration_steps(self) -> int:
        """Noise-free steps at the start of each cycle ``E = L − S`` (cyclical schedule)."""
        return self.cycle_length - self.sampling_steps

    @property
    def num_steps(self) -> int:
        """Steps per chain, burn-in included."""
        if self.kind == "cyclical":
            return self.burn_in + self.num_cycles * self.cycle_length
        return self.burn_in + self.num_samples * self.thinning

    def step_size_at(self, t):
        """Step size ``h_t``."""
        xp = _xp(t)
        h0 = self.step_size
        if self.kind == "constant":
            return h0 * xp.ones_like(t, dtype=float if xp is np else jnp.float32)
        if self.kind == "polynomial":
            return h0 * (1.0 + t / self.decay_steps) ** (-self.gamma)
        j = xp.maximum(t - self.burn_in, 0) % self.cycle_length
        return xp.where(t < self.burn_in, h0, h0 / 2 * (xp.cos(math.pi * j / self.cycle_length) + 1))

    def explores(self, t):
        """Whether step ``t`` is in an exploration stage (run without noise)."""
        xp = _xp(t)
        if self.kind != "cyclical":
            return xp.zeros_like(t, dtype=bool)
        j = xp.maximum(t - self.burn_in, 0) % self.cycle_length
        return (t >= self.burn_in) & (j < self.exploration_steps)

    def draw_index(self, t):
        """Index of the draw kept after step ``t``, or −1 when ``t`` is not kept."""
        xp = _xp(t)
        s = xp.maximum(t - self.burn_in, 0)
        inside = (t >= self.burn_in) & (t < self.num_steps)
        if self.kind != "cyclical":
            keep = inside & ((s + 1) % self.thinning == 0)
            return xp.where(keep, (s + 1) // self.thinning - 1, -1)
        cycle, j = s // self.cycle_length, s % self.cycle_length
        k = j - self.exploration_steps + 1  # 1-based step of the sampling stage
        keep = inside & (k >= 1) & (k % self.thinning == 0)
        per_cycle = self.num_samples // self.num_cycles
        return xp.where(keep, cycle * per_cycle + k // self.thinning - 1, -1)

    def kept_steps(self) -> np.ndarray:
        """The kept step indices ``(num_samples,)``, ascending."""
        return np.flatnonzero(self.draw_index(np.arange(self.num_steps)) >= 0)

    def segments(self) -> tuple[np.ndarray, np.ndarray]:
        """Segment ends (exclusive) ``(num_segments,)`` and whether each ends at a kept step.

        Every kept step ends a segment; longer runs of unkept steps are cut into pieces
        (:func:`bnnpp.inference.chunks.segments`, which the runner uses).
        """
        return segments(self.num_steps, self.kept_steps())
