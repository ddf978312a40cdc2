"""Why BBB's MNIST test error at the variational means rises with long training (issue 38):
one BBB configuration trained epoch by epoch, with per-epoch records of the test error at the
means, the ELBO terms and, per layer, σ and |μ| (medians, quantiles, and the share of weights
that sit in the scale mixture's narrow component).

The loop is bbb's own ``step`` (``bnnpp.inference.bbb.build``) scanned over one epoch of
minibatches at a time (the runner's scheme: a fresh permutation per epoch, the last partial
batch dropped), so every epoch's state can be summarised on the host. The record is rewritten
after every epoch (a partial run leaves its evidence)::

    python benchmarks/studies/mnist_bbb_drift.py --label base --n-train 10000 --epochs 150
    python benchmarks/studies/mnist_bbb_drift.py --label uniform --kl-weighting uniform ...
    python benchmarks/studies/mnist_bbb_drift.py --plot results/mnist_bbb_drift/base.json ...   # PNG of σ, |μ| per layer

Writes ``--out``/<label>.json (default benchmarks/studies/results/mnist_bbb_drift).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import os
import sys
import time

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: _common and the table scripts
sys.path.insert(0, BENCHMARKS)
HERE = os.path.dirname(os.path.abspath(__file__))


def _cell(text: str):
    if text.startswith("normal:"):
        return ("normal", float(text.split(":", 1)[1]))
    pi, a, b = (float(t) for t in text.split(":", 1)[1].split(","))
    return ("mixture", pi, a, b)


def layer_stats(loc: dict, sigma: dict, spike_sigma: float | None) -> dict:
    """Per site: median and 10/90% quantiles of σ and |μ|, the median SNR |μ|/σ, and (with a
    scale mixture) the share of weights in the narrow component (σ < 10·σ2 and |μ| < 10·σ2)."""
    import numpy as np

    out = {}
    for name in sorted(loc):
        mu, s = np.abs(np.asarray(loc[name], np.float64)).ravel(), np.asarray(sigma[name], np.float64).ravel()
        row = {
            "sigma_q10": float(np.quantile(s, 0.1)),
            "sigma_median": float(np.median(s)),
            "sigma_q90": float(np.quantile(s, 0.9)),
            "absmu_q10": float(np.quantile(mu, 0.1)),
            "absmu_median": float(np.median(mu)),
            "absmu_q90": float(np.quantile(mu, 0.9)),
            "snr_median": float(np.median(mu / s)),
            "snr_below_1": float(np.mean(mu / s < 1.0)),
        }
        if np.ndim(loc[name]) == 2 and not name.startswith("dense_0."):
            # rows are the previous hidden layer's units: a unit whose outgoing weights all have
            # SNR < 1 is switched off (over-pruning, Trippe & Turner 2018)
            snr = (mu / s).reshape(np.shape(loc[name]))
            row["units_off"] = float(np.mean(snr.max(axis=1) < 1.0))
        if spike_sigma is not None:
            row["in_spike"] = float(np.mean((s < 10 * spike_sigma) & (mu < 10 * spike_sigma)))
        out[name] = row
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", required=False)
    ap.add_argument("--plot", nargs="+", metavar="JSON", help="draw σ and |μ| per layer against the epoch for these records; no training")
    ap.add_argument("--png", default=None, help="--plot: output PNG (default: beside the first record)")
    ap.add_argument("--prior", type=_cell, default=_cell("mixture:0.75,0,8"), help="mixture:PI,A,B (π, −log σ1, −log σ2) or normal:SCALE")
    ap.add_argument("--hidden", type=int, nargs="+", default=[400, 400])
    ap.add_argument("--n-train", type=int, default=10000, help="the first N of the 50,000 training images")
    ap.add_argument("--n-test", type=int, default=10000)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--schedule", choices=("constant", "cosine"), default="constant", help="cosine: to 1%% of --lr over the run")
    ap.add_argument("--adam-eps", type=float, default=1e-8)
    ap.add_argument("--rho-lr-factor", type=float, default=1.0, help="Adam's learning rate for ρ (the σ's) is this times --lr")
    ap.add_argument("--kl-weighting", choices=("uniform", "blundell"), default="blundell")
    ap.add_argument("--estimator", choices=("reparam", "local", "flipout"), default="reparam")
    ap.add_argument("--init-scale", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--final", action="store_true", help="after training: the posterior predictive from 100 draws and the SNR / magnitude pruning table"
    )
    ap.add_argument(
        "--sigma-epochs",
        type=int,
        default=0,
        help="after training, this many epochs of Adam on ρ alone at --sigma-lr with the means frozen "
        "(fits the σ's to the ELBO at fixed μ, so that the SNR ranks weights); --final scores before and after",
    )
    ap.add_argument("--sigma-lr", type=float, default=1e-3, help="--sigma-epochs: Adam's constant rate for ρ")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument(
        "--record-every",
        type=int,
        default=1,
        help="per-layer σ/|μ| statistics and the JSON rewrite every K epochs (the errors are scored every epoch)",
    )
    ap.add_argument(
        "--time-limit", type=float, default=None, help="stop training after this many seconds (the record says so) and still run --final"
    )
    ap.add_argument("--out", default=os.path.join(HERE, "results", "mnist_bbb_drift"))
    ap.add_argument("--summarize", nargs="+", metavar="JSON", help="a markdown table of these records (to --md or stdout); no training")
    ap.add_argument("--md", default=None, help="--summarize: write the table here")
    ap.add_argument(
        "--every", type=int, default=None, help="--summarize: add the error at the means every EVERY epochs, one column a record"
    )
    ap.add_argument(
        "--checks",
        action="store_true",
        help="no training: the KL weights of an MNIST epoch (sum, float32) and the KL sum in float32 against float64",
    )
    args = ap.parse_args(argv)
    if args.plot:
        return plot(args.plot, args.png)
    if args.checks:
        return checks(args.out)
    if args.summarize:
        return summarize(args.summarize, args.md, args.every)
    if not args.label:
        ap.error("--label is required for a training run")

    import jax
    import jax.numpy as jnp
    import optax
    from _common import default_data_dir, machine

    import bnnpp
    from bnnpp import priors
    from bnnpp.inference import bbb
    from bnnpp.inference.validation import validation_batches, validation_error
    from bnnpp.inference.variational_layers import softplus

    data = bnnpp.data.load("mnist", args.data_dir or default_data_dir(), normalize="126", flatten=True, validation=10000)
    x, y = data.x_train[: args.n_train], data.y_train[: args.n_train]
    xt, yt = data.x_test[: args.n_test], data.y_test[: args.n_test]
    if args.prior[0] == "normal":
        prior, spike = priors.normal(args.prior[1]), None
    else:
        _, pi, a, b = args.prior
        prior, spike = priors.scale_mixture(pi, math.exp(-a), math.exp(-b)), math.exp(-b)
    model = bnnpp.models.mlp(tuple(args.hidden), activation="relu", num_classes=10, prior=prior)
    n, batch = len(x), args.batch_size
    m = n // batch
    steps = args.epochs * m
    lr = optax.cosine_decay_schedule(args.lr, steps, alpha=0.01) if args.schedule == "cosine" else args.lr
    opt = optax.adam(lr, eps=args.adam_eps)
    opt = bbb.slow_rho(opt, args.rho_lr_factor)  # Adam on ρ at rho_lr_factor × the rate, same schedule
    opts = bbb.BBBOptions(
        epochs=args.epochs,
        batch_size=batch,
        optimizer=opt,
        estimator=args.estimator,
        kl_weighting=args.kl_weighting,
        init_scale=args.init_scale,
        num_samples=1,
    )
    algo = bbb.build(model, x, y, opts)
    root = jax.random.PRNGKey(args.seed)
    k_init, k_steps, k_data = jax.random.split(root, 3)
    xd, yd = jax.device_put(x), jax.device_put(y)

    def make_epoch(algo):
        @jax.jit
        def epoch(state, e):
            perm = jax.random.permutation(jax.random.fold_in(k_data, e), n)

            def body(st, i):
                idx = jax.lax.dynamic_slice(perm, (i * batch,), (batch,))
                st, info = algo.step(jax.random.fold_in(k_steps, st.t), st, (xd[idx], yd[idx]))
                return st, (info.nll, info.kl)

            state, (nll, kl) = jax.lax.scan(body, state, jnp.arange(m))
            return state, nll.mean(), kl.mean()

        return epoch

    epoch = make_epoch(algo)
    score = jax.jit(validation_error(model, len(xt)))
    vargs = validation_batches(xt, yt)
    # the last 10,000 training images (Blundell et al.'s validation split): settings are
    # chosen on this error, never on the test error
    score_val = jax.jit(validation_error(model, len(data.x_val)))
    vargs_val = validation_batches(data.x_val, data.y_val)
    state = algo.init(k_init, (x, y))
    record = {
        "benchmark": "mnist_bbb_drift",
        "label": args.label,
        "command": "python benchmarks/studies/mnist_bbb_drift.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": dt.datetime.now().isoformat(timespec="minutes"),
        "machine": machine(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("plot", "png", "out", "data_dir")},
        "n_train": n,
        "n_test": len(xt),
        "batches_per_epoch": m,
        "curve": [],
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{args.label}.json")
    t0 = time.perf_counter()
    for e in range(args.epochs):
        state, nll, kl = epoch(state, e)
        loc = state.params["loc"]
        err, verr = float(score(loc, *vargs)), float(score_val(loc, *vargs_val))
        row = {
            "epoch": e + 1,
            "test_error_at_means": err,
            "val_error_at_means": verr,
            "nll": float(nll),
            "kl": float(kl),
            "seconds": time.perf_counter() - t0,
        }
        last = e + 1 == args.epochs or (args.time_limit is not None and row["seconds"] > args.time_limit)
        if (e + 1) % args.record_every == 0 or e == 0 or last:
            sigma = {k: softplus(v) for k, v in state.params["rho"].items()}
            row["layers"] = layer_stats(loc, sigma, spike)
        record["curve"].append(row)
        if "layers" in row:
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(record, f, indent=1)
            os.replace(tmp, path)
        if (e + 1) % 5 == 0 or e == 0:
            lay = row.get("layers", {})
            spk = " units_off " + ",".join(f"{v['units_off']:.2f}" for k, v in lay.items() if "units_off" in v)
            spk += "" if spike is None else " in_spike " + ",".join(f"{v['in_spike']:.2f}" for k, v in lay.items() if k.endswith(".w"))
            print(
                f"{args.label} epoch {e + 1}: err {err:.2%} val {verr:.2%} nll {float(nll):.1f} kl {float(kl):.4g}{spk} "
                f"({row['seconds']:.0f} s)",
                flush=True,
            )
        if last and e + 1 < args.epochs:
            record["stopped_early"] = f"--time-limit {args.time_limit:g} s reached after epoch {e + 1} of {args.epochs}"
            print(record["stopped_early"], flush=True)
            break
    if args.sigma_epochs:
        # σ phase: the means frozen (their updates zeroed), Adam on ρ alone. With ρ slowed during
        # training the σ's stay near σ₀ and the SNR ranks weights by |μ| only; at fixed μ the ELBO
        # sends the σ of a weight the data do not need towards the prior's width and keeps the
        # others small (Blundell et al. 2015, sec. 5.1 prune by |μ|/σ), while the error at the
        # means cannot change.
        if args.final:
            record["final_before_sigma_phase"] = final_evaluation(model, algo, state, x, y, xt, yt, jax.random.fold_in(root, 7), record)
        opt_sigma = optax.multi_transform(
            {"rho": optax.adam(args.sigma_lr, eps=args.adam_eps), "rest": optax.set_to_zero()},
            lambda params: {k: "rho" if k == "rho" else "rest" for k in params},
        )
        algo_s = bbb.build(model, x, y, dataclasses.replace(opts, optimizer=opt_sigma, epochs=args.sigma_epochs))
        state = state._replace(opt_state=opt_sigma.init(state.params))
        epoch_s, done, t1 = make_epoch(algo_s), len(record["curve"]), time.perf_counter()
        for e in range(done, done + args.sigma_epochs):
            state, nll, kl = epoch_s(state, e)
            loc = state.params["loc"]
            sigma = {k: softplus(v) for k, v in state.params["rho"].items()}
            row = {
                "epoch": e + 1,
                "phase": "sigma",
                "test_error_at_means": float(score(loc, *vargs)),
                "val_error_at_means": float(score_val(loc, *vargs_val)),
                "nll": float(nll),
                "kl": float(kl),
                "seconds": time.perf_counter() - t1,
                "layers": layer_stats(loc, sigma, spike),
            }
            record["curve"].append(row)
            print(
                f"{args.label} sigma epoch {e + 1}: nll {float(nll):.1f} kl {float(kl):.4g} median σ "
                + ",".join(f"{v['sigma_median']:.3g}" for k, v in row["layers"].items() if k.endswith(".w")),
                flush=True,
            )
    if args.final:
        record["final"] = final_evaluation(model, algo, state, x, y, xt, yt, jax.random.fold_in(root, 7), record)
        with open(path + ".tmp", "w") as f:
            json.dump(record, f, indent=1)
        os.replace(path + ".tmp", path)
        print(json.dumps({k: v for k, v in record["final"].items() if k != "pruning"}), flush=True)
    return record


def summarize(paths: list[str], md: str | None, every: int | None = None) -> dict:
    """One row per record: epochs run, the lowest test error at the means (and its epoch), the
    error at the last epoch and the mean of its last 10 epochs, NLL and KL at the best and the
    last epoch, median σ and median |μ| per weight layer at the first and last epoch, and the
    share of hidden units switched off (all outgoing SNR < 1) at the last epoch."""
    lines = [
        "| record | epochs | best error at the means (epoch) | last | mean of last 10 | NLL best → last | KL best → last "
        "| median σ per layer, first → last | median abs(μ) per layer, first → last | units off (hidden 1 / 2), last |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in paths:
        r = json.load(open(p))
        c = r["curve"]
        best = min(c, key=lambda x: x["test_error_at_means"])
        last = c[-1]
        names = sorted(n for n in last["layers"] if n.endswith(".w"))
        lay = lambda row, k: "/".join(f"{row['layers'][n][k]:.3g}" for n in names)  # noqa: E731
        off = "/".join(f"{last['layers'][n]['units_off']:.2f}" for n in names if "units_off" in last["layers"][n])
        tail = sum(x["test_error_at_means"] for x in c[-10:]) / len(c[-10:])
        lines.append(
            f"| {r['label']} | {len(c)} | {best['test_error_at_means']:.2%} ({best['epoch']}) | {last['test_error_at_means']:.2%} | "
            f"{tail:.2%} | {best['nll']:.0f} → {last['nll']:.0f} | {best['kl']:.4g} → {last['kl']:.4g} | "
            f"{lay(c[0], 'sigma_median')} → {lay(last, 'sigma_median')} | {lay(c[0], 'absmu_median')} → {lay(last, 'absmu_median')} | {off} |"
        )
    lines += [
        "",
        "| record | error at the means, epoch 100 | highest after epoch 100 (rise) | 10-epoch mean: epochs 91–100 → highest after (rise) | last | epoch chosen on validation: val / test error "
        "| predictive, 100 draws (NLL) | pruned by SNR: 50 / 75 / 95 / 98% |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in paths:
        r = json.load(open(p))
        c = r["curve"]
        e100 = c[99]["test_error_at_means"] if len(c) >= 100 else None
        after = max(x["test_error_at_means"] for x in c[99:]) if len(c) >= 100 else None
        rise = "" if e100 is None else f"{after:.2%} ({100 * (after - e100):+.2f} points)"
        errs = [x["test_error_at_means"] for x in c]
        means = [sum(errs[i - 9 : i + 1]) / 10 for i in range(9, len(errs))]  # means[j]: epochs j+1 … j+10
        smooth = "" if len(c) < 110 else f"{means[90]:.2%} → {max(means[91:]):.2%} ({100 * (max(means[91:]) - means[90]):+.2f} points)"
        val = [x for x in c if "val_error_at_means" in x]
        chosen = min(val, key=lambda x: x["val_error_at_means"]) if val else None
        pick = "" if chosen is None else f"{chosen['epoch']}: {chosen['val_error_at_means']:.2%} / {chosen['test_error_at_means']:.2%}"
        fin = r.get("final", {})
        pred = f"{fin['test_error_100_draws']:.2%} ({fin['test_nll_100_draws']:.4f})" if fin else ""
        prune = ""
        if fin.get("pruning"):
            rows = {round(float(x["fraction"]), 2): x for x in fin["pruning"] if x["rule"] == "snr"}
            prune = " / ".join(f"{rows[f]['test_error']:.2%}" if f in rows else "–" for f in (0.5, 0.75, 0.95, 0.98))
        lines.append(
            f"| {r['label']} | {'' if e100 is None else f'{e100:.2%}'} | {rise} | {smooth} | {c[-1]['test_error_at_means']:.2%} | {pick} | {pred} | {prune} |"
        )
    if every:
        recs = [json.load(open(p)) for p in paths]
        longest = max(len(r["curve"]) for r in recs)
        lines += ["", "| epoch | " + " | ".join(r["label"] for r in recs) + " |", "|---|" + "---|" * len(recs)]
        for e in sorted({*range(every, longest + 1, every), 1, longest}):
            cells = [f"{r['curve'][e - 1]['test_error_at_means']:.2%}" if e <= len(r["curve"]) else "" for r in recs]
            lines.append(f"| {e} | " + " | ".join(cells) + " |")
    lines += ["", "Commands:", ""] + [f"- `{json.load(open(p))['command']}`" for p in paths]
    text = "\n".join(lines) + "\n"
    if md:
        with open(md, "w") as f:
            f.write(text)
    print(text)
    return {"markdown": text}


def checks(out: str) -> dict:
    """Two of issue 38's hypotheses checked by arithmetic on the main run's sizes (50,000
    images, batches of 128, M = 390; 2×400, 478,410 weights and biases):

    * the per-minibatch KL weights of bbb (``M · π_i`` as float32, the factor the step uses)
      sum to M per epoch, i.e. exactly one KL per epoch, for both schemes (Blundell et al.
      2015, eq. 8–9), against the data term's N/B per minibatch;
    * the scale mixture's Monte-Carlo KL summed in float32 (as the step does) against float64,
      at a draw from a state like the trained one (μ ~ N(0, 0.05²), σ = 0.05).
    """
    import jax.numpy as jnp
    import numpy as np

    from bnnpp.inference.bbb import kl_weights

    n, b = 50000, 128
    m = n // b
    res = {"n": n, "batch": b, "num_batches": m, "data_scale_n_over_b": n / b}
    for scheme in ("uniform", "blundell"):
        w32 = np.asarray(jnp.asarray(m * kl_weights(m, scheme), jnp.float32), np.float64)
        res[f"kl_factor_sum_per_epoch_{scheme}"] = float(w32.sum())
        res[f"kl_factor_first_minibatch_{scheme}"] = float(w32[0])
        res[f"kl_factor_share_first_10_minibatches_{scheme}"] = float(w32[:10].sum() / w32.sum())
    rng = np.random.default_rng(0)
    size = 784 * 400 + 400 + 400 * 400 + 400 + 400 * 10 + 10
    mu, sigma = rng.normal(0, 0.05, size), np.full(size, 0.05)
    w = mu + sigma * rng.standard_normal(size)
    pi, s1, s2 = 0.75, 1.0, math.exp(-8)

    def log_mix(v, xp):
        a = xp.log(pi) - 0.5 * xp.log(2 * xp.pi) - xp.log(s1) - 0.5 * (v / s1) ** 2
        c = xp.log(1 - pi) - 0.5 * xp.log(2 * xp.pi) - xp.log(s2) - 0.5 * (v / s2) ** 2
        return xp.logaddexp(a, c)

    terms64 = -(0.5 * np.log(2 * np.pi * np.e) + np.log(sigma)) - log_mix(w, np)
    terms32 = -(0.5 * jnp.log(2 * jnp.pi * jnp.e) + jnp.log(jnp.asarray(sigma, jnp.float32))) - log_mix(jnp.asarray(w, jnp.float32), jnp)
    kl64, kl32 = float(terms64.sum()), float(jnp.sum(terms32))
    res.update({"weights": size, "kl_float64": kl64, "kl_float32": kl32, "kl_relative_difference": abs(kl32 - kl64) / abs(kl64)})
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "checks.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))
    return res


def final_evaluation(model, algo, state, x, y, xt, yt, key, record) -> dict:
    """The trained state as a :class:`bnnpp.Posterior` (100 draws, as ``bnnpp.fit`` keeps):
    test error and NLL of the predictive from all 100 draws and from every tenth, and the
    pruning table (10 draws per prediction)."""
    import jax
    import numpy as np

    from bnnpp import evaluation, metrics, pruning
    from bnnpp.introspection import latent_sites
    from bnnpp.posterior import FitStats, Posterior

    draws = jax.device_get(algo.sample(key, state, 100))
    samples = {k: np.asarray(v)[None] for k, v in draws.items()}
    approx = jax.tree_util.tree_map(np.asarray, jax.device_get(algo.hooks.approximation(state)))
    stats = FitStats(method="bbb", seed=record["settings"]["seed"], steps_run=int(state.t))
    post = Posterior(samples, stats, model, x, y, latent_sites(model, x, y), approx)
    probs = evaluation.predict_probs(post, xt)
    p10, pall = probs[np.arange(10) * len(probs) // 10].mean(0), probs.mean(0)
    return {
        "test_error_100_draws": 1.0 - metrics.accuracy(pall, yt),
        "test_nll_100_draws": metrics.nll(pall, yt),
        "test_error_10_draws": 1.0 - metrics.accuracy(p10, yt),
        "test_nll_10_draws": metrics.nll(p10, yt),
        "pruning": pruning.pruning_table(post, xt, yt, fractions=(0, 0.5, 0.75, 0.95, 0.98), num_samples=10),
    }


def plot(paths: list[str], png: str | None) -> dict:
    """σ (median) and |μ| (median) per weight layer, and the test error at the means, against
    the epoch; one line style per record."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [json.load(open(p)) for p in paths]
    names = [k for k in recs[0]["curve"][0]["layers"] if k.endswith(".w")]
    fig, axes = plt.subplots(1, 3 + ("in_spike" in recs[0]["curve"][0]["layers"][names[0]]), figsize=(18, 4.2))
    styles = ["-", "--", ":", "-."]
    for r, ls in zip(recs, styles * 4, strict=False):
        ep = [c["epoch"] for c in r["curve"]]
        axes[0].plot(ep, [100 * c["test_error_at_means"] for c in r["curve"]], ls, label=r["label"])
        rows = [c for c in r["curve"] if "layers" in c]  # --record-every K keeps the layer statistics every K epochs
        lep = [c["epoch"] for c in rows]
        for j, nm in enumerate(names):
            col = f"C{j}"
            axes[1].plot(lep, [c["layers"][nm]["sigma_median"] for c in rows], ls, color=col, label=f"{r['label']} {nm}")
            axes[2].plot(lep, [c["layers"][nm]["absmu_median"] for c in rows], ls, color=col, label=f"{r['label']} {nm}")
            if len(axes) > 3 and "in_spike" in rows[0]["layers"][nm]:
                axes[3].plot(lep, [c["layers"][nm]["in_spike"] for c in rows], ls, color=col, label=f"{r['label']} {nm}")
    axes[0].set(xlabel="epoch", ylabel="test error at the means (%)")
    axes[1].set(xlabel="epoch", ylabel="median σ", yscale="log")
    axes[2].set(xlabel="epoch", ylabel="median |μ|", yscale="log")
    if len(axes) > 3:
        axes[3].set(xlabel="epoch", ylabel="share in the narrow component")
    for a in axes:
        a.legend(fontsize=6)
    fig.tight_layout()
    out = png or os.path.splitext(paths[0])[0] + ".png"
    fig.savefig(out, dpi=90)
    print(out)
    return {"png": out}


if __name__ == "__main__":
    main(sys.argv[1:])
