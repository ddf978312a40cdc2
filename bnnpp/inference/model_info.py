"""What one fit knows about its model, found once by abstract tracing and handed to the
method's ``build`` and to the runner, instead of each tracing the model again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from bnnpp.introspection import OBSERVED, SiteInfo, latent_sites, row_latents

__all__ = ["ModelInfo"]


@dataclass(frozen=True, eq=False)
class ModelInfo:
    """A model's structure at the training data's shapes.

    Attributes:
        sites: latent site → :class:`~bnnpp.introspection.SiteInfo` (shape, ArviZ dims), in
            trace order (:func:`bnnpp.introspection.latent_sites`).
        observation: the name of the observed site bnnpp reads.
        layers: bnnpp dense/conv2d layer → its facts
            (:func:`bnnpp.inference.variational_layers.find_layers`), traced on first use.
        row_latents: the latent sites whose size follows the number of training rows (one
            effect per school, one step per day: :func:`bnnpp.introspection.row_latents`), empty
            for a network; such a model is fitted on every row at once and predicts at inputs
            with as many rows.
    """

    sites: dict[str, SiteInfo]
    observation: str
    model: Callable = field(repr=False)
    x: Any = field(repr=False)
    y: Any = field(repr=False)

    @classmethod
    def of(cls, model: Callable, x, y, sites: dict[str, SiteInfo] | None = None) -> ModelInfo:
        """The info of ``model`` on ``(x, y)``; ``sites`` when already found (``check_model``)."""
        return cls(latent_sites(model, x, y) if sites is None else dict(sites), getattr(model, "observed", OBSERVED), model, x, y)

    @cached_property
    def row_latents(self) -> tuple[str, ...]:
        return row_latents(self.model, self.x, self.y)

    def check_rows(self, method: str, batch_size: int | None, rows=None) -> None:
        """Refuse (one-line ValueError, before anything compiles) a fit that would run a model
        with :attr:`row_latents` on part of its rows: minibatches of ``batch_size`` rows, or one
        process's block of ``rows``."""
        n = int(self.x.shape[0])
        if not self.row_latents:
            return
        named = ", ".join(self.row_latents[:3]) + (", ..." if len(self.row_latents) > 3 else "")
        if batch_size is not None and int(batch_size) < n:
            raise ValueError(
                f"the model's latent site(s) {named} take their size from the {n} rows of x, so it must see every row at "
                f"once: {method} would fit minibatches of {batch_size} rows; pass batch_size=None (every row)"
            )
        if rows is not None:
            raise ValueError(
                f"the model's latent site(s) {named} take their size from the rows of x, so every process needs every row: "
                "load the data whole (shard=None)"
            )

    @cached_property
    def layers(self) -> dict[str, dict]:
        from bnnpp.inference.variational_layers import find_layers  # a method module: loaded only when asked

        return find_layers(self.model, self.x, self.y)
