"""What one fit knows about its model, found once by abstract tracing and handed to the
method's ``build`` and to the runner, instead of each tracing the model again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from bnnpp.introspection import OBSERVED, SiteInfo, latent_sites

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
    def layers(self) -> dict[str, dict]:
        from bnnpp.inference.variational_layers import find_layers  # a method module: loaded only when asked

        return find_layers(self.model, self.x, self.y)
