"""The multilayer perceptron as a NumPyro model."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions.util import validate_sample

from bnnpp.models.layers import dense
from bnnpp.models.scaling import Scaling
from bnnpp.priors import Prior, normal, prior_from_spec

__all__ = ["ACTIVATIONS", "DEFAULT_DF", "LIKELIHOODS", "MLP", "CategoricalLogits", "check_observation", "mlp", "observe"]

ACTIVATIONS: dict[str, Callable[[jnp.ndarray], jnp.ndarray]] = {
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "sigmoid": jax.nn.sigmoid,
    "elu": jax.nn.elu,
    "gelu": jax.nn.gelu,
    "softplus": jax.nn.softplus,
    "identity": lambda h: h,
}


class CategoricalLogits(dist.CategoricalLogits):
    """NumPyro's ``Categorical(logits=...)`` with its log-probability computed with the
    class axis moved first: ``log p(k) = logits_k − logsumexp_c logits_c``, the same
    numbers. :class:`MLP` holds its logits as ``(C, n)`` and hands the distribution their
    transpose; moving the axis back cancels that transpose, so the
    reductions over the C classes run with the n rows as the minor axis, which XLA CPU
    vectorises (NumPyro's ``take_along_axis`` over a trailing axis of a few classes does not). A
    label outside ``0..C-1`` has log-probability −inf, as with NumPyro's."""

    @validate_sample
    def log_prob(self, value):
        batch = jax.lax.broadcast_shapes(jnp.shape(value), self.batch_shape)
        classes = jnp.shape(self.logits)[-1]
        lt = jnp.moveaxis(self.logits, -1, 0)  # (C, *batch_shape)
        lt = jnp.broadcast_to(lt.reshape((classes,) + (1,) * (len(batch) - lt.ndim + 1) + lt.shape[1:]), (classes, *batch))
        value = jnp.broadcast_to(value, batch)
        picked = jnp.take_along_axis(lt, value[None].astype(jnp.int32), axis=0, mode="clip")[0]
        lp = picked - jax.scipy.special.logsumexp(lt, axis=0)
        return jnp.where((value >= 0) & (value < classes), lp, -jnp.inf)


LIKELIHOODS = ("categorical", "bernoulli", "gaussian", "student_t", "poisson", "heteroscedastic")
#: How a heteroscedastic net's second head h gives the sd (see :func:`observe`).
SD_LINKS = ("softplus", "exp")
CLASSIFICATION = ("categorical", "bernoulli")
BASIC_LIKELIHOODS = ("categorical", "bernoulli", "gaussian")
"""What :func:`check_observation` accepts unless told otherwise (``from_flax`` networks)."""
LEARNED_NOISE = ("gaussian", "student_t")
"""Likelihoods with one scale for all rows: fixed by ``noise=`` or learned as the site ``noise``."""
DEFAULT_DF = 4.0


class MLP:
    """A Bayesian MLP; call it as a NumPyro model ``model(x, y=None, *, subsample_size=None)``.

    Sites (see :mod:`bnnpp.models.layers` for the per-layer scheme): layers ``dense_0`` …
    ``dense_L`` (the last is the output layer); ``noise`` (gaussian / student_t likelihood
    with a learned scale, HalfNormal(``noise_scale``)); deterministic ``logits`` ``(n, C)``
    (categorical), ``logits`` ``(n,)`` (bernoulli), ``mean`` (gaussian, student_t,
    heteroscedastic, which adds ``log_sd``) or ``rate`` (poisson), each ``(n,)`` or ``(n, K)``
    with ``outputs=K``; observed ``y`` inside ``numpyro.plate("data", n,
    subsample_size=subsample_size)``, ``(n,)`` or, with ``outputs=K``, ``(n, K)`` as one event
    per row.

    Use :func:`mlp` to build one; instances are immutable and describe themselves through
    :meth:`spec` so a saved posterior can rebuild its model. With a :attr:`scaling`
    (:mod:`bnnpp.models.scaling`) the layers see standardised inputs and ``mean`` is in the
    targets' units.
    """

    input_rank = 2

    def __init__(
        self,
        hidden: tuple[int, ...],
        activation: str,
        likelihood: str,
        num_classes: int | None,
        noise: float | None,
        prior: Prior,
        noise_scale: float,
        df: float | None = None,
        outputs: int | None = None,
        sd_link: str | None = None,
        standardize: bool = False,
        scaling: Scaling | None = None,
    ):
        self.hidden = hidden
        self.activation = activation
        self.likelihood = likelihood
        self.num_classes = num_classes
        self.noise = noise
        self.prior = prior
        self.noise_scale = noise_scale
        self.df = df
        self.outputs = outputs
        self.sd_link = sd_link
        self.standardize = standardize
        self.scaling = scaling
        self._act = ACTIVATIONS[activation]

    def with_scaling(self, scaling: Scaling | None) -> MLP:
        """The same network with the data transform ``scaling`` (``None``: none)."""
        return MLP(
            self.hidden,
            self.activation,
            self.likelihood,
            self.num_classes,
            self.noise,
            self.prior,
            self.noise_scale,
            self.df,
            self.outputs,
            self.sd_link,
            self.standardize,
            scaling,
        )

    @property
    def task(self) -> str:
        """``"classification"`` or ``"regression"``."""
        return "classification" if self.likelihood in CLASSIFICATION else "regression"

    @property
    def num_outputs(self) -> int:
        """Width of the output layer (a heteroscedastic net has a second head for the log sd)."""
        if self.likelihood == "categorical":
            return self.num_classes
        k = self.outputs or 1
        return 2 * k if self.likelihood == "heteroscedastic" else k

    def __call__(self, x: jnp.ndarray, y: jnp.ndarray | None = None, *, subsample_size: int | None = None):
        n = x.shape[0]
        data = numpyro.plate("data", n, subsample_size=subsample_size)
        with data:
            h = numpyro.subsample(x, event_dim=1)
        if self.scaling is not None:
            h = self.scaling.inputs(h)
        shared = self.prior.sample_scale("network") if self.prior.per == "network" else None
        widths = (*self.hidden, self.num_outputs)
        # The hidden activations are held transposed (features × rows) and each layer gets
        # hT.T: with the default dense layer the transposes cancel in XLA and every matmul,
        # bias and activation works with the rows as the minor axis (see layers._dense_default).
        # A handler that answers the layer sees the usual (n, in) inputs and returns (n, units).
        ht = h.T
        for i, units in enumerate(widths):
            ht = dense(f"dense_{i}", ht.T, units, self.prior, scale=shared).T
            if i < len(widths) - 1:
                ht = self._act(ht)
        h = ht.T
        observe(
            data,
            h,
            y,
            self.likelihood,
            self.noise,
            self.noise_scale,
            df=self.df,
            outputs=self.outputs,
            sd_link=self.sd_link,
            scaling=self.scaling,
        )

    def spec(self) -> dict:
        """JSON-serialisable description; :func:`bnnpp.models.from_spec` rebuilds the model."""
        return {
            "type": "mlp",
            "hidden": list(self.hidden),
            "activation": self.activation,
            "likelihood": self.likelihood,
            "num_classes": self.num_classes,
            "noise": self.noise,
            "prior": self.prior.spec(),
            "noise_scale": self.noise_scale,
            "df": self.df,
            "outputs": self.outputs,
            "sd_link": self.sd_link,
            "standardize": self.standardize,
            "scaling": None if self.scaling is None else self.scaling.spec(),
        }

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in (("df", self.df), ("outputs", self.outputs), ("sd_link", self.sd_link)) if v is not None)
        extra += "" if self.standardize else ", standardize=False"
        return (
            f"mlp(hidden={self.hidden}, activation={self.activation!r}, likelihood={self.likelihood!r}, "
            f"num_classes={self.num_classes}, noise={self.noise}, prior={self.prior}{extra})"
        )


