"""Reference posteriors, built once and cached: the long multi-chain run (normally NUTS) that
``bnnpp compare --reference`` measures every method against (Izmailov et al. 2021, sec. 5).

A reference is expensive (a long multi-chain sampler run) and the same for every comparison of one
model on one dataset, so :func:`reference_posterior` saves it as a posterior file
(:meth:`~bnnpp.Posterior.save`) in a cache folder, named by a hash of everything that decides
its draws: what a checkpoint must agree with to resume (the method, its options, the seed, the
training data's bytes, the model's spec) and the versions of bnnpp, JAX and NumPyro. The next comparison with the same key loads it
(:func:`bnnpp.load`, bit for bit) instead of refitting.

Cache folder: the ``cache`` argument, else ``$BNNPP_CACHE_DIR/references``, else
``~/.cache/bnnpp/references``. A file is written under a temporary name and moved into place,
so an interrupted fit leaves no entry; an entry that cannot be read is refitted (with a
warning) and replaced. A model without ``spec()`` (a user's own NumPyro function) is not
cached: its code cannot be hashed.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from bnnpp import __version__
from bnnpp.inference import fit
from bnnpp.inference.checkpoints import describe_model, fingerprint
from bnnpp.posterior import load

__all__ = ["cache_folder", "reference_key", "reference_posterior"]

KEY_FORMAT = 1


def cache_folder(cache: str | os.PathLike | None = None) -> Path:
    """The folder holding cached references: ``cache`` if given, else
    ``$BNNPP_CACHE_DIR/references``, else ``~/.cache/bnnpp/references``."""
    if cache is not None:
        return Path(cache)
    root = os.environ.get("BNNPP_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "bnnpp") / "references"


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:  # pragma: no cover - an editable checkout without metadata
        return "unknown"


def reference_key(model, dataset, method: str, options: dict, seed: int) -> str | None:
    """The cache key of a reference fit: a SHA-256 (64 hex digits) over what a checkpoint must
    agree with to resume (:func:`bnnpp.inference.checkpoints.fingerprint`: method, seed,
    options, the training data's bytes, the model's spec) and the package versions; ``None``
    for a model without a ``spec()`` that can be written (a user's NumPyro function: its code
    cannot be hashed)."""
    try:
        described = describe_model(model)  # without the data: a model without spec() is not traced
    except Exception:  # a user's spec() that raises (anything): not cached
        return None
    if "spec" not in described:
        return None
    what = fingerprint(method, seed, options, dataset.x_train, dataset.y_train, 0)
    what["model"] = described
    what["format"] = KEY_FORMAT
    what["versions"] = {"bnnpp": __version__, **{p: _version(p) for p in ("jax", "jaxlib", "numpyro")}}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def reference_posterior(
    model, dataset, method: str, options: dict, *, seed: int = 0, cache: str | os.PathLike | bool | None = True, progress: bool = True
):
    """The reference posterior of ``model`` on ``dataset``: loaded from the cache when a fit
    with the same key (:func:`reference_key`) is there, else fitted with
    ``bnnpp.fit(model, dataset, method=method, seed=seed, **options)`` and saved.

    Args:
        cache: ``True`` (default) the folder of :func:`cache_folder`; a path, that folder;
            ``False`` or ``None`` no cache (always fit, write nothing).

    Returns:
        ``(posterior, info)``: ``info`` is ``{"cache_file": str | None, "from_cache": bool,
        "seconds": float}`` (``cache_file`` None when not cached; ``seconds`` the fit's or
        the load's wall time).
    """
    t0 = time.perf_counter()
    key = reference_key(model, dataset, method, options, seed) if cache not in (False, None) else None
    path = None if key is None else cache_folder(None if cache is True else cache) / f"{method}-{key[:32]}.nc"
    if path is not None and path.is_file():
        try:
            post = load(path, model=model)
            return post, {"cache_file": str(path), "from_cache": True, "seconds": time.perf_counter() - t0}
        except Exception as e:  # a damaged entry (e.g. a disk that filled up): fit again and replace it
            warnings.warn(
                f"cached reference {path} could not be read ({type(e).__name__}: {e}); fitting it again", RuntimeWarning, stacklevel=2
            )
    post = fit(model, dataset, method=method, seed=seed, progress=progress, **options)
    if path is not None:
        try:
            post.save(path)  # written to a temporary name and moved into place
        except OSError as e:  # a read-only home, a full disk: the comparison goes on uncached
            warnings.warn(
                f"could not cache the reference at {path} ({e}); set BNNPP_CACHE_DIR to a writable folder", RuntimeWarning, stacklevel=2
            )
            path = None
    return post, {"cache_file": None if path is None else str(path), "from_cache": False, "seconds": time.perf_counter() - t0}
