"""gradcomp's DDP communication hook.

    import gradcomp.torch as gt
    state = gt.DDPState(ddp, codec="int8", error_feedback="ef")
    ddp.register_comm_hook(state, gt.ddp_hook)

Every bucket DDP hands over is reduced to the mean over ranks (the same scaling as DDP without a hook):
parameters with at least `min_numel` elements are compressed with the codec and the algorithm, smaller
ones (biases, norms) go as exact fp32, and the steps before `start_iter` are exact all-reduces. Error
feedback residuals are kept per parameter (see _layout.py), so state_dict() / load_state_dict() resume a
run bitwise identically on a new DDP instance, whatever its buckets. A non-finite gradient is a
NonFiniteError naming the parameter on every rank, with the residuals unchanged (or, with
nonfinite="skip", that rank sends zeros for the bucket).
"""


import datetime
import time
import warnings
from typing import Any, Optional, Sequence

import torch
import torch.distributed as dist

from .. import _C
from .._codec import Codec
from .. import cost_model
from ..diagnose import codec_bound, diagnose
from ._agreement import check_ranks_agree
from ._exchange import (STATUS_OK, Exchange, ExchangeStats, Part, Status, check_reduced_dtypes, raise_status,
                        warn_if_not_contractive, widened)
from ._layout import Layout, Piece, ResidualStore
from ._policy import (ERROR_FEEDBACK, check_policy_fits, dgc_masking, dgc_momentum,  # noqa: F401 (re-exported)
                      ef21_add_shared_estimate, ef21_estimates_after, ef21_sgdm_momentum, parse_error_feedback)
from ._policy import Policy as _Policy  # noqa: F401 -- DDPStates pickled before _policy.py name it here
from ._backwards import Backwards
from ._failed_step import FailedStep
from ._worker import FifoWorker

ALGORITHMS = ("auto", "reduce-scatter", "allgather", "randomk")
_FORMAT = "gradcomp.ddp_state/1"


def _choose_algorithm(codec: Codec, algorithm: str) -> str:
    t = codec.traits
    if algorithm == "auto":
        if t["shared_indices"]:
            return "randomk"
        return "reduce-scatter" if t["reencodable"] and not t["sparse"] else "allgather"
    if algorithm == "reduce-scatter" and not (t["reencodable"] and not t["sparse"]):
        raise _C.InvalidArgument(f"DDPState: algorithm 'reduce-scatter' re-encodes partial sums, which codec "
                                 f"'{codec.canonical_spec}' cannot carry; use 'allgather' (or 'auto')")
    if algorithm == "randomk" and not t["shared_indices"]:
        raise _C.InvalidArgument(f"DDPState: algorithm 'randomk' sums values on shared coordinates; codec "
                                 f"'{codec.canonical_spec}' does not share them (use codec 'randomk:...')")
    return algorithm


def _check_ddp_leaves_the_group_to_the_hook(ddp: torch.nn.parallel.DistributedDataParallel,
                                            group: Optional[dist.ProcessGroup]) -> None:
    """The hook's worker thread may still be exchanging buckets when backward's own thread has handed
    over the last one. DDP issues collectives of its own on its group from backward in two cases:
    find_unused_parameters without static_graph (it all-reduces its map of used parameters once every
    bucket is handed over) and delay_all_reduce_named_params (an all-reduce from a parameter's hook). On
    one communicator the two threads' orders then differ between ranks, and the collectives pair wrongly
    (gloo aborts the process). Then the hook needs a group of its own. (static_graph's first step
    all-reduces the map before it hands over any bucket, with the worker idle: no hazard.)"""
    ours = group if group is not None else dist.distributed_c10d._get_default_group()
    dynamic_unused = ddp.find_unused_parameters and not getattr(ddp, "static_graph", False)
    delayed = bool(getattr(ddp, "_delay_all_reduce_params", ()))
    if ours is ddp.process_group and (dynamic_unused or delayed):
        what = "find_unused_parameters=True" if dynamic_unused else "delay_all_reduce_named_params"
        raise _C.InvalidArgument(
            f"DDPState: this DDP model has {what}, so DDP issues collectives of its own on its process group "
            f"from backward while gradcomp's hook may still be exchanging buckets on another thread; give the "
            f"hook a process group of its own: DDPState(ddp, ..., process_group=dist.new_group(ranks)) (every "
            f"rank creating it in the same order), or use gradcomp.torch.PowerSGDState, whose hook runs on "
            f"backward's thread")


