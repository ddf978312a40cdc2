"""One vocabulary of options across methods: ``num_steps`` or ``epochs`` (one of them) sets the
length of every iterative method, ``batch_size`` minibatches advi too, and the CLI's flags are
the option names. Parametrised over the registry: a new method is covered by registering it."""

from __future__ import annotations

import numpy as np
import pytest

import bnnpp
from bnnpp.inference import get_method
from bnnpp.inference.options import steps_for
from bnnpp.inference.registry import command_line_options

N = 40  # training rows: small, so that 200 steps of every method stay fast


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 2)).astype(np.float32)
    y = (x[:, 0] + 0.3 * rng.normal(size=N) > 0).astype(np.int32)
    model = bnnpp.models.mlp((3,), likelihood="categorical", num_classes=2, prior=bnnpp.priors.normal(1.0))
    return model, x, y


# per-method settings that only keep the run small (none of them sets the run length)
SMALL = {"ensemble": {"members": 2}, "multiswag": {"members": 2, "num_samples": 3}, "swag": {"rank": 3, "num_samples": 5},
         "nuts": {"num_chains": 1}, "chees": {"num_chains": 2}, "mclmc": {"num_chains": 2}, "pathfinder": {"num_paths": 2}, "sgld": {"num_chains": 1}, "advi": {"num_samples": 20}, "bbb": {"num_samples": 20},
         "laplace": {"num_samples": 20}, "mc_dropout": {"num_samples": 20}, "vd": {"num_samples": 20}}


# ~10 s a method (compilation): map stays in the fast suite, the others are marked slow
@pytest.mark.parametrize("method", [m if m == "map" else pytest.param(m, marks=pytest.mark.slow) for m in bnnpp.registered()])
def test_num_steps_200_for_every_method(method, small):
    model, x, y = small
    options = {**SMALL.get(method, {}), "num_steps": 200}
    if "batch_size" in get_method(method).defaults:
        options["batch_size"] = 10
    post = bnnpp.fit(model, (x, y), method=method, seed=0, progress=False, **options)
    info = post.info
    probs = post.predict(x[:5]).probs
    assert probs.shape[1:] == (5, 2) and np.all(np.isfinite(probs))
    if method in ("nuts", "chees", "mclmc", "meads"):  # half warm-up, half kept
        assert (info["options"]["num_warmup"], post.num_draws) == (100, 100)
    elif method == "sgld":  # half burn-in; 100 draws from the other half, one per step
        assert (info["options"]["burn_in"], info["options"]["thinning"], post.num_draws) == (100, 1, 100)
    elif method == "pathfinder":  # one runner step: an L-BFGS path of num_steps iterations
        assert info["options"]["num_steps"] == 200 and info["steps_run"] == 1
    elif method in ("swag", "multiswag"):  # half MAP pretraining, the rest SWAG epochs of N // 10 = 4 steps
        assert (info["options"]["pretrain_steps"], info["options"]["swag_epochs"]) == (100, 25)
        assert info["steps_run"] == 200
    else:
        assert info["steps_run"] == 200, info.get("steps_run")


@pytest.mark.parametrize("method", [m for m in bnnpp.registered() if "epochs" in get_method(m).defaults])
def test_epochs_convert_with_the_batch_size(method):
    # 3 epochs of N // 10 = 4 minibatches are 12 steps; full batch, 1 step an epoch
    batched = "batch_size" in get_method(method).defaults
    opts = get_method(method).parse({"epochs": 3, **({"batch_size": 10} if batched else {})})
    resolved = opts.resolve(N)
    total = 12 if batched else 3
    assert steps_for(resolved, N) == total
    assert resolved.resolve(N) == resolved  # resolving twice changes nothing
    if method == "sgld":
        assert (resolved.burn_in, resolved.thinning) == (total // 2, 1)
    elif method in ("swag", "multiswag"):  # the rest: at least 2 x collect_every SWAG epochs
        assert (resolved.pretrain_steps, resolved.swag_epochs) == (total // 2, 2)
    elif get_method(method).defaults["epochs"] is None:  # epochs replaces a num_steps default
        assert resolved.num_steps == total


@pytest.mark.parametrize("method", [m for m in bnnpp.registered() if {"epochs", "num_steps"} <= set(get_method(m).defaults)])
def test_num_steps_and_epochs_are_exclusive(method):
    with pytest.raises(ValueError, match="either epochs or num_steps|either num_steps or epochs"):
        get_method(method).parse({"epochs": 2, "num_steps": 10})


def test_sgld_takes_learning_rate_as_its_step_size():
    opts = get_method("sgld").parse({"learning_rate": 3e-4}).resolve(N)
    assert opts.step_size == 3e-4 and opts.resolve(N) == opts
    with pytest.raises(ValueError, match="either learning_rate or step_size"):
        get_method("sgld").parse({"learning_rate": 3e-4, "step_size": 1e-3})


def test_nuts_refuses_epochs_naming_num_warmup():
    with pytest.raises(ValueError, match="num_warmup") as e:
        get_method("nuts").parse({"epochs": 3})
    assert "\n" not in str(e.value)


def test_advi_minibatches_are_unbiased_for_the_full_data():
    # with batch_size = N the scaled minibatch ELBO is the full ELBO; with B < N the mean of
    # the per-step loss at a fixed guide tracks the full-data loss (checked through the fit):
    # conjugate linear regression, known noise, so ADVI's optimum is the exact posterior
    import numpyro
    import numpyro.distributions as dist

    rng = np.random.default_rng(1)
    n = 200
    x = rng.normal(size=(n, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0]) + 0.5 * rng.normal(size=n)).astype(np.float32)

    def linreg(x, y=None):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(x @ w, 0.5), obs=y)

    cov = np.linalg.inv(np.eye(2) + x.T.astype(np.float64) @ x / 0.25)
    mean = cov @ x.T @ y / 0.25
    post = bnnpp.fit(linreg, (x, y), method="advi", seed=0, progress=False, num_steps=3000, batch_size=20,
                     learning_rate=1e-2, num_samples=4000)
    w = np.asarray(post.samples["w"]).reshape(-1, 2)
    # without the N/B scaling the likelihood would weigh 10x less: sds ~3.2x the exact ones
    assert np.allclose(w.mean(0), mean, atol=0.02 + 0.3 * np.sqrt(np.diag(cov)).max())
    assert np.allclose(w.std(0), np.sqrt(np.diag(cov)), rtol=0.35)


def test_cli_flags_are_the_option_names_with_old_aliases():
    flags = command_line_options()
    for cli in flags:
        assert cli.flag == "--" + cli.option.replace("_", "-")
    steps = next(c for c in flags if c.option == "num_steps")
    assert "--steps" in steps.aliases


def test_a_flag_with_unrelated_choices_names_each_methods_meaning():
    """sgld's and vd's --variant share a flag but not a meaning: the help gives each its words."""
    variant = next(c for c in command_line_options() if c.option == "variant")
    assert {"psgld", "sparse"} <= set(variant.choices)
    assert variant.help.startswith("sgld: stochastic-gradient MCMC variant") and "; vd: gaussian_dropout" in variant.help
    steps = next(c for c in command_line_options() if c.option == "num_steps")
    assert "; " not in steps.help  # same choices (none): the first method's words only
