"""The classic claims of gradient compression, each a named reproduction: the paper, what it claims, the
setting we run it in, the variants we compare and the checks that decide the verdict.

A claim is data, not code: adding one is a new entry in CLAIMS (and, for a new kind of model, a backend in
backends.py). The checks are written before the runs and never moved to fit them; a check the runs do not
meet makes the verdict "partly" or "not reproduced" and says which statement failed.

Settings. Every harness claim trains with the C++ harness (`gradcomp train`): scikit-learn's 8x8 digits
(1437 train / 360 test images), an MLP 64-128-64-10 (or the small CNN) on 8 in-process data-parallel
workers, batch 32 per worker. The digits are small enough that a run takes about a second on one core, so
every claim runs its variants over 5 seeds (3 in the quick mode that CI runs) well inside the budget. The
MNIST-1D claims train PyTorch models on the procedurally generated MNIST-1D (4000 train / 1000 test).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Lower is better for these metrics; higher for the others (accuracy).
LOWER_IS_BETTER = {"loss", "val_loss", "total_mb", "steps_to_target", "mb_to_target", "time_to_target_1gbit",
                   "time_to_target_10gbit", "bound_ratio"}


@dataclass(frozen=True)
class Variant:
    """One line of a comparison: a label, what it changes in the claim's base setting, and the codec family
    and error-feedback policy that decide its colour and line style in every plot."""
    label: str
    settings: dict
    family: str = "none"   # colour: one per codec (see plots.COLOURS)
    ef: str = "none"       # line style: one per error-feedback policy


@dataclass(frozen=True)
class Check:
    """One qualitative statement, decided on the means over seeds.

    better: `a` beats `b` on `metric` by at least `margin` (accuracy: points; lower-is-better metrics: the
            ratio b / a is at least `margin`).
    close:  `a` is no worse than `b` by more than `margin` (accuracy: mean_a >= mean_b - margin points;
            lower-is-better: a / b <= margin).
    range:  the measured value of `a` (a measurement claim's number) lies in [margin[0], margin[1]].
    gate:   the quick mode fails when this check fails (every check whose statement the full run found true;
            a check that states what does not reproduce is reported only).
    observation: a line about a variant outside the paper's setting (momentum added, a later method): shown
            with the others but not part of the verdict, and never gated.
    """
    kind: str
    metric: str
    a: str
    b: str = ""
    margin: float | tuple = 0.0
    gate: bool = True
    observation: bool = False

    def statement(self) -> str:
        unit = " points" if self.metric == "accuracy" else "x"
        if self.kind == "better":
            return f"{self.a} beats {self.b} on {self.metric} by >= {self.margin}{unit}"
        if self.kind == "close":
            if self.metric == "accuracy":
                return f"{self.a}'s accuracy is within {self.margin} points of {self.b}'s (or above)"
            return f"{self.a}'s {self.metric} is at most {self.margin}x {self.b}'s"
        lo, hi = self.margin
        return f"{self.a}: {self.metric} in [{lo}, {hi}]"


@dataclass(frozen=True)
class Claim:
    name: str
    paper: str
    claim: str
    setting: str
    backend: str            # "harness" (C++ gradcomp train), "mnist1d" (PyTorch), "measure" (codec statistics)
    base: dict
    variants: tuple
    checks: tuple
    reference: str = ""     # the variant whose final loss defines the target loss (x target_factor)
    target_factor: float = 1.5
    seeds: int = 5
    quick_seeds: int = 3
    quick_settings: dict = field(default_factory=dict)   # what the quick mode changes (fewer steps)
    in_quick: bool = True   # False: the quick mode (CI) skips it, for time; said in its section
    notes: str = ""

    def variant(self, label: str) -> Variant:
        for v in self.variants:
            if v.label == label:
                return v
        raise KeyError(f"claim {self.name!r} has no variant {label!r}")


# The harness setting most claims share: the digits MLP on 8 workers. eval_every=20 gives 30 evaluations
# in 600 steps; accuracy is the mean of the last 5 (the last sixth of training), never one snapshot.
# Tensors under 1024 elements (the biases and the 64x10 output layer, 5 % of the parameters) travel
# uncompressed, as in the papers' implementations (PowerSGD and DGC leave small and 1-D tensors alone):
# compressing them too made sign + ef and onebit + ef with momentum collapse to chance on every seed.
DIGITS = {"model": "mlp:hidden=128x64", "dataset": "digits", "workers": 8, "batch_size": 32, "steps": 600,
          "eval_every": 20, "optimizer": "sgd:lr=0.1,momentum=0.9", "partition": "iid"}


def _with(base: dict, **changes) -> dict:
    merged = dict(base)
    merged.update(changes)
    return merged


def _v(label, family="none", policy=None, **settings):
    """A variant; its line style follows its error-feedback setting unless `policy` names one."""
    return Variant(label, settings, family, policy or str(settings.get("ef", "none")).split(":")[0])


SGD = "sgd"

# ef-signsgd's comparison, the same on every model it runs on.
SIGN_VARIANTS = (_v(SGD),
                 _v("sign", "sign", codec="sign", ef="none"),
                 _v("sign+ef", "sign", codec="sign", ef="ef"))
SIGN_CHECKS = (Check("better", "accuracy", "sign+ef", "sign", 2.0),
               Check("close", "accuracy", "sign+ef", SGD, 1.0),
               Check("better", "loss", "sign+ef", "sign", 1.5))

CLAIMS = (
    Claim(
        name="ef-signsgd",
        paper="Karimireddy, Rebjock, Stich, Jaggi: Error Feedback Fixes SignSGD and other Gradient "
              "Compression Schemes (ICML 2019)",
        claim="Scaled sign compression without error feedback converges worse and generalizes worse than "
              "SGD; with error feedback it matches SGD.",
        setting="digits MLP, 8 workers, non-iid split (each worker sees few labels), plain SGD lr 0.5 "
                "(no momentum, as in the paper's signSGD comparison), 600 steps; scaled sign = sign(x) "
                "times the block's mean |x| (blocks of 1024).",
        backend="harness",
        base=_with(DIGITS, partition="noniid", optimizer="sgd:lr=0.5,momentum=0"),
        variants=SIGN_VARIANTS,
        checks=SIGN_CHECKS,
        reference=SGD,
    ),
    Claim(
        name="ef-signsgd-cnn",
        paper="Karimireddy et al., EF-SignSGD (ICML 2019), a second model",
        claim="The ef-signsgd ordering holds for a convolutional model too: scaled sign without error "
              "feedback worse than SGD, with error feedback matching it.",
        setting="as ef-signsgd, with the harness's small CNN on the digits (8 channels of 3x3, then a linear "
                "classifier: the 5120-weight linear layer is compressed, the convolution's 80 weights are "
                "under the 1024-element threshold). Not in the quick mode (time).",
        backend="harness",
        base=_with(DIGITS, model="cnn:channels=8,kernel=3", partition="noniid", optimizer="sgd:lr=0.5,momentum=0"),
        variants=SIGN_VARIANTS,
        checks=SIGN_CHECKS,
        reference=SGD, in_quick=False,
    ),
    Claim(
        name="ef-signsgd-gpt",
        paper="Karimireddy et al., EF-SignSGD (ICML 2019), on a transformer trained with AdamW",
        claim="The ef-signsgd ordering on a character-level GPT: sign without error feedback reaches a worse "
              "held-out loss than sign with it, which stays close to the uncompressed run.",
        setting="examples/torch/train_gpt.py as a user runs it: 2 gloo processes under torchrun, DDP with "
                "gradcomp's hook (reduce-scatter + all-gather of scaled-sign wires; parameters under 1024 "
                "elements uncompressed), a 2-layer GPT (64-dim embedding, 4 heads, context 64, 115k "
                "parameters) on Shakespeare, 16 sequences per rank, AdamW lr 3e-3, 300 steps, held-out loss "
                "every 50 steps (the mean of the last 5). The uncompressed run is DDP's own all-reduce. "
                "Adam divides by the gradient's running magnitude, so the sign's lost scale matters less "
                "than under SGD. Not in the quick mode (about 17 s a run).",
        backend="char-gpt",
        base={"world": 2, "hook": "gradcomp", "steps": 300, "batch": 16, "block": 64, "layers": 2, "embd": 64,
              "heads": 4, "lr": 3e-3, "eval_every": 50, "eval_batches": 8},
        variants=(_v("adamw", hook="none"),
                  _v("sign", "sign", codec="sign", ef="none"),
                  _v("sign+ef", "sign", codec="sign", ef="ef")),
        checks=(Check("better", "val_loss", "sign+ef", "sign", 1.02),
                Check("close", "val_loss", "sign+ef", "adamw", 1.05)),
        reference="adamw", seeds=3, in_quick=False,
    ),
    Claim(
        name="dgc",
        paper="Lin, Han, Mao, Wang, Dally: Deep Gradient Compression (ICLR 2018)",
        claim="Top 0.1 % sparsification with momentum correction, local gradient clipping, momentum factor "
              "masking and warm-up keeps the baseline's accuracy; without momentum correction (momentum "
              "applied after the sparse all-reduce) accuracy drops.",
        setting="digits MLP, 8 workers, iid, momentum 0.9 (lr 0.1), 600 steps; top-k at 0.1 % of every "
                "tensor (at least one element); DGC: momentum 0.9 kept locally (policy dgc), clipping at "
                "norm 1, warm-up density schedule over the first 100 steps; the ablation: top-k 0.1 % with "
                "plain error feedback and the optimizer's momentum after the all-reduce.",
        backend="harness",
        base=DIGITS,
        variants=(_v(SGD),
                  _v("topk0.1%+dgc", "topk", codec="topk:ratio=0.001",
                     ef="dgc:momentum=0.9,clip=1,warmup=100", optimizer="sgd:lr=0.1,momentum=0"),
                  _v("topk0.1%+ef, no mc", "topk", codec="topk:ratio=0.001", ef="ef")),
        checks=(Check("close", "accuracy", "topk0.1%+dgc", SGD, 1.5),
                Check("better", "accuracy", "topk0.1%+dgc", "topk0.1%+ef, no mc", 1.0, gate=False),
                Check("better", "total_mb", "topk0.1%+dgc", SGD, 5.0)),
        reference=SGD,
    ),
    Claim(
        name="qsgd",
        paper="Alistarh, Grubic, Li, Tomioka, Vojnovic: QSGD: Communication-Efficient SGD via Gradient "
              "Quantization and Encoding (NeurIPS 2017)",
        claim="4- and 8-bit QSGD reach fp32's accuracy; 2-bit loses accuracy.",
        setting="digits MLP, 8 workers, iid, momentum 0.9 (lr 0.1), 600 steps; QSGD with s = 2^(bits-1)-1 "
                "levels per bucket of 512 (bits = 8, 4, 2), no error feedback (QSGD is unbiased).",
        backend="harness",
        base=DIGITS,
        variants=(_v(SGD),
                  _v("qsgd 8-bit", "qsgd", codec="qsgd:bits=8"),
                  _v("qsgd 4-bit", "qsgd4", codec="qsgd:bits=4"),
                  _v("qsgd 2-bit", "qsgd2", codec="qsgd:bits=2")),
        checks=(Check("close", "accuracy", "qsgd 8-bit", SGD, 1.0),
                Check("close", "accuracy", "qsgd 4-bit", SGD, 1.0),
                Check("better", "accuracy", SGD, "qsgd 2-bit", 1.0)),
        reference=SGD,
    ),
    Claim(
        name="qsgd-variance",
        paper="Alistarh et al., QSGD (NeurIPS 2017), Lemma 3.1",
        claim="QSGD's variance bound: E||Q(v) - v||^2 <= min(d / s^2, sqrt(d) / s) ||v||^2, so for buckets "
              "of d >> s^2 the normalised error grows as sqrt(d) / s with the bucket size d.",
        setting="gradcomp's qsgd codec from Python on 2^20 N(0, 1) values, buckets d = 64 ... 16384, "
                "s = 1, 7 (2-, 4-bit); the exponent is the least-squares slope of log error on log d over "
                "the buckets where d >= 16 s^2, each point the mean over the seeds.",
        backend="measure",
        base={"values": 1 << 20, "buckets": [64, 256, 1024, 4096, 16384], "bits": [2, 4]},
        variants=(_v("qsgd 2-bit", "qsgd2", bits=2),
                  _v("qsgd 4-bit", "qsgd4", bits=4)),
        checks=(Check("range", "exponent", "qsgd 2-bit", margin=(0.4, 0.6)),
                Check("range", "exponent", "qsgd 4-bit", margin=(0.4, 0.6)),
                Check("range", "bound_ratio", "qsgd 2-bit", margin=(0.0, 1.0)),
                Check("range", "bound_ratio", "qsgd 4-bit", margin=(0.0, 1.0))),
        seeds=3, quick_seeds=2, quick_settings={"values": 1 << 18},
    ),
    Claim(
        name="terngrad",
        paper="Wen, Xu, Yan, Wu, Wang, Chen, Li: TernGrad: Ternary Gradients to Reduce Communication in "
              "Distributed Deep Learning (NeurIPS 2017)",
        claim="Ternary gradients (stochastic {-1, 0, 1} times a per-layer max) reach close to the baseline's "
              "accuracy.",
        setting="digits MLP, 8 workers, iid, momentum 0.9 (lr 0.1), 600 steps; terngrad per block of 512, "
                "no error feedback (unbiased), no gradient clipping.",
        backend="harness",
        base=DIGITS,
        variants=(_v(SGD), _v("terngrad", "terngrad", codec="terngrad")),
        checks=(Check("close", "accuracy", "terngrad", SGD, 1.5),
                Check("better", "total_mb", "terngrad", SGD, 5.0)),
        reference=SGD,
    ),
    Claim(
        name="sparsified-memory",
        paper="Stich, Cordonnier, Jaggi: Sparsified SGD with Memory (NeurIPS 2018)",
        claim="Top-k and random-k with memory (error feedback) converge like SGD; random-k without memory "
              "does not.",
        setting="digits MLP, 8 workers, iid, momentum 0.9 (lr 0.1), 600 steps; k = 1 % of every tensor; "
                "random-k indices from the shared seed (every worker picks the same ones), values not "
                "rescaled.",
        backend="harness",
        base=_with(DIGITS, optimizer="sgd:lr=0.1,momentum=0"),
        variants=(_v(SGD),
                  _v("topk1%+ef", "topk", codec="topk:ratio=0.01", ef="ef"),
                  _v("randk1%+ef", "randomk", codec="randomk:ratio=0.01", ef="ef"),
                  _v("randk1%", "randomk", codec="randomk:ratio=0.01", ef="none"),
                  _v("randk1%+ef, momentum 0.9", "randomk+momentum", codec="randomk:ratio=0.01", ef="ef",
                     optimizer="sgd:lr=0.1,momentum=0.9")),
        checks=(Check("close", "accuracy", "topk1%+ef", SGD, 1.5),
                Check("close", "accuracy", "randk1%+ef", SGD, 1.5),
                Check("better", "accuracy", "randk1%+ef", "randk1%", 5.0, gate=False),
                Check("better", "loss", "randk1%+ef", "randk1%", 1.5),
                Check("close", "accuracy", "randk1%+ef, momentum 0.9", SGD, 1.5, gate=False, observation=True)),
        reference=SGD,
    ),
    Claim(
        name="sparsified-memory-mnist1d",
        paper="Stich, Cordonnier, Jaggi: Sparsified SGD with Memory (NeurIPS 2018), on MNIST-1D in PyTorch",
        claim="The sparsified-memory ordering with a PyTorch model and trainer: top-k and random-k with "
              "memory train like SGD; random-k without memory does not.",
        setting="the MNIST-1D CNN of mnist1d-baseline trained by torch DDP over 2 gloo processes (torchrun) "
                "with gradcomp's DDP hook (k = 1 % of every parameter of at least 1024 elements: the two "
                "25x25x3 convolutions and the classifier; the rest exact), 50 samples per rank and step, "
                "plain SGD lr 0.1, 3000 steps, test accuracy every 250 steps (mean of the last 5). The "
                "uncompressed run is DDP's own all-reduce. Not in the quick mode (about 20 s a run).",
        backend="mnist1d-ddp",
        base={"world": 2, "model": "cnn", "hook": "gradcomp", "min_numel": 1024, "optimizer": "sgd:lr=0.1,momentum=0",
              "steps": 3000, "batch_size": 50, "eval_every": 250},
        variants=(_v(SGD, hook="none"),
                  _v("topk1%+ef", "topk", codec="topk:ratio=0.01", ef="ef"),
                  _v("randk1%+ef", "randomk", codec="randomk:ratio=0.01", ef="ef"),
                  _v("randk1%", "randomk", codec="randomk:ratio=0.01", ef="none")),
        checks=(Check("close", "accuracy", "topk1%+ef", SGD, 1.5),
                Check("close", "accuracy", "randk1%+ef", SGD, 1.5),
                Check("better", "accuracy", "randk1%+ef", "randk1%", 5.0),
                Check("better", "loss", "randk1%+ef", "randk1%", 1.5)),
        reference=SGD, seeds=3, in_quick=False,
    ),
    Claim(
        name="powersgd",
        paper="Vogels, Karimireddy, Jaggi: PowerSGD: Practical Low-Rank Gradient Compression for "
              "Distributed Optimization (NeurIPS 2019)",
        claim="Rank-2 PowerSGD with error feedback reaches SGD's accuracy; without error feedback it is "
              "clearly worse; rank 1 is slightly worse than rank 2.",
        setting="digits MLP, 8 workers, iid, momentum 0.9 (lr 0.1), 600 steps; algorithm powersgd "
                "(one power iteration per step, warm-started Q, error feedback on the matrices, 1-D tensors "
                "all-reduced uncompressed), from step 0.",
        backend="harness",
        base=_with(DIGITS, algorithm="powersgd"),
        variants=(_v(SGD, algorithm="default"),
                  _v("rank2+ef", "powersgd", ef="ef", lowrank="rank=2"),
                  _v("rank2", "powersgd", ef="none", lowrank="rank=2"),
                  _v("rank1+ef", "powersgd1", ef="ef", lowrank="rank=1")),
        checks=(Check("close", "accuracy", "rank2+ef", SGD, 1.0),
                Check("better", "accuracy", "rank2+ef", "rank2", 2.0, gate=False),
                Check("close", "accuracy", "rank1+ef", "rank2+ef", 1.5),
                Check("better", "loss", "rank2+ef", "rank1+ef", 1.0, gate=False)),
        reference=SGD,
    ),
    Claim(
        name="onebit-adam",
        paper="Tang, Gan, Awan, Rajbhandari, Li, Lian, Liu, Zhang, He: 1-bit Adam: Communication Efficient "
              "Large-Scale Training with Adam's Convergence Speed (ICML 2021)",
        claim="After a full-precision warm-up that freezes Adam's variance, 1-bit Adam (error-compensated "
              "sign of the momentum) follows Adam's loss with about 5x less total volume; compressing "
              "Adam's gradient naively (sign with error feedback, variance still updated) does worse.",
        setting="MLP 32-128-64-10 on the harness's Gaussian blobs (4096 samples, 32 dimensions, 10 classes: "
                "dense inputs), 8 workers, iid, Adam lr 1e-3, 600 steps; 1-bit Adam warm-up 100 steps (1/6 "
                "of training, fp32), then the scaled sign of the momentum with error feedback; the naive "
                "variant: Adam on sign+ef gradients. Volume: total bytes sent over the run. Not on the "
                "digits: there 1-bit Adam diverges at its first compressed step on every seed (see below).",
        backend="harness",
        base=_with(DIGITS, optimizer="adam:lr=0.001", dataset="blobs:d=32"),
        variants=(_v("adam"),
                  _v("1-bit adam", "onebit-adam", optimizer="onebit-adam:lr=0.001,warmup=100",
                     codec="sign", ef="ef"),
                  _v("adam, sign+ef", "sign", codec="sign", ef="ef")),
        checks=(Check("close", "loss", "1-bit adam", "adam", 1.5),
                Check("close", "accuracy", "1-bit adam", "adam", 1.0),
                Check("better", "total_mb", "1-bit adam", "adam", 3.0),
                Check("better", "loss", "1-bit adam", "adam, sign+ef", 1.2)),
        reference="adam",
        notes="On the digits (`gradcomp train configs/digits-mlp.json --set workers=8 --set "
              "optimizer=onebit-adam:lr=0.001,warmup=100 --set codec=sign --set ef=ef`) 1-bit Adam stops "
              "with a non-finite momentum right after the warm-up: the always-blank border pixels give their "
              "first-layer weights exactly zero gradients, so their frozen variance is 0, and the scaled sign "
              "hands their momentum +-scale: the step lr * scale / eps is 1e5 times too large. A practitioner "
              "needs a larger eps or masked coordinates there; the paper's models have no such inputs.",
    ),
    Claim(
        name="ef21",
        paper="Richtarik, Sokolov, Fatkhullin: EF21: A New, Simpler, Theoretically Better, and Practically "
              "Faster Error Feedback (NeurIPS 2021)",
        claim="EF21 converges at least as well as classic error feedback (EF14) with top-k at the same "
              "budget.",
        setting="digits MLP, 8 workers, iid, plain SGD lr 0.1 (the paper's experiments use no momentum), "
                "600 steps; top-k 1 % of every compressed tensor with ef (EF14: compress g + e) and with ef21 "
                "(compress g - h, h tracks the gradient). Two more variants add momentum 0.9 to both (EF21 "
                "with heavy-ball momentum is outside the paper; EF21-SGDM, policy ef21-sgdm, is its fix).",
        backend="harness",
        base=_with(DIGITS, codec="topk:ratio=0.01", optimizer="sgd:lr=0.1,momentum=0"),
        variants=(_v(SGD, codec="none"),
                  _v("topk1%+ef", "topk", ef="ef"),
                  _v("topk1%+ef21", "topk", ef="ef21"),
                  _v("topk1%+ef, momentum 0.9", "topk+momentum", ef="ef", optimizer="sgd:lr=0.1,momentum=0.9"),
                  _v("topk1%+ef21, momentum 0.9", "topk+momentum", ef="ef21", optimizer="sgd:lr=0.1,momentum=0.9"),
                  _v("topk1%+ef21-sgdm", "topk", ef="ef21-sgdm:eta=0.1")),
        checks=(Check("close", "accuracy", "topk1%+ef21", "topk1%+ef", 1.0, gate=False),
                Check("close", "loss", "topk1%+ef21", "topk1%+ef", 1.2, gate=False),
                Check("close", "accuracy", "topk1%+ef21, momentum 0.9", "topk1%+ef, momentum 0.9", 1.0,
                      gate=False, observation=True),
                Check("close", "accuracy", "topk1%+ef21-sgdm", "topk1%+ef", 1.0, gate=False, observation=True)),
        reference=SGD,
    ),
    Claim(
        name="onebit-sgd",
        paper="Seide, Fu, Droppo, Li, Yu: 1-Bit Stochastic Gradient Descent and its Application to "
              "Data-Parallel Distributed Training of Speech DNNs (Interspeech 2014)",
        claim="1-bit quantization (two reconstruction values per column: the means of the positive and the "
              "negative entries) with error feedback stays close to fp32; without error feedback it does "
              "not.",
        setting="digits MLP, 8 workers, iid, momentum 0.9 (lr 0.1), 600 steps; codec onebit (two means per "
                "block of 1024).",
        backend="harness",
        base=DIGITS,
        variants=(_v(SGD),
                  _v("onebit+ef", "onebit", codec="onebit", ef="ef"),
                  _v("onebit", "onebit", codec="onebit", ef="none")),
        checks=(Check("close", "accuracy", "onebit+ef", SGD, 1.0),
                Check("better", "loss", "onebit+ef", "onebit", 1.2)),
        reference=SGD,
    ),
    Claim(
        name="mnist1d-baseline",
        paper="Greydanus: Scaling Down Deep Learning (MNIST-1D, 2020)",
        claim="On the default MNIST-1D split (4000 train / 1000 test) a small CNN reaches about 94 %, an MLP "
              "about 68 % and logistic regression about 32 %.",
        setting="PyTorch, one process, the paper's models and training: logistic regression, MLP 40-100-100-10, "
                "CNN (three 1-D convolutions of 25 channels, kernel 5, stride 2), Adam lr 1e-2, batch 100, "
                "6000 steps, test accuracy every 250 steps (mean of the last 5).",
        backend="mnist1d",
        base={"steps": 6000, "batch_size": 100, "lr": 1e-2, "eval_every": 250},
        variants=(_v("logistic", "logistic", model="logistic"),
                  _v("mlp", "mlp", model="mlp"),
                  _v("cnn", "cnn", model="cnn")),
        checks=(Check("range", "accuracy", "cnn", margin=(90.0, 98.0)),
                Check("range", "accuracy", "mlp", margin=(60.0, 76.0)),
                Check("range", "accuracy", "logistic", margin=(26.0, 38.0)),
                Check("better", "accuracy", "cnn", "mlp", 15.0)),
        seeds=3, quick_seeds=2, quick_settings={"steps": 3000},
    ),
)


def claim_named(name: str) -> Claim:
    for c in CLAIMS:
        if c.name == name:
            return c
    raise KeyError(f"no reproduction named {name!r} (known: {', '.join(c.name for c in CLAIMS)})")