class DDPState:
    """The hook's configuration and state. Arguments:

    module          the DDP model (or the module it wraps): parameter names key the residuals
    codec           a gradcomp codec spec ("fp16", "int8:block=256", "topk:ratio=0.01", "randomk:...")
    error_feedback  "ef" (residual at the source; the owners' re-encode error is fed back too), "none", or
                    "ef:scale=auto": ef that sends C(c / (1 + omega)) for a codec whose variance bound omega
                    is >= 1 on a parameter (qsgd at 4 bits, terngrad: not contractive, so plain ef's
                    residual can grow; plain ef warns once), plain ef for every other codec; cpu buffers.
                    "ef21" (Richtarik et al. 2021): each rank sends C(g - h) and moves its estimate h by
                    what it sent, h += D(C(g - h)); the hook returns H + the reduced mean and keeps that as
                    the shared estimate H (the same bytes on every rank, so the same H); the owners'
                    re-encode error is fed back as with ef. Not with nonfinite="skip"; like ef, it warns once
                    for a codec that is not contractive.
                    "ef21-sgdm:eta=0.1" (Fatkhullin et al. 2023): ef21 on the momentum estimate
                    v <- (1 - eta) v + eta g, v kept per parameter (H then estimates the mean of v).
                    "dgc:momentum=0.9,clip=0,warmup=0" (Lin et al. 2018, Deep Gradient Compression):
                    momentum correction u <- m u + clip(g) (clip: each parameter's gradient scaled to at
                    most this L2 norm; 0: none), the accumulated c = v + u sent, v <- c - D(wire), and u
                    zeroed where its coordinate was sent (momentum factor masking); for `warmup` steps a
                    sparse codec sends 25 %, 6.25 %, 1.56 %, 0.39 % of each parameter over four equal
                    stages from start_iter on (never fewer than its own k). The momentum is in what is
                    sent: train with plain SGD (no optimizer momentum), as the paper does; the exact steps
                    (before start_iter, or a world of one rank) carry none, and say so once. The C++
                    DgcFeedback's step; not with nonfinite="skip" nor with a rotated codec (rotate=).
    algorithm       "auto" (reduce-scatter for dense codecs, allgather for sparse, randomk for random-k),
                    or one of them by name
    process_group   the group to reduce over (default: the default group); a group of its own, not the
                    DDP model's, when DDP has find_unused_parameters=True (without static_graph) or
                    delay_all_reduce_named_params (DDP then all-reduces on its group from backward while
                    this hook's worker exchanges: refused)
    start_iter      iterations before this one are exact fp32 all-reduces
    min_numel       parameters with fewer elements go uncompressed (exact fp32)
    seed            the stochastic codecs' seed (shared by all ranks)
    nonfinite       "error" (a NonFiniteError naming the parameter) or "skip" (send zeros, warn)
    timeout         the deadline of every wait on a collective
    threads         CPU threads per codec call
    model_links     link specs ("inter=1gbit/50us") to model each step on: last_stats["model_step_ms"]
                    holds this step's modelled time on each (gradcomp.cost_model: the measured compute
                    and codec times, the cost model's wire time for these buckets, hidden behind the
                    backward that follows the first bucket); the first one is also the link a codec-bound
                    diagnosis compares codecs on (default: the rate this step's traffic moved at)
    """

    def __init__(self, module: Optional[torch.nn.Module], *, codec: str = "int8", error_feedback: str = "ef",
                 algorithm: str = "auto", process_group: Optional[dist.ProcessGroup] = None, start_iter: int = 0,
                 min_numel: int = 1024, seed: int = 0, nonfinite: str = "error",
                 timeout: datetime.timedelta = datetime.timedelta(minutes=5), threads: int = 1,
                 model_links: Sequence[str] = ()):
        self._parsed = parse_error_feedback(error_feedback)
        error_feedback, self._policy = self._parsed.spec, self._parsed.name
        check_policy_fits(self._parsed, Codec(codec).canonical_spec, nonfinite, "DDPState")
        if algorithm not in ALGORITHMS:
            raise _C.InvalidArgument(f"DDPState: algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
        if nonfinite not in ("error", "skip"):
            raise _C.InvalidArgument(f"DDPState: nonfinite must be 'error' or 'skip', got {nonfinite!r}")
        for name, value, lo in (("start_iter", start_iter, 0), ("min_numel", min_numel, 0), ("seed", seed, 0),
                                ("threads", threads, 1)):
            if not isinstance(value, int) or value < lo or value >= 2**63:
                raise _C.InvalidArgument(f"DDPState: {name} must be an integer >= {lo}, got {value!r}")
        if timeout.total_seconds() <= 0:
            raise _C.InvalidArgument(f"DDPState: timeout must be positive, got {timeout}")
        self.codec = Codec(codec)
        self.error_feedback = error_feedback
        self.algorithm = _choose_algorithm(self.codec, algorithm)
        self.process_group = process_group
        self.start_iter = start_iter
        self.min_numel = min_numel
        self.seed = seed
        self.nonfinite = nonfinite
        self.timeout = timeout
        self.threads = threads
        self.model_links = tuple(model_links)
        for link in self.model_links:   # a bad spec fails here, naming itself, not at the first step
            _C.predict_allreduce("none", 1, 1, link)
        self.iter = 0  # DDP iterations completed (advanced when the last bucket is submitted)
        self.residuals = ResidualStore()         # the senders' error (ef)
        self.server_residuals = ResidualStore()  # the owners' re-encode error (ef, reduce-scatter)
        self.shared = ResidualStore()            # ef21's shared estimate H (the same on every rank)
        self.momentum = ResidualStore()          # ef21-sgdm's v; dgc's momentum u
        self.last_stats: dict[str, Any] = {}
        self._names: dict[int, str] = {}
        self._layouts: dict[tuple, tuple] = {}
        self._checked = False
        self._failed_step = FailedStep()
        self._backwards = Backwards()
        self._warned_not_contractive = False
        self._warned_exact_momentum = False
        self._pending_stats: dict[str, Any] = {}
        # For the diagnosis: when the last bucket of a step was handed over (backward has ended: what
        # follows until it completes is exposed communication) and when the previous step completed.
        self._last_bucket_submitted: Optional[float] = None
        self._previous_step_done: Optional[float] = None
        self._worker: Optional[FifoWorker] = None
        self._exchange: Optional[Exchange] = None
        if module is not None:
            self.attach(module)

    # --- binding -------------------------------------------------------------------------------------
    def attach(self, module: torch.nn.Module, process_group: Optional[dist.ProcessGroup] = None) -> "DDPState":
        """Binds the model whose parameters the buckets hold (after torch.load, on a new DDP instance)."""
        inner = getattr(module, "module", module) if isinstance(module, torch.nn.parallel.DistributedDataParallel) \
            else module
        check_reduced_dtypes(((n, p.dtype) for n, p in inner.named_parameters() if p.requires_grad), "DDPState")
        group = process_group if process_group is not None else self.process_group
        if isinstance(module, torch.nn.parallel.DistributedDataParallel):
            _check_ddp_leaves_the_group_to_the_hook(module, group)
        self._names = {p.data_ptr(): n for n, p in inner.named_parameters()}
        self._layouts = {}
        self.process_group = group
        return self

    def config(self) -> dict:
        return {"codec": self.codec.canonical_spec, "error_feedback": self.error_feedback,
                "algorithm": self.algorithm, "start_iter": self.start_iter, "min_numel": self.min_numel,
                "seed": self.seed, "nonfinite": self.nonfinite,
                "world_size": dist.get_world_size(self.process_group)}

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def wait(self) -> None:
        """Returns when every bucket handed to the hook has been reduced."""
        if self._worker is not None:
            self._worker.drain()

    # --- checkpoints ---------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Configuration, iteration and residuals by parameter name: torch.save it with the model."""
        self.wait()
        return {"format": _FORMAT, "config": self.config(), "iter": self.iter + self._backwards.uncounted,
                "residuals": self.residuals.named(), "server_residuals": self.server_residuals.named(),
                "shared": self.shared.named(), "momentum": self.momentum.named()}

    def load_state_dict(self, sd: dict) -> None:
        if sd.get("format") != _FORMAT:
            raise _C.InvalidArgument(f"DDPState.load_state_dict: not a gradcomp DDP state (format "
                                     f"{sd.get('format')!r}, expected {_FORMAT!r})")
        mine, theirs = self.config(), sd["config"]
        diffs = [f"{k}: saved {theirs.get(k)!r}, now {mine[k]!r}" for k in mine
                 if k != "world_size" and theirs.get(k) != mine[k]]
        if diffs:
            raise _C.InvalidArgument("DDPState.load_state_dict: the checkpoint was made with another "
                                     "configuration (" + "; ".join(diffs) + ")")
        self.wait()
        self.iter = int(sd["iter"])
        self._checked = False  # the ranks must agree on the iteration they resume at
        self._failed_step, self._backwards = FailedStep(), Backwards()  # a new run from here
        self.residuals.load_named(sd["residuals"])
        self.server_residuals.load_named(sd["server_residuals"])
        self.shared.load_named(sd.get("shared", {}))
        self.momentum.load_named(sd.get("momentum", {}))

    def __getstate__(self) -> dict:
        # The process group, the model and the worker thread do not travel (as torch's PowerSGDState):
        # after torch.load, attach() the new DDP model; the default group is used unless one is given.
        s = {k: v for k, v in self.__dict__.items()
             if k not in ("process_group", "_names", "_worker", "_exchange", "_layouts", "_failed_step", "_backwards")}
        s["_state_dict"] = self.state_dict()
        for k in ("residuals", "server_residuals", "shared", "momentum"):
            s.pop(k)
        return s

    def __setstate__(self, s: dict) -> None:
        sd = s.pop("_state_dict")
        s.setdefault("_warned_not_contractive", False)  # pickled before the warnings existed
        s.setdefault("_warned_exact_momentum", False)
        if "_parsed" not in s:  # pickled before dgc (or before ef21-sgdm)
            s["_parsed"] = parse_error_feedback(s["error_feedback"])
            s["_policy"] = s["_parsed"].name
            s.pop("_eta", None)
        self.__dict__.update(s)
        self.process_group, self._names, self._worker, self._exchange = None, {}, None, None
        self._layouts, self._failed_step, self._backwards = {}, FailedStep(), Backwards()
        self.iter = int(sd["iter"])  # a backward that ended without its last bucket counted
        self.residuals, self.server_residuals = ResidualStore(), ResidualStore()
        self.shared, self.momentum = ResidualStore(), ResidualStore()
        self._checked = False
        self.residuals.load_named(sd["residuals"])
        self.server_residuals.load_named(sd["server_residuals"])
        self.shared.load_named(sd.get("shared", {}))
        self.momentum.load_named(sd.get("momentum", {}))

    # --- statistics ----------------------------------------------------------------------------------
    def residual_norm(self) -> float:
        """L2 norm of all error-feedback residuals (senders' and owners'; ef21: the estimates h)."""
        return (self.residuals.squared_norm() + self.server_residuals.squared_norm()) ** 0.5

    # --- the hook ------------------------------------------------------------------------------------
    def _submit(self, bucket: dist.GradBucket) -> torch.futures.Future:
        if not self._names:
            raise _C.InvalidArgument("gradcomp ddp_hook: the state has no model; build it with "
                                     "DDPState(ddp, ...) or call state.attach(ddp) (after torch.load)")
        if self._worker is None:
            self._exchange = Exchange(self.codec, self.process_group, self.timeout, self.seed,
                                      self.nonfinite == "skip", self.threads, self.error_feedback == "ef:scale=auto")
            self._worker = FifoWorker(f"gradcomp-ddp-{id(self):x}")
            self._exchange.resettable = self._policy not in ("ef21", "ef21-sgdm")  # H holds every rank's h
        buffer = bucket.buffer()
        grads = bucket.gradients()
        params = bucket.parameters()
        last = bucket.is_last()
        step, self.iter, begins = self._backwards.step(self.iter, bucket.index(), last)
        if last:
            self._last_bucket_submitted = time.perf_counter()
        fut = self._worker.submit(lambda: self._reduce(buffer, grads, params, step, begins, last))
        # DDP reads the Future from C++, which sees a Python set_exception as a value, not an error; a
        # callback that re-raises makes it a real error, which backward() raises with gradcomp's message.
        return fut.then(_value_or_raise)

    def _layout(self, buffer: torch.Tensor, grads: list[torch.Tensor], params: list[torch.Tensor]):
        """The bucket's parameters where they sit in its buffer (the buffer itself is reduced in place),
        and its parts; cached per bucket (the same tensors every step until DDP rebuilds its buckets)."""
        base = buffer.data_ptr()
        key = (base, buffer.numel(), tuple(p.data_ptr() for p in params), tuple(g.data_ptr() for g in grads))
        cached = self._layouts.get(key)
        if cached is None:
            if len(self._layouts) > 256:
                self._layouts.clear()
            layout = self._new_layout(buffer, grads, params)
            cached = self._layouts[key] = (layout, [Part(*p) for p in layout.parts(self.min_numel)])
            if self._policy in ("ef", "ef21", "ef21-sgdm") and not self._warned_not_contractive:
                # a layout of exact parameters only (DDP's small first bucket) says nothing yet
                segments = dist.get_world_size(self.process_group) if self.algorithm == "reduce-scatter" else 1
                self._warned_not_contractive = warn_if_not_contractive(self.codec, cached[1], "gradcomp ddp_hook",
                                                                       self._policy, segments)
        return cached

    def _new_layout(self, buffer: torch.Tensor, grads: list[torch.Tensor], params: list[torch.Tensor]) -> Layout:
        base = buffer.data_ptr()
        pieces = []
        for g, p in zip(grads, params):
            name = self._names.get(p.data_ptr())
            if name is None:
                raise _C.InvalidArgument("gradcomp ddp_hook: a bucket holds a parameter that is not in the "
                                         "attached model (attach the DDP model the hook is registered on)")
            pieces.append(Piece(name, 0, (g.data_ptr() - base) // buffer.element_size(), g.numel(), g.numel()))
        return Layout(pieces, buffer.numel())

    def _reduce(self, buffer: torch.Tensor, grads, params, step: int, begins: bool, last: bool) -> torch.Tensor:
        if begins:
            self._failed_step.begin_backward()
        self._failed_step.raise_if_failed(step, "gradcomp ddp_hook")
        try:
            return self._reduce_bucket(buffer, grads, params, step, last)
        except Exception as e:
            self._failed_step.record(step, e)
            self._previous_step_done = None  # the next step's diagnosis must not span this one
            raise

    def _reduce_bucket(self, buffer: torch.Tensor, grads, params, step: int, last: bool) -> torch.Tensor:
        ex = self._exchange
        assert ex is not None
        stats = ExchangeStats()
        check_reduced_dtypes([("the bucket", buffer.dtype)], "gradcomp ddp_hook")
        x = widened(buffer)  # a bf16 / fp16 bucket: encoded, summed and error-fed back in fp32
        if not self._checked:
            # the iteration too: ranks resumed from different checkpoints would size their messages apart
            check_ranks_agree({**self.config(), "iter": step, "dtype": str(buffer.dtype)}, self.process_group,
                              self.timeout, "gradcomp ddp_hook", buffer.device)
            self._checked = True
        compressed_elements = 0
        if step < self.start_iter or ex.world == 1:
            if self._policy in ("dgc", "ef21-sgdm") and not self._warned_exact_momentum:
                warnings.warn(f"gradcomp ddp_hook: {self.error_feedback}'s momentum is part of what it sends, and "
                              f"{'a world of one rank' if ex.world == 1 else f'the steps before start_iter={self.start_iter}'}"
                              " all-reduce exactly, without it: those steps take no momentum unless the optimizer "
                              "has its own", stacklevel=2)
                self._warned_exact_momentum = True
            ex.exact_mean(x, stats)
        else:
            layout, parts = self._layout(buffer, grads, params)  # offsets in elements: the same in x
            compressed_elements = sum(p.end - p.start for p in parts if not p.lossless)
            # DGC's warm-up counts from compression's start
            ex.warmup = (step - self.start_iter, self._parsed.warmup) if self._policy == "dgc" else (0, 0)
            ex.name_at = layout.name_at
            self._reduce_parts(layout, x, parts, step, stats)
        if x is not buffer:
            buffer.copy_(x)  # rounded once, after the fp32 mean
        self._account(step, last, buffer.numel(), compressed_elements, stats, buffer.element_size())
        return buffer

    def _reduce_parts(self, layout: Layout, x: torch.Tensor, parts: list[Part], step: int,
                      stats: ExchangeStats) -> None:
        """Parameters below min_numel travel lossless (fp32) in the same messages as the compressed
        ones: one all_to_all and one all-gather per bucket whatever its mix (random-k sends them through
        a lossless reduce-scatter of their own, since its values are summed on the wire)."""
        ex = self._exchange
        ef = self.error_feedback != "none" and any(not p.lossless for p in parts)
        # ef21 stores -h as the residual (_policy.py); its estimate's step needs what was sent after the
        # exchange has overwritten x.
        ef21 = ef and self._parsed.shares_estimate
        momentum = ef and self._parsed.has_momentum
        if momentum:
            u, u_new = self.momentum.current(layout, x.device), self.momentum.scratch(layout)
            u_new.copy_(u)  # kept only once the step has succeeded
            if self._policy == "ef21-sgdm":
                ef21_sgdm_momentum(self._parsed, parts, x, u, u_new)
            else:
                dgc_momentum(self._parsed, parts, [p.name for p in layout.pieces], x, u, u_new, stats,
                             "gradcomp ddp_hook", ex.rank)
        grad = x.clone() if ef21 else None
        rin = self.residuals.current(layout, x.device) if ef else None
        rout = self.residuals.scratch(layout) if ef else None
        if ef:
            rout.copy_(rin)  # a failed step must leave the residual whole; lossless parts keep zeros
        if self.algorithm == "reduce-scatter":
            sin = self.server_residuals.current(layout, x.device) if ef else None
            sout = self.server_residuals.scratch(layout) if ef else None
            if ef:
                sout.copy_(sin)  # only this rank's segments are rewritten; the rest must carry over
            status = ex.reduce_scatter_mean(x, parts, rin, rout, sin, sout, step, layout.hash32, stats)
        elif self.algorithm == "allgather":
            status = ex.allgather_mean(x, parts, rin, rout, step, layout.hash32, stats)
        else:
            lossless = [p for p in parts if p.lossless]
            status = ex.reduce_scatter_mean(x, lossless, None, None, None, None, step, layout.hash32, stats) \
                if lossless else Status()
            compressed = [p for p in parts if not p.lossless]
            if status.code == STATUS_OK and compressed:
                status = ex.randomk_mean(x, compressed, rin, rout, step, layout.hash32, stats)
        if status.code != STATUS_OK:
            raise_status(status, "ddp_hook", layout.name_at, step, layout.hash32)
        if ef21:
            # x holds the mean of what the ranks sent (the same bytes everywhere): H' = H + mean is the
            # gradient handed back and the shared estimate kept. Lossless parameters stay exact.
            ef21_estimates_after(parts, rout, grad)
            ef21_add_shared_estimate(self.shared, layout, parts, x)
        if self._policy == "dgc" and momentum:
            dgc_masking(parts, rin, rout, u_new, stats)
        if momentum:
            self.momentum.commit(layout)
        if ef:
            self.residuals.commit(layout)
            if self.algorithm == "reduce-scatter":
                self.server_residuals.commit(layout)

    def _account(self, step: int, last: bool, elements: int, compressed_elements: int, stats: ExchangeStats,
                 element_size: int) -> None:
        p = self._pending_stats
        if p.get("step") != step:
            if p.get("buckets") and not p.get("published"):
                # the last step's last bucket never came (_backwards.py): its statistics, without the
                # diagnosis, whose times need that bucket
                self._publish(p)
            p.clear()
            p.update(step=step, buckets=0, elements=0, bucket_bytes=0, compressed_elements=0, stats=ExchangeStats(),
                     started=time.perf_counter(), traffic=[])
        p["traffic"].append(cost_model.BucketTraffic(elements, compressed_elements))
        p["buckets"] += 1
        p["elements"] += elements
        p["bucket_bytes"] += elements * element_size  # a bf16 / fp16 model's buckets: DDP's own sends those
        p["compressed_elements"] += compressed_elements
        p["stats"].add(stats)
        if last:
            self._publish(p)
            self._diagnose(p["stats"])

    def _publish(self, p: dict) -> None:
        s: ExchangeStats = p["stats"]
        world = dist.get_world_size(self.process_group)
        fp32_ring = 2 * (world - 1) * p["elements"] * 4 // max(world, 1)
        own_ring = 2 * (world - 1) * p["bucket_bytes"] // max(world, 1)
        self.last_stats = {
            "step": p["step"], "buckets": p["buckets"], "elements": p["elements"],
            "compressed_elements": p["compressed_elements"], "bytes_sent": s.bytes_sent,
            "fp32_allreduce_bytes": fp32_ring, "ddp_allreduce_bytes": own_ring,
            # against DDP's own ring all-reduce of the buckets as they are (bf16 buckets: half fp32's)
            "compression_ratio": own_ring / s.bytes_sent if s.bytes_sent else 1.0,
            "codec_seconds": s.codec_seconds, "comm_seconds": s.comm_seconds,
            "skipped": s.skipped, "saturated": s.saturated, "resets": s.resets,
        }
        p["published"] = True

    def _diagnose(self, s: ExchangeStats) -> None:
        """last_stats' diagnosis (gradcomp.diagnose): the step is the time between two steps' last buckets
        completing, the exposed communication the time from the last bucket's hand-over (backward done)
        to its completion, compute the rest. From the second step on. The modelled steps on model_links,
        and a codec-bound step's alternatives, come from gradcomp.cost_model."""
        now = time.perf_counter()
        previous, self._previous_step_done = self._previous_step_done, now
        if previous is None or self._last_bucket_submitted is None:
            return
        iteration = now - previous
        exposed = min(max(0.0, now - self._last_bucket_submitted), iteration)
        comm = s.comm_seconds + s.codec_seconds
        compute_ms, exposed_ms, codec_ms = 1e3 * (iteration - exposed), 1e3 * exposed, 1e3 * s.codec_seconds
        # What overlap can hide: the backward that runs after the step's first bucket was handed over.
        hideable_ms = 1e3 * max(0.0, self._last_bucket_submitted - self._pending_stats["started"])
        traffic = self._pending_stats["traffic"]
        world = dist.get_world_size(self.process_group)
        modelled, alternatives = {}, []
        try:   # what the model says is an observation: its failure is reported, never fails the step
            for link in self.model_links:
                wire, _ = cost_model.wire_and_codec_ms(self.codec.canonical_spec, traffic, world, link,
                                                       algorithm=_MODEL_ALGORITHM[self.algorithm],
                                                       measure_codec=False)
                modelled[link] = cost_model.step_ms(compute_ms, hideable_ms, wire, codec_ms)
            if codec_bound(compute_ms, exposed_ms, codec_ms) and world > 1:
                link = self.model_links[0] if self.model_links else cost_model.effective_link(s.bytes_sent,
                                                                                              s.comm_seconds)
                if link is not None:
                    codecs = (self.codec.canonical_spec,) + tuple(c for c in cost_model.CANDIDATE_CODECS
                                                                  if c != self.codec.canonical_spec)
                    found = cost_model.alternatives(traffic, world, link, compute_ms, hideable_ms, codecs)
                    alternatives = [(a.codec, a.step_ms) for a in found]
        except _C.Error as e:
            self.last_stats["model_error"] = str(e)
        d = diagnose(compute_ms, 1e3 * max(comm, exposed), exposed_ms, codec_ms, codec=self.codec.canonical_spec,
                     alternatives=alternatives)
        self.last_stats.update(iteration_seconds=iteration, exposed_seconds=exposed,
                               comm_fraction=d.comm_fraction, scaling_efficiency=d.efficiency,
                               bottleneck=d.bottleneck, diagnosis=d.sentence())
        if modelled:
            self.last_stats["model_step_ms"] = modelled


# The C++ algorithm whose cost the cost model charges for each of the hook's exchanges.
_MODEL_ALGORITHM = {"reduce-scatter": "ring", "allgather": "allgather", "randomk": "randomk"}


def _value_or_raise(fut: torch.futures.Future) -> torch.Tensor:
    return fut.value()


def ddp_hook(state: DDPState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The communication hook: ddp.register_comm_hook(state, gradcomp.torch.ddp_hook)."""
    return state._submit(bucket)