def observe(
    data,
    h: jnp.ndarray,
    y,
    likelihood: str,
    noise: float | None,
    noise_scale: float,
    *,
    df: float | None = None,
    outputs: int | None = None,
    sd_link: str | None = None,
    scaling: Scaling | None = None,
) -> None:
    """The observation sites of a network with outputs ``h`` ``(n, width)``: ``noise`` ~
    HalfNormal(``noise_scale``) when a gaussian / student_t scale is learned (``noise=None``),
    deterministic ``logits`` / ``mean`` (+ ``log_sd``) / ``rate`` and the observed ``y``
    inside the ``data`` plate (subsampled with it).

    Likelihoods (K = ``outputs`` targets per row, or one with ``outputs=None`` and ``y``
    ``(n,)``): categorical ``h`` ``(n, C)``; bernoulli ``h[:, 0]`` logits; gaussian
    N(mean, σ²); student_t StudentT(df, mean, σ) (robust to outliers); poisson
    Poisson(exp(h)) (``h`` the log rate, counts ``y``); heteroscedastic N(mean, sd²)
    with ``mean = h[:, :K]`` and ``sd = softplus(h[:, K:]) + 1e-6`` (Nix & Weigend 1994: the
    network also predicts its noise; the softplus link of Lakshminarayanan et al. 2017), or
    ``sd = exp(h[:, K:])`` with ``sd_link="exp"``, its log recorded as the deterministic
    ``log_sd``. With ``outputs=K`` a row of ``y`` ``(n, K)`` is one event
    (``.to_event(1)``), so the log-likelihood has one value per row.

    With a ``scaling`` (:class:`~bnnpp.models.scaling.Scaling`) whose targets are standardised,
    the mean is ``y_shift + y_scale · h``, a heteroscedastic sd is ``y_scale`` times the sd
    above, and a learned ``noise`` is in the targets' units with the prior
    HalfNormal(``noise_scale · y_scale``), i.e. HalfNormal(``noise_scale``) in standardised
    units; a fixed ``noise`` is in the targets' units.
    """
    unit = 1.0 if scaling is None else scaling.target_scale
    if likelihood in LEARNED_NOISE:
        sigma = noise if noise is not None else numpyro.sample("noise", dist.HalfNormal(noise_scale * unit))
    event = 0 if outputs is None else 1
    with data:
        yb = numpyro.subsample(y, event_dim=event) if y is not None else None
        if likelihood == "categorical":
            logits = numpyro.deterministic("logits", h)
            numpyro.sample("y", CategoricalLogits(logits), obs=yb)
            return
        if likelihood == "bernoulli":
            logits = numpyro.deterministic("logits", h[..., 0])
            numpyro.sample("y", dist.Bernoulli(logits=logits), obs=yb)
            return
        k = outputs or 1
        head = (lambda a: a) if outputs is not None else (lambda a: a[..., 0])  # (n, K) or (n,)
        if likelihood == "poisson":
            rate = numpyro.deterministic("rate", jnp.exp(head(h[..., :k])))
            fn = dist.Poisson(rate)
        else:
            f = head(h[..., :k])
            mean = numpyro.deterministic("mean", f if scaling is None else scaling.mean(f))
            if likelihood == "heteroscedastic":
                # softplus by default: an exp link lets a weight draw push one row's sd past
                # float32 range (seen on protein); + 1e-6 as Lakshminarayanan et al. (2017, §2.2.1)
                raw = head(h[..., k:])
                sd = jnp.exp(raw) if sd_link == "exp" else jax.nn.softplus(raw) + 1e-6
                sd = sd if scaling is None else jnp.float32(unit) * sd
                numpyro.deterministic("log_sd", jnp.log(sd))
                fn = dist.Normal(mean, sd)
            elif likelihood == "student_t":
                fn = dist.StudentT(df, mean, sigma)
            else:
                fn = dist.Normal(mean, sigma)
        numpyro.sample("y", fn.to_event(event) if event else fn, obs=yb)


