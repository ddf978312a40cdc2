"""Which approximation a saved posterior carries: the table from a file's family name to the
class that rebuilds it. Every family bnnpp writes is defined inside :mod:`bnnpp.posterior`,
so :func:`bnnpp.load` rebuilds it in a fresh process whatever has been imported."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from bnnpp.posterior.approximation import Approximation, GuideParameters, MeanFieldGaussian, VariationalDropout
from bnnpp.posterior.laplace import LaplaceGaussian

__all__ = ["FAMILIES", "from_guide_params"]


def _mean_field(params: dict[str, np.ndarray], sites) -> MeanFieldGaussian:
    names = [n for n in sites if f"{n}_loc" in params]
    return MeanFieldGaussian({n: params[f"{n}_loc"] for n in names}, {n: params[f"{n}_scale"] for n in names})


FAMILIES: Mapping[str, Callable[[dict[str, np.ndarray], Any], Approximation]] = MappingProxyType(
    {
        MeanFieldGaussian.kind: _mean_field,
        GuideParameters.kind: lambda params, sites: GuideParameters(params),
        VariationalDropout.kind: VariationalDropout.from_params,
        LaplaceGaussian.kind: LaplaceGaussian.from_params,
    }
)
"""A saved family's name (``Approximation.kind``) → ``from_params(params, sites) ->
Approximation``. Fixed: a file naming any other family is refused by :func:`from_guide_params`."""


def from_guide_params(params: dict[str, Any] | None, sites, kind: str | None = None) -> Approximation | None:
    """Rebuild an approximation from flat named parameters (a saved ``variational_params``
    group, or the ``guide_params`` of a posterior built from an info dict). ``kind`` names
    the family (one of :data:`FAMILIES`); without it (files of bnnpp 0.1) a mean-field
    Gaussian is recognised by the names ``<site>_loc``/``<site>_scale`` or
    ``<site>_auto_loc``/``<site>_auto_scale`` for every site, and anything else is kept as
    :class:`GuideParameters`.

    Returns:
        The :class:`Approximation`, or ``None`` when there are no parameters.

    Raises:
        ValueError: ``kind`` is not a family bnnpp knows (one line naming the known ones).
    """
    if kind is not None and kind not in FAMILIES:
        raise ValueError(
            f"unknown approximation family {kind!r}: bnnpp reads {', '.join(sorted(FAMILIES))}; the file was written by "
            "another program or a newer bnnpp"
        )
    if not params:
        return None
    params = {k: np.asarray(v) for k, v in params.items()}
    if kind is not None:
        try:
            return FAMILIES[kind](params, sites)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"the {kind} approximation's parameters are incomplete ({type(e).__name__}: {e})") from None
    for loc_fmt, scale_fmt in (("{}_loc", "{}_scale"), ("{}_auto_loc", "{}_auto_scale")):
        if sites and all(loc_fmt.format(n) in params and scale_fmt.format(n) in params for n in sites):
            return MeanFieldGaussian({n: params[loc_fmt.format(n)] for n in sites}, {n: params[scale_fmt.format(n)] for n in sites})
    return GuideParameters(params)
