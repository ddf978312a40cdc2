"""Weight priors and hyperpriors: log-densities against scipy.stats, NumPyro sites, input checks.

JAX runs in its default float32 here. Tolerances: float32 has a relative precision of
~6e-8; a log-density is a handful of float32 operations (log, square, division), so
rtol=1e-5 plus atol=1e-5 (for values near 0) leaves ~100x headroom while still catching any
wrong constant (e.g. a missing log 2 or a swapped scale/variance, errors of order 0.1-1).
"""

from __future__ import annotations

import json
import math

import jax
import numpy as np
import pytest
import scipy.stats as st
from numpyro import handlers

from bnnpp import priors

RTOL = 1e-5
ATOL = 1e-5

# Values from the centre to far in the tails, and scales below, at and above 1.
VALUES = np.array([-10.0, -2.5, -0.3, 0.0, 0.1, 1.0, 4.0, 50.0], dtype=np.float32)
SCALES = [0.1, 1.0, 3.7]


def _lp(p: priors.Prior, w, scale=None) -> np.ndarray:
    return np.asarray(p.log_prob(w, scale) if scale is not None else p.log_prob(w), dtype=np.float64)


# --------------------------------------------------------------------------------------
# Weight priors against scipy.stats
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize(
    "make, ref",
    [
        (priors.normal, st.norm),
        (priors.laplace, st.laplace),
        (priors.cauchy, st.cauchy),
    ],
    ids=["normal", "laplace", "cauchy"],
)
def test_location_scale_log_prob_matches_scipy(make, ref, scale):
    w = VALUES.astype(np.float64)
    expected = ref.logpdf(w, loc=0.0, scale=scale)
    # Both the fixed scale and the scale passed as an argument (the hierarchical path).
    np.testing.assert_allclose(_lp(make(scale), VALUES), expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(_lp(make(1.0), VALUES, np.float32(scale)), expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("df", [1.0, 3.0, 10.0])
def test_student_t_log_prob_matches_scipy(df, scale):
    expected = st.t.logpdf(VALUES.astype(np.float64), df, loc=0.0, scale=scale)
    np.testing.assert_allclose(_lp(priors.student_t(df, scale), VALUES), expected, rtol=RTOL, atol=ATOL)
    # prior("student-t", df=...) builds the same thing.
    np.testing.assert_allclose(_lp(priors.prior("student-t", scale, df=df), VALUES), expected, rtol=RTOL, atol=ATOL)


def test_student_t_df1_is_cauchy():
    np.testing.assert_allclose(
        _lp(priors.student_t(1.0, 2.0), VALUES), _lp(priors.cauchy(2.0), VALUES), rtol=RTOL, atol=ATOL
    )


def test_log_prob_broadcasts_per_unit_scale():
    """A (units,) scale broadcasts over the last axis of a (fan_in, units) weight matrix."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 4)).astype(np.float32)
    s = np.array([0.2, 1.0, 2.5, 7.0], dtype=np.float32)
    got = _lp(priors.laplace(priors.half_cauchy(1.0), per="unit"), w, s)
    assert got.shape == (3, 4)
    np.testing.assert_allclose(got, st.laplace.logpdf(w, scale=s[None, :]), rtol=RTOL, atol=ATOL)


def test_hierarchical_prior_needs_a_scale():
    p = priors.normal(priors.half_normal(1.0))
    with pytest.raises(ValueError, match="hyperprior"):
        p.log_prob(np.zeros(3, np.float32))


# --------------------------------------------------------------------------------------
# Flat prior
# --------------------------------------------------------------------------------------


def test_flat_log_prob_is_zero_with_value_shape():
    p = priors.flat()
    w = np.array([[-1e6, 0.0, 3.0], [1.0, -2.0, 1e30]], dtype=np.float32)
    lp = np.asarray(p.log_prob(w))
    assert lp.shape == w.shape
    assert np.all(lp == 0.0)


def test_flat_has_no_scale():
    p = priors.flat()
    assert p.scale is None
    assert not p.hierarchical
    assert priors.prior("flat") == p


def test_per_needs_a_sampled_scale():
    """per scopes a hyperprior's scale; with a fixed scale it would be ignored, so it is refused
    (and a saved spec that recorded one loads as per='layer', which is what it meant)."""
    with pytest.raises(ValueError, match=r"per='unit' scopes a sampled scale.*leave per out"):
        priors.normal(1.0, per="unit")
    assert priors.normal(priors.half_cauchy(1.0), per="unit").per == "unit"
    assert priors.prior_from_spec({"kind": "normal", "scale": 2.0, "per": "network", "params": []}) == priors.normal(2.0)


def test_flat_rejects_a_hyperprior():
    with pytest.raises(ValueError, match="flat"):
        priors.prior("flat", priors.half_normal(1.0))


# --------------------------------------------------------------------------------------
# Scale mixture (Blundell et al. 2015)
# --------------------------------------------------------------------------------------

S2_BLUNDELL = float(np.exp(-6))


def _mixture_logpdf_direct(w, pi, s1, s2):
    """log(pi N(w; 0, s1^2) + (1 - pi) N(w; 0, s2^2)) evaluated literally in float64."""
    w = np.asarray(w, np.float64)
    with np.errstate(under="ignore"):
        return np.log(pi * st.norm.pdf(w, scale=s1) + (1 - pi) * st.norm.pdf(w, scale=s2))


@pytest.mark.parametrize(
    "pi, s1, s2",
    [(0.5, 1.0, S2_BLUNDELL), (0.25, 1.0, S2_BLUNDELL), (0.8, 2.0, 0.3)],
)
def test_scale_mixture_log_prob_matches_direct_formula(pi, s1, s2):
    # Dense grid on [-3, 3] (plus points right at the narrow component's scale), where the
    # literal float64 formula is finite: the wide component alone keeps it above ~1e-3.
    w = np.concatenate([np.linspace(-3.0, 3.0, 121), [0.0, 1e-3, -2e-3, 5e-3, 1e-2]]).astype(np.float32)
    expected = _mixture_logpdf_direct(w, pi, s1, s2)
    assert np.all(np.isfinite(expected))
    got = _lp(priors.scale_mixture(pi, s1, s2), w)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


def test_scale_mixture_is_finite_far_from_zero():
    """At w=50 the narrow component underflows (N(50; 0, e^-6) = exp(-2e8)) and so does the
    literal formula in float64 for the wide one (exp(-1250)); logsumexp must stay finite and
    equal log(pi) + log N(50; 0, s1) (the narrow term is exp(-2e8) smaller, i.e. nothing)."""
    pi = 0.5
    w = np.array([-50.0, 50.0], dtype=np.float32)
    got = _lp(priors.scale_mixture(pi, 1.0, S2_BLUNDELL), w)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, np.log(pi) + st.norm.logpdf(w.astype(np.float64)), rtol=RTOL)


@pytest.mark.parametrize("c", [0.5, 3.0])
def test_scale_mixture_scale_multiplies_both_components(c):
    pi, s1, s2 = 0.3, 1.0, 0.05
    w = np.linspace(-2.0, 2.0, 41).astype(np.float32)
    expected = _mixture_logpdf_direct(w, pi, c * s1, c * s2)
    # fixed scale c ...
    np.testing.assert_allclose(_lp(priors.scale_mixture(pi, s1, s2, scale=c), w), expected, rtol=RTOL, atol=ATOL)
    # ... and c passed as the sampled scale of a hierarchical mixture
    hier = priors.scale_mixture(pi, s1, s2, scale=priors.half_normal(1.0))
    np.testing.assert_allclose(_lp(hier, w, np.float32(c)), expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("pi, s1, s2", [(0.5, 1.0, S2_BLUNDELL), (0.25, 1.0, 0.1)])
def test_scale_mixture_sample_variance(pi, s1, s2):
    n = 200_000
    d = priors.ScaleMixtureNormal(pi, s1, s2)
    w = np.asarray(d.sample(jax.random.PRNGKey(0), (n,)), dtype=np.float64)
    assert w.shape == (n,)
    var = pi * s1**2 + (1 - pi) * s2**2
    np.testing.assert_allclose(float(d.variance), var, rtol=1e-6)
    # The mean is 0, so the sample variance is mean(w^2), whose sd is
    # sqrt((E[w^4] - var^2) / n) with E[w^4] = 3 (pi s1^4 + (1 - pi) s2^4). Allow 5 sd
    # (~0.01 here); a swapped pi or a mis-scaled component is off by 0.25 or more.
    m4 = 3 * (pi * s1**4 + (1 - pi) * s2**4)
    sd = math.sqrt((m4 - var**2) / n)
    assert abs(np.mean(w**2) - var) < 5 * sd
    # The mean is 0 (sd of the sample mean sqrt(var / n)).
    assert abs(np.mean(w)) < 5 * math.sqrt(var / n)


# --------------------------------------------------------------------------------------
# Hyperpriors
# --------------------------------------------------------------------------------------

POSITIVE = np.array([1e-3, 0.05, 0.5, 1.0, 2.0, 7.5, 40.0], dtype=np.float32)


@pytest.mark.parametrize("s", [0.3, 1.0, 5.0])
def test_half_normal_log_prob_matches_scipy(s):
    hp = priors.half_normal(s)
    expected = st.halfnorm.logpdf(POSITIVE.astype(np.float64), scale=s)
    np.testing.assert_allclose(np.asarray(hp.log_prob(POSITIVE), np.float64), expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("s", [0.3, 1.0, 5.0])
def test_half_cauchy_log_prob_matches_scipy(s):
    hp = priors.half_cauchy(s)
    expected = st.halfcauchy.logpdf(POSITIVE.astype(np.float64), scale=s)
    np.testing.assert_allclose(np.asarray(hp.log_prob(POSITIVE), np.float64), expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("a, b", [(1.0, 1.0), (2.0, 0.5), (0.5, 3.0)])
def test_inverse_gamma_log_prob_on_variance_matches_scipy(a, b):
    hp = priors.inverse_gamma(a, b)
    # The density is on the variance v: p(v) = b^a / Gamma(a) v^(-a-1) exp(-b / v).
    v = POSITIVE  # includes v=1e-3, where the log-density is ~ -1000 (rtol dominates)
    expected = st.invgamma.logpdf(v.astype(np.float64), a, scale=b)
    np.testing.assert_allclose(np.asarray(hp.log_prob(v), np.float64), expected, rtol=RTOL, atol=ATOL)


def test_hyperprior_param_and_to_scale():
    assert priors.half_normal(1.0).param == "scale"
    assert priors.half_cauchy(1.0).param == "scale"
    assert priors.inverse_gamma(1.0, 1.0).param == "variance"
    v = np.array([0.25, 1.0, 4.0, 9.0], dtype=np.float32)
    np.testing.assert_allclose(np.asarray(priors.inverse_gamma(2.0, 1.0).to_scale(v)), [0.5, 1.0, 2.0, 3.0], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(priors.half_normal(1.0).to_scale(v)), v)
    np.testing.assert_array_equal(np.asarray(priors.half_cauchy(1.0).to_scale(v)), v)


def test_hyperprior_by_name():
    assert priors.hyperprior("half-normal", 2.0) == priors.half_normal(2.0)
    assert priors.hyperprior("half_cauchy") == priors.half_cauchy(1.0)
    assert priors.hyperprior("Inverse-Gamma", 2.0, 3.0) == priors.inverse_gamma(2.0, 3.0)


# --------------------------------------------------------------------------------------
# NumPyro sites
# --------------------------------------------------------------------------------------


def _trace(fn):
    tr = handlers.trace(handlers.seed(fn, 0)).get_trace()
    return {k: v for k, v in tr.items() if v["type"] == "sample"}


def test_sample_scale_per_layer_site():
    p = priors.normal(priors.inverse_gamma(1.0, 1.0))
    out = {}

    def model():
        out["scale"] = p.sample_scale("dense_0")
        out["w"] = p.sample("dense_0.kernel", (3, 4), out["scale"], ("dense_0.in", "dense_0.out"))

    sites = _trace(model)
    assert set(sites) == {"dense_0.variance", "dense_0.kernel"}
    v = sites["dense_0.variance"]["value"]
    assert v.shape == ()
    assert float(v) > 0
    np.testing.assert_allclose(float(out["scale"]), math.sqrt(float(v)), rtol=1e-6)
    w_site = sites["dense_0.kernel"]
    assert w_site["value"].shape == (3, 4)
    assert w_site["infer"]["dims"] == ("dense_0.in", "dense_0.out")
    # The site's joint log-density is the sum of the elementwise prior at the sampled scale.
    expected = st.norm.logpdf(np.asarray(w_site["value"], np.float64), scale=math.sqrt(float(v))).sum()
    np.testing.assert_allclose(float(w_site["fn"].log_prob(w_site["value"])), expected, rtol=RTOL)
    # And the variance site carries the inverse-gamma density.
    np.testing.assert_allclose(
        float(sites["dense_0.variance"]["fn"].log_prob(v)), st.invgamma.logpdf(float(v), 1.0, scale=1.0), rtol=RTOL, atol=ATOL
    )


def test_sample_scale_per_unit_site():
    units = 4
    p = priors.normal(priors.half_cauchy(1.0), per="unit")
    out = {}

    def model():
        out["scale"] = p.sample_scale("dense_1", units=units)
        out["w"] = p.sample("dense_1.kernel", (3, units), out["scale"], ("dense_1.in", "dense_1.out"))

    sites = _trace(model)
    assert set(sites) == {"dense_1.scale", "dense_1.kernel"}
    s_site = sites["dense_1.scale"]
    assert s_site["value"].shape == (units,)
    assert s_site["infer"]["dims"] == ("dense_1.out",)
    np.testing.assert_array_equal(np.asarray(out["scale"]), np.asarray(s_site["value"]))
    assert sites["dense_1.kernel"]["value"].shape == (3, units)
    # Column j of the weights uses scale j.
    w = np.asarray(sites["dense_1.kernel"]["value"], np.float64)
    s = np.asarray(s_site["value"], np.float64)
    expected = st.norm.logpdf(w, scale=s[None, :]).sum()
    got = float(sites["dense_1.kernel"]["fn"].log_prob(sites["dense_1.kernel"]["value"]))
    np.testing.assert_allclose(got, expected, rtol=RTOL)


def test_sample_scale_per_network_site():
    p = priors.laplace(priors.half_normal(2.0), per="network")

    def model():
        p.sample_scale("network")

    sites = _trace(model)
    assert set(sites) == {"network.scale"}
    assert sites["network.scale"]["value"].shape == ()


def test_sample_scale_per_unit_needs_units():
    p = priors.normal(priors.half_normal(1.0), per="unit")
    with pytest.raises(ValueError, match="units"):
        handlers.seed(lambda: p.sample_scale("dense_0"), 0)()


def test_fixed_scale_has_no_scale_site():
    p = priors.normal(2.5)
    out = {}

    def model():
        out["scale"] = p.sample_scale("dense_0", units=4)
        p.sample("dense_0.bias", (4,), out["scale"], ("dense_0.out",))

    sites = _trace(model)
    assert set(sites) == {"dense_0.bias"}
    assert out["scale"] == 2.5 and isinstance(out["scale"], float)
    assert sites["dense_0.bias"]["value"].shape == (4,)


def test_flat_sample_site_shape():
    """A flat prior cannot be sampled (documented), so the value is substituted, as an
    inference backend's initialisation would; the site still has the weight shape."""
    p = priors.flat()
    value = np.linspace(-3.0, 3.0, 10, dtype=np.float32).reshape(2, 5)

    def model():
        s = p.sample_scale("dense_0")
        assert s is None
        p.sample("dense_0.kernel", (2, 5), s, ("in", "out"))

    site = _trace(handlers.substitute(model, data={"dense_0.kernel": value}))["dense_0.kernel"]
    assert site["fn"].event_shape == (2, 5)
    assert site["value"].shape == (2, 5)
    assert float(site["fn"].log_prob(site["value"])) == 0.0


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------

BAD_SCALES = [0.0, -1.0, float("nan"), float("inf")]


@pytest.mark.parametrize("bad", BAD_SCALES)
@pytest.mark.parametrize(
    "make",
    [
        lambda s: priors.normal(s),
        lambda s: priors.laplace(s),
        lambda s: priors.cauchy(s),
        lambda s: priors.student_t(3.0, s),
        lambda s: priors.student_t(s, 1.0),  # df
        lambda s: priors.scale_mixture(scale=s),
        lambda s: priors.scale_mixture(0.5, s, 0.1),
        lambda s: priors.scale_mixture(0.5, 1.0, s),
        lambda s: priors.prior("normal", s),
        lambda s: priors.half_normal(s),
        lambda s: priors.half_cauchy(s),
        lambda s: priors.inverse_gamma(s, 1.0),
        lambda s: priors.inverse_gamma(1.0, s),
    ],
    ids=[
        "normal",
        "laplace",
        "cauchy",
        "student_t-scale",
        "student_t-df",
        "mixture-scale",
        "mixture-sigma1",
        "mixture-sigma2",
        "prior-by-name",
        "half_normal",
        "half_cauchy",
        "inverse_gamma-a",
        "inverse_gamma-b",
    ],
)
def test_non_positive_or_non_finite_scale_raises(make, bad):
    with pytest.raises(ValueError, match="positive"):
        make(bad)


def test_unknown_prior_name_lists_valid_names():
    with pytest.raises(ValueError, match="gauss") as exc:
        priors.prior("gauss")
    for name in priors.PRIORS:
        assert name in str(exc.value)


def test_unknown_hyperprior_name_lists_valid_names():
    with pytest.raises(ValueError, match="gamma") as exc:
        priors.hyperprior("gamma")
    for name in priors.HYPERPRIORS:
        assert name in str(exc.value)


@pytest.mark.parametrize(
    "make",
    [
        lambda: priors.normal(1.0, per="bogus"),
        lambda: priors.normal(priors.half_normal(1.0), per="bogus"),
        lambda: priors.prior("laplace", per="bogus"),
        lambda: priors.scale_mixture(per="bogus"),
    ],
)
def test_bad_per_raises(make):
    with pytest.raises(ValueError, match="per"):
        make()


def test_bad_per_raises_for_flat_by_name():
    with pytest.raises(ValueError, match="per"):
        priors.prior("flat", per="bogus")


@pytest.mark.parametrize(
    "make, exc",
    [
        (lambda: priors.half_normal("2"), TypeError),
        (lambda: priors.normal(True), TypeError),
        (lambda: priors.normal(10**400), TypeError),
        (lambda: priors.Prior("gauss", 1.0), ValueError),
        (lambda: priors.Prior("flat", priors.half_normal(1.0)), ValueError),
    ],
)
def test_constructor_rejects_strings_overflow_unknown_kinds(make, exc):
    with pytest.raises(exc):
        make()


@pytest.mark.parametrize("pi", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_scale_mixture_pi_outside_unit_interval_raises(pi):
    with pytest.raises(ValueError, match="pi"):
        priors.scale_mixture(pi)


@pytest.mark.parametrize("bad", ["1.0", "wide", {"s": 1.0}])
def test_non_numeric_scale_raises_type_error(bad):
    with pytest.raises(TypeError, match="scale"):
        priors.normal(bad)


def test_non_numeric_hyperprior_parameter_raises_type_error():
    with pytest.raises(TypeError):
        priors.half_cauchy("wide")
    with pytest.raises(TypeError):
        priors.scale_mixture("half")


# --------------------------------------------------------------------------------------
# Spec round trip
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "p",
    [
        priors.normal(priors.inverse_gamma(2.0, 3.0), per="unit"),
        priors.student_t(4.0, priors.half_cauchy(0.5), per="network"),
        priors.scale_mixture(0.3, 2.0, 0.01, scale=priors.half_normal(1.5)),
        priors.laplace(0.7),
        priors.student_t(3.0, 2.0),
        priors.scale_mixture(),
        priors.flat(),
    ],
    ids=["normal-IG-unit", "t-HC-network", "mixture-HN", "laplace-fixed", "t-fixed", "mixture-fixed", "flat"],
)
def test_spec_round_trip_through_json(p):
    text = json.dumps(p.spec())
    back = priors.prior_from_spec(json.loads(text))
    assert back == p
    assert back.hierarchical == p.hierarchical
    if p.hierarchical:
        assert back.scale.param == p.scale.param