def check_observation(
    likelihood: str,
    num_classes,
    noise,
    noise_scale,
    who: str = "mlp",
    likelihoods: tuple[str, ...] = BASIC_LIKELIHOODS,
) -> tuple[int | None, float | None, float]:
    """Validate a network's observation settings (``likelihood``, ``num_classes``, ``noise``,
    ``noise_scale`` as :func:`mlp` documents them); ``who`` names the builder in messages and
    ``likelihoods`` are the ones it builds.

    Returns:
        ``(num_classes, noise, noise_scale)``: ``num_classes`` an int (2 for bernoulli) or
        ``None`` for regression, ``noise`` a float or ``None``, ``noise_scale`` a float.
    """
    if likelihood not in likelihoods:
        raise ValueError(f"unknown likelihood {likelihood!r}; choose one of {', '.join(likelihoods)}")
    if likelihood == "categorical":
        if num_classes is None:
            raise ValueError(f"likelihood='categorical' needs num_classes, e.g. {who}(..., num_classes=2)")
        if int(num_classes) < 2:
            raise ValueError(f"num_classes must be ≥ 2, got {num_classes}")
        num_classes = int(num_classes)
    elif likelihood == "bernoulli":
        if num_classes not in (None, 2):
            raise ValueError("likelihood='bernoulli' is binary: leave num_classes unset (it is 2)")
        num_classes = 2
    elif num_classes is not None:
        raise ValueError(f"likelihood={likelihood!r} is regression: leave num_classes unset")
    if noise is not None:
        if likelihood not in LEARNED_NOISE:
            raise ValueError(f"noise= applies only to likelihood='gaussian' or 'student_t', not {likelihood!r}")
        noise = float(noise)
        if not noise > 0 or noise == float("inf"):
            raise ValueError(f"noise must be a positive number (or None to learn it), got {noise}")
    if not float(noise_scale) > 0:
        raise ValueError(f"noise_scale must be positive, got {noise_scale}")
    return num_classes, noise, float(noise_scale)


