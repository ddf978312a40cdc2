"""Per-method options for the tests that fit every registered method on a tiny network and check
what the fit learned (an RMSE below the constant mean's, a clean ArviZ summary): each method's
smoke settings (``Method.smoke``) with the longer runs in :data:`LONGER`. A method registered
later (an opt-in sampler, a plugin) gets its smoke settings."""

from bnnpp.inference.registry import get_method, registered

LONGER = {  # these tests score the fit: more steps and draws than a smoke run's
    "map": {"num_steps": 200},
    "advi": {"num_steps": 200, "num_samples": 40},
    "bbb": {"epochs": 200, "num_samples": 40},
    "ensemble": {"members": 2, "num_steps": 200},
    "laplace": {"num_steps": 200, "num_samples": 40},
    "mc_dropout": {"num_steps": 200, "num_samples": 40},
    "nuts": {"num_chains": 1, "num_warmup": 50, "num_samples": 40},
    "sgld": {"num_chains": 2, "burn_in": 100, "num_samples": 20, "thinning": 1},
    "swag": {"pretrain_steps": 100, "swag_epochs": 4, "batch_size": 10, "rank": 2, "num_samples": 20},
    "vd": {"epochs": 200, "num_samples": 40, "kl_warmup_epochs": 0},
    "multiswag": {"pretrain_steps": 100, "swag_epochs": 4, "batch_size": 10, "rank": 2, "num_samples": 10, "members": 2},
}


def small_options(method: str) -> dict:
    """``method``'s smoke settings, updated with its :data:`LONGER` entry."""
    return {**get_method(method).smoke, **LONGER.get(method, {})}


SMALL_OPTIONS = {m: small_options(m) for m in registered()}
