"""Weight priors and scale hyperpriors: what we believe about a network's weights.

A weight prior (``normal``, ``laplace``, ``cauchy``, ``student_t``, ``flat``,
``scale_mixture``) is a zero-centred distribution for every weight and bias of a layer.
Its ``scale`` is either a positive number (a fixed, "delta" hyperprior) or a
:class:`Hyperprior` — ``half_normal(s)``, ``half_cauchy(s)`` or ``inverse_gamma(a, b)`` —
in which case the scale becomes a latent NumPyro site and is inferred with the weights
(a hierarchical prior). ``per`` sets how many scales are sampled:

* ``"layer"`` (default): one scale per layer, shared by its weight matrix and bias;
* ``"network"``: one scale for the whole network;
* ``"unit"``: one scale per output unit of a layer (a column of the weight matrix and
  the matching bias entry).

Priors do not import anything from :mod:`bnnpp.inference`; they only build sample sites
(:meth:`Prior.sample`, :meth:`Prior.sample_scale`) and give log-densities
(:meth:`Prior.log_prob`, :meth:`Hyperprior.log_prob`), which the tests check against
``scipy.stats``.

Example::

    from bnnpp import priors
    p = priors.normal(scale=priors.inverse_gamma(1.0, 1.0))   # variance ~ IG(1, 1) per layer
    q = priors.scale_mixture(0.5, 1.0, float(np.exp(-6)))     # Blundell et al. (2015)

The six families and three hyperpriors share one :class:`Prior` / :class:`Hyperprior` pair so
that every method reads them the same way. The modules: :mod:`~bnnpp.priors.hyperpriors`,
:mod:`~bnnpp.priors.mixture` and :mod:`~bnnpp.priors.weights`; every name is re-exported here.
"""

from __future__ import annotations

from bnnpp.priors.hyperpriors import HYPERPRIORS, Hyperprior, half_cauchy, half_normal, hyperprior, inverse_gamma
from bnnpp.priors.hyperpriors import Per as Per
from bnnpp.priors.hyperpriors import hyperprior_from_spec as hyperprior_from_spec
from bnnpp.priors.mixture import ScaleMixtureNormal
from bnnpp.priors.weights import (
    PRIORS,
    Prior,
    cauchy,
    flat,
    from_flags,
    laplace,
    normal,
    prior,
    scale_mixture,
    student_t,
)
from bnnpp.priors.weights import prior_from_spec as prior_from_spec

__all__ = [
    "HYPERPRIORS",
    "PRIORS",
    "Hyperprior",
    "Prior",
    "ScaleMixtureNormal",
    "cauchy",
    "flat",
    "from_flags",
    "half_cauchy",
    "half_normal",
    "hyperprior",
    "inverse_gamma",
    "laplace",
    "normal",
    "prior",
    "scale_mixture",
    "student_t",
]