def _check_targets(likelihood: str, df, outputs) -> tuple[float | None, int | None]:
    """``df`` (student_t only; default :data:`DEFAULT_DF`) and ``outputs`` (regression only)."""
    if likelihood == "student_t":
        df = DEFAULT_DF if df is None else float(df)
        if not 0 < df < float("inf"):
            raise ValueError(f"df must be a positive number of degrees of freedom, got {df}")
    elif df is not None:
        raise ValueError(f"df= applies only to likelihood='student_t', not {likelihood!r}")
    if outputs is not None:
        if likelihood in CLASSIFICATION:
            raise ValueError(f"outputs= is the number of regression targets per row; likelihood={likelihood!r} takes 1-D labels")
        if isinstance(outputs, bool) or not isinstance(outputs, int) or outputs < 1:
            raise ValueError(f"outputs must be an integer ≥ 1 (targets per row, y of shape (n, outputs)), got {outputs!r}")
    return df, outputs


def mlp(
    hidden: Sequence[int] = (5, 5),
    *,
    activation: str = "tanh",
    likelihood: str = "categorical",
    num_classes: int | None = None,
    noise: float | None = None,
    prior: Prior | None = None,
    noise_scale: float = 1.0,
    df: float | None = None,
    outputs: int | None = None,
    sd_link: str | None = None,
    standardize: bool = True,
) -> MLP:
    """A fully connected Bayesian network as a NumPyro model ``model(x, y=None)``.

    Args:
        hidden: widths of the hidden layers, e.g. ``(5, 5)``; ``()`` gives a linear model.
        activation: one of ``tanh``, ``relu``, ``sigmoid``, ``elu``, ``gelu``, ``softplus``, ``identity``.
        likelihood: ``"categorical"`` (labels ``0..num_classes-1``), ``"bernoulli"`` (labels 0/1),
            or for real targets ``"gaussian"``, ``"student_t"`` (heavy tails, ``df`` degrees
            of freedom), ``"heteroscedastic"`` (Gaussian whose sd the network predicts with a
            second output head, ``softplus(h) + 1e-6``), or ``"poisson"`` (counts; the output is the
            log rate). See :func:`observe`.
        num_classes: number of classes; required for ``"categorical"``.
        noise: gaussian / student_t only: a float fixes the observation scale σ; ``None`` learns
            it (site ``noise`` ~ HalfNormal(``noise_scale``)) — the aleatoric part of the uncertainty.
        prior: weight prior for every layer (default ``priors.normal(1.0)``).
        noise_scale: scale of the HalfNormal prior on a learned noise sd.
        df: student_t only: degrees of freedom (default 4).
        outputs: regression only: K targets per row, ``y`` of shape ``(n, K)`` (one event per
            row, K independent outputs given the weights); ``None`` (default) for ``y`` ``(n,)``.
        sd_link: heteroscedastic only: ``"softplus"`` (default; sd = softplus(h) + 1e-6) or
            ``"exp"`` (sd = exp(h), the link of bnnpp before 2026-11-25: it can overflow
            float32 for a weight draw that pushes ``h`` past 88; saved models of that time load
            with it).
        standardize: ``True`` (default): :func:`bnnpp.fit` standardises the inputs on the
            training set (column means and sds; a constant column is only centred) and, for
            gaussian / student_t / heteroscedastic targets, the targets too (their means and
            pooled sd), so the weight prior and ``noise_scale`` act on unit-scale data while
            predictions, log-likelihoods and ArviZ groups stay in the data's own units
            (:mod:`bnnpp.models.scaling`; the transform is saved with the model).
            ``False``: the network sees the data as given.

    Returns:
        An :class:`MLP`, callable as ``model(x, y=None, *, subsample_size=None)`` with
        ``x`` of shape ``(n, features)``.
    """
    try:
        items = tuple(hidden)
    except TypeError:
        raise TypeError(f"hidden must be a sequence of layer widths such as (5, 5), got {hidden!r}") from None
    if any(isinstance(h, bool) or not isinstance(h, (int, np.integer)) for h in items):
        raise TypeError(f"hidden must be a sequence of integer layer widths such as (5, 5), got {hidden!r}")
    hidden_t = tuple(int(h) for h in items)
    if any(h < 1 for h in hidden_t):
        raise ValueError(f"hidden layer widths must be ≥ 1, got {hidden_t}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {', '.join(ACTIVATIONS)}")
    num_classes, noise, noise_scale = check_observation(likelihood, num_classes, noise, noise_scale, likelihoods=LIKELIHOODS)
    df, outputs = _check_targets(likelihood, df, outputs)
    if prior is None:
        prior = normal(1.0)
    if not isinstance(prior, Prior):
        raise TypeError(f"prior must be a bnnpp.priors.Prior such as priors.normal(1.0), got {prior!r}")
    if sd_link is not None and likelihood != "heteroscedastic":
        raise ValueError(f"sd_link applies only to likelihood='heteroscedastic', not {likelihood!r}: leave it unset")
    if likelihood == "heteroscedastic":
        sd_link = "softplus" if sd_link is None else sd_link
        if sd_link not in SD_LINKS:
            raise ValueError(f"unknown sd_link {sd_link!r}; choose one of {', '.join(SD_LINKS)}")
    if not isinstance(standardize, bool):
        raise TypeError(f"standardize must be True or False, got {standardize!r}")
    return MLP(hidden_t, activation, likelihood, num_classes, noise, prior, noise_scale, df, outputs, sd_link, standardize)


def mlp_from_spec(spec: dict) -> MLP:
    """Inverse of :meth:`MLP.spec`."""
    return mlp(
        tuple(spec["hidden"]),
        activation=spec["activation"],
        likelihood=spec["likelihood"],
        num_classes=spec["num_classes"] if spec["likelihood"] == "categorical" else None,
        noise=spec["noise"],
        prior=prior_from_spec(spec["prior"]),
        noise_scale=spec["noise_scale"],
        df=spec.get("df"),  # files of bnnpp 0.1 have neither
        outputs=spec.get("outputs"),
        # heteroscedastic files written before sd_link existed used the exp link
        sd_link=spec.get("sd_link", "exp") if spec["likelihood"] == "heteroscedastic" else None,
        standardize=bool(spec.get("standardize", False)),  # files written before it existed saw raw data
    ).with_scaling(None if spec.get("scaling") is None else Scaling.from_spec(spec["scaling"]))
