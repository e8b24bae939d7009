"""PowerSGD as a DDP communication hook, with its state keyed by parameter name.

    import gradcomp.torch as gt
    state = gt.PowerSGDState(ddp, rank=2, start_iter=10, error_feedback="ef")
    ddp.register_comm_hook(state, gt.powersgd_hook)

The math is the one gradcomp's C++ `powersgd` all-reduce runs and torch's powerSGD_hook computes (tested
equal in tests/python/test_powersgd.py): per parameter viewed as shape[0] x rest, M = G + E, Q orthogonalized
(warm start), P = M Q summed over ranks and orthogonalized, Q = M^T P summed and divided by the world size,
the mean approximation P Q^T written back, E = M - P Q^T. Parameters that are vectors, or would not shrink by
`min_compression` ((rows + cols) rank x min_compression >= rows cols), and every step before `start_iter`,
go as exact fp32 means. A bf16 / fp16 model's gradients are reduced in fp32 (M, P, Q and E) and rounded
back once; a float64 model is refused. A bucket costs one all-reduce of its exact parameters, one of all its P and one of
all its Q. With factors="fp16" or "bf16", P and Q cross the wire in that type (half the bytes): each rank
rounds its P (and Q) once, the process group sums them in that type (gloo and NCCL add in it), and the sum
is widened back to fp32 before the orthogonalization; gradcomp's C++ ring with an fp16 / bf16 codec rounds
per hop and adds in fp32 instead, so the two agree within the type's rounding, not bit for bit.

With batch_tensors_with_same_shape=True (torch's option of that name), the parameters of one shape go
through each product and orthogonalization together, as one batched call on their stacked matrices: fewer,
larger kernels, which is what a GPU running many small same-shape layers gains from. P and Q keep their
places in the all-reduced buffers, so the wire is the same; the batched kernels may round differently
from the single ones (tested within fp32 rounding), so the ranks agree on the option before the first
step, and a state saved with one setting resumes with the other.

What it does that torch's hook does not: Q and the residuals are kept by parameter name, so state_dict() /
load_state_dict() resume bitwise on a new DDP instance even when DDP rebuilds its buckets or
bucket_cap_mb changes (torch keys them by bucket index); the initial Q comes from gradcomp's Philox stream
(gradcomp._C.powersgd_initial_q), identical on every rank without a shared torch generator; and the ranks
check that they run one configuration before the first step.
"""

import datetime
from typing import Optional

import torch
import torch.distributed as dist

from .. import _C
from ._agreement import check_ranks_agree
from ._deadline import wait_within
from ._exchange import check_reduced_dtypes, widened
from ._backwards import Backwards
from ._failed_step import FailedStep
from .ddp import _value_or_raise

_FORMAT = "gradcomp.powersgd_state/1"
_FACTOR_TYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _orthogonalize(m: torch.Tensor, epsilon: float) -> None:
    """Gram-Schmidt on the columns of m (rows x r) in place: col /= ||col|| + eps, then its projection
    removed from the later columns (torch's _orthogonalize_gram_schmidt; gradcomp's cpu::orthogonalizeColumns)."""
    for i in range(m.shape[1]):
        col = m[:, i:i + 1]
        norm = torch.linalg.vector_norm(col)
        if epsilon == 0 and norm == 0:
            col.zero_()
        else:
            col /= norm + epsilon
        if i + 1 < m.shape[1]:
            rest = m[:, i + 1:]
            rest -= torch.sum(col * rest, dim=0, keepdim=True) * col


def _orthogonalize_batch(m: torch.Tensor, epsilon: float) -> None:
    """_orthogonalize on each matrix of a batch (k x rows x r) in place, as torch's hook does for its
    batched tensors: the norms and projections per matrix, the epsilon == 0 rule (a zero column stays
    zero) per matrix too."""
    for i in range(m.shape[2]):
        col = m[:, :, i:i + 1]
        norm = torch.linalg.vector_norm(col, dim=1, keepdim=True)
        if epsilon == 0:
            col.copy_(torch.where(norm == 0, torch.zeros_like(col), col / norm))
        else:
            col /= norm + epsilon
        if i + 1 < m.shape[2]:
            rest = m[:, :, i + 1:]
            rest -= torch.sum(col * rest, dim=1, keepdim=True) * col


def _orthogonalized(m: torch.Tensor, epsilon: float) -> torch.Tensor:
    (_orthogonalize_batch if m.dim() == 3 else _orthogonalize)(m, epsilon)
    return m


class PowerSGDState:
    """Arguments:

    module          the DDP model (or the module it wraps): parameter names key Q and the residuals
    rank            the approximation rank r
    start_iter      iterations before this one are exact fp32 all-reduces
    min_compression a parameter is compressed when rows x cols > min_compression x (rows + cols) x r (strictly,
                    as torch's _should_compress)
    epsilon         the orthogonalization's epsilon
    error_feedback  "ef" (the residual M - P Q^T is added to the next gradient) or "none"
    factors         "fp32" (default), "fp16" or "bf16": the type P and Q are all-reduced in
    batch_tensors_with_same_shape
                    run each step of the math once for all the bucket's matrices of one shape (batched
                    products and orthogonalization) instead of once per matrix
    seed            the initial Q's seed (shared by all ranks)
    process_group   the group to reduce over (default: the default group)
    timeout         the deadline of every wait on a collective
    """

    def __init__(self, module: Optional[torch.nn.Module], *, rank: int = 1, start_iter: int = 0,
                 min_compression: float = 2.0, epsilon: float = 1e-8, error_feedback: str = "ef",
                 factors: str = "fp32", batch_tensors_with_same_shape: bool = False, seed: int = 0,
                 process_group: Optional[dist.ProcessGroup] = None,
                 timeout: datetime.timedelta = datetime.timedelta(minutes=5)):
        for name, value, lo in (("rank", rank, 1), ("start_iter", start_iter, 0), ("seed", seed, 0)):
            if not isinstance(value, int) or value < lo or value >= 2**63:
                raise _C.InvalidArgument(f"PowerSGDState: {name} must be an integer >= {lo}, got {value!r}")
        if not (min_compression >= 0 and min_compression < 1e9):
            raise _C.InvalidArgument(f"PowerSGDState: min_compression must be in [0, 1e9), got {min_compression!r}")
        if not (epsilon >= 0 and epsilon <= 1):
            raise _C.InvalidArgument(f"PowerSGDState: epsilon must be in [0, 1], got {epsilon!r}")
        if error_feedback not in ("none", "ef"):
            raise _C.InvalidArgument(f"PowerSGDState: error_feedback must be 'none' or 'ef', got {error_feedback!r}")
        if factors not in _FACTOR_TYPES:
            raise _C.InvalidArgument(f"PowerSGDState: factors must be one of {sorted(_FACTOR_TYPES)}, got {factors!r}")
        if not isinstance(batch_tensors_with_same_shape, bool):
            raise _C.InvalidArgument(f"PowerSGDState: batch_tensors_with_same_shape must be True or False, got "
                                     f"{batch_tensors_with_same_shape!r}")
        self.factors = factors
        self.batch_tensors_with_same_shape = batch_tensors_with_same_shape
        self.rank, self.start_iter, self.min_compression = rank, start_iter, float(min_compression)
        self.epsilon, self.error_feedback, self.seed = float(epsilon), error_feedback, seed
        self.process_group, self.timeout = process_group, timeout
        self.iter = 0
        self.q: dict[str, torch.Tensor] = {}
        self.residuals: dict[str, torch.Tensor] = {}
        self.last_stats: dict = {}
        self._names: dict[int, str] = {}
        self._ids: dict[str, int] = {}
        self._checked = False
        self._failed_step = FailedStep()
        self._backwards = Backwards()
        if module is not None:
            self.attach(module)

    def attach(self, module: torch.nn.Module) -> "PowerSGDState":
        inner = module.module if isinstance(module, torch.nn.parallel.DistributedDataParallel) else module
        named = list(inner.named_parameters())
        check_reduced_dtypes(((n, p.dtype) for n, p in named if p.requires_grad), "PowerSGDState")
        self._names = {p.data_ptr(): n for n, p in named}
        self._ids = {n: i for i, (n, _) in enumerate(named)}  # the parameter's index keys its initial Q
        return self

    def config(self) -> dict:
        return {"rank": self.rank, "start_iter": self.start_iter, "min_compression": self.min_compression,
                "epsilon": self.epsilon, "error_feedback": self.error_feedback, "factors": self.factors,
                "batch_tensors_with_same_shape": self.batch_tensors_with_same_shape,
                "seed": self.seed, "world_size": dist.get_world_size(self.process_group)}

    def state_dict(self) -> dict:
        return {"format": _FORMAT, "config": self.config(), "iter": self.iter + self._backwards.uncounted,
                "q": {k: v.detach().cpu().clone() for k, v in self.q.items()},
                "residuals": {k: v.detach().cpu().clone() for k, v in self.residuals.items()}}

    def load_state_dict(self, sd: dict) -> None:
        if sd.get("format") != _FORMAT:
            raise _C.InvalidArgument(f"PowerSGDState.load_state_dict: not a gradcomp PowerSGD state (format "
                                     f"{sd.get('format')!r}, expected {_FORMAT!r})")
        # A state saved before the factors option existed reduced its factors in fp32. Batching changes
        # neither the state nor the wire: a state resumes with either setting.
        mine, theirs = self.config(), {"factors": "fp32", **sd["config"]}
        diffs = [f"{k}: saved {theirs.get(k)!r}, now {mine[k]!r}" for k in mine
                 if k != "batch_tensors_with_same_shape" and theirs.get(k) != mine[k]]
        if diffs:
            raise _C.InvalidArgument("PowerSGDState.load_state_dict: the checkpoint was made with another "
                                     "configuration (" + "; ".join(diffs) + ")")
        self.iter = int(sd["iter"])
        self._checked = False  # the ranks must agree on the iteration they resume at
        self._failed_step, self._backwards = FailedStep(), Backwards()  # a new run from here
        self.q = {k: v.clone() for k, v in sd["q"].items()}
        self.residuals = {k: v.clone() for k, v in sd["residuals"].items()}

    def __getstate__(self) -> dict:
        # The process group, the model's parameter addresses and a failure of this process do not travel
        # (as the DDP hook's state): after torch.load, attach() the new DDP model; the ranks check again
        # that they agree.
        s = {k: v for k, v in self.__dict__.items()
             if k not in ("process_group", "_names", "_failed_step", "_backwards")}
        s["_checked"], s["iter"] = False, self.iter + self._backwards.uncounted
        return s

    def __setstate__(self, s: dict) -> None:
        # pickled before the options: fp32 factors, one matrix at a time
        self.__dict__.update({"factors": "fp32", "batch_tensors_with_same_shape": False, **s})
        self.process_group, self._names, self._failed_step, self._backwards = None, {}, FailedStep(), Backwards()

    def _initial_q(self, name: str, cols: int, r: int, device) -> torch.Tensor:
        import numpy as np

        q = np.empty(cols * r, dtype=np.float32)
        _C.powersgd_initial_q(self.seed, self._ids[name], cols, r, q)
        return torch.from_numpy(q).view(cols, r).to(device)

    def _all_reduce(self, x: torch.Tensor, what: str) -> None:
        work = dist.all_reduce(x, group=self.process_group, async_op=True)
        wait_within(work, self.timeout, f"gradcomp powersgd_hook: {what} waited for the peers",
                    f"gradcomp powersgd_hook: {what} failed")

    def _all_reduce_factors(self, x: torch.Tensor, what: str, world: int) -> None:
        """x (fp32) summed over the ranks in place, through the `factors` type on the wire. A narrow type
        carries x / world (so that the sum stays within each rank's magnitude; fp16 ends at 65504) and the
        sum is scaled back; a sum that still overflows raises NonFiniteError on every rank alike (they
        all hold the same sum) before Q or a residual is written."""
        dtype = _FACTOR_TYPES[self.factors]
        if dtype == torch.float32:
            self._all_reduce(x, what)
            return
        narrow = (x / world).to(dtype)
        self._all_reduce(narrow, what)
        if not bool(torch.isfinite(narrow).all()):
            raise _C.NonFiniteError(f"gradcomp powersgd_hook: {what} overflowed {self.factors} (factors="
                                    f"{self.factors!r} carries values up to {torch.finfo(dtype).max:g} times the "
                                    f"world size); use factors='bf16' or 'fp32', or a smaller loss scale")
        x.copy_(narrow).mul_(world)

    def _batches(self, parts: list) -> list:
        """The parts' indices in the groups the math runs together: one group per shape (rows, cols, rank), in
        the order shapes first appear, with batch_tensors_with_same_shape; one part per group without."""
        if not self.batch_tensors_with_same_shape:
            return [[i] for i in range(len(parts))]
        by_shape: dict = {}
        for i, (_, _, rows, cols, r) in enumerate(parts):
            by_shape.setdefault((rows, cols, r), []).append(i)
        return list(by_shape.values())

    def _each(self, f, *tensors: list) -> list:
        """f over matched same-shape matrices: one call on their stacks (k x rows x cols) where batching,
        otherwise one call per matrix; returns the matrices of the results."""
        if self.batch_tensors_with_same_shape and len(tensors[0]) > 1:
            return list(f(*(torch.stack(t) for t in tensors)).unbind(0))
        return [f(*t) for t in zip(*tensors)]

    def _reduce(self, bucket: dist.GradBucket) -> torch.Tensor:
        # counted before the work: a failed step too
        step, self.iter, begins = self._backwards.step(self.iter, bucket.index(), bucket.is_last())
        if begins:
            self._failed_step.begin_backward()
        self._failed_step.raise_if_failed(step, "gradcomp powersgd_hook")
        try:
            return self._reduce_bucket(bucket, step)
        except Exception as e:
            self._failed_step.record(step, e)
            raise

    def _reduce_bucket(self, bucket: dist.GradBucket, step: int) -> torch.Tensor:
        group, world = self.process_group, dist.get_world_size(self.process_group)
        buffer = bucket.buffer()
        check_reduced_dtypes([("the bucket", buffer.dtype)], "gradcomp powersgd_hook")
        if not self._checked:
            # the iteration too: ranks resumed from different checkpoints would exchange P on one, fp32 on another
            check_ranks_agree({**self.config(), "iter": step}, group, self.timeout, "gradcomp powersgd_hook",
                              buffer.device)
            self._checked = True
        if step < self.start_iter:
            x = widened(buffer)
            self._all_reduce(x, "the exact all-reduce")
            x.div_(world)
            if x is not buffer:
                buffer.copy_(x)
            self.last_stats = {"step": step, "compressed": 0, "batches": 0, "elements_sent": buffer.numel(),
                               "factor_bytes": 0}
            return buffer
        exact, parts = [], []
        for grad, param in zip(bucket.gradients(), bucket.parameters()):
            name = self._names.get(param.data_ptr())
            if name is None:
                raise _C.InvalidArgument("gradcomp powersgd_hook: a bucket holds a parameter the state does not "
                                         "know; build the state with the DDP model, or attach() it after torch.load")
            rows = grad.shape[0] if grad.dim() >= 2 else 0
            cols = grad.numel() // rows if rows else 0
            r = min(self.rank, rows, cols)
            if rows > 1 and cols > 1 and (rows + cols) * r * self.min_compression < rows * cols:
                parts.append((name, grad, rows, cols, r))
            else:
                exact.append(grad)
        if exact:
            flat = torch.cat([g.reshape(-1) for g in exact]).float()
            self._all_reduce(flat, "the all-reduce of the uncompressed parameters")
            flat.div_(world)
            at = 0
            for g in exact:
                g.copy_(flat[at:at + g.numel()].view_as(g))
                at += g.numel()
        batches = self._batches(parts)
        if parts:
            eps = self.epsilon
            ms, qs = [], []
            for name, grad, rows, cols, r in parts:
                m = grad.reshape(rows, cols).to(torch.float32, copy=True)  # M, its P, Q and E in fp32
                if self.error_feedback == "ef" and name in self.residuals:
                    m += self.residuals[name].to(m.device)
                q = self.q.get(name)
                if q is None or q.shape != (cols, r):
                    q = self._initial_q(name, cols, r, m.device)
                ms.append(m)
                qs.append(q.to(m.device, copy=True))  # orthogonalized: the state keeps its Q until the step ends
            ps = [None] * len(parts)
            for b in batches:
                q_b = self._each(lambda q: _orthogonalized(q, eps), [qs[i] for i in b])
                for i, q, p in zip(b, q_b, self._each(lambda m, q: m @ q, [ms[i] for i in b], q_b)):
                    qs[i], ps[i] = q, p
            p_all = torch.cat([p.reshape(-1) for p in ps])
            self._all_reduce_factors(p_all, "the all-reduce of P", world)
            at = 0
            for i, p in enumerate(ps):
                ps[i] = p_all[at:at + p.numel()].view_as(p)
                at += p.numel()
            for b in batches:
                for i, p in zip(b, self._each(lambda p: _orthogonalized(p, eps), [ps[i] for i in b])):
                    ps[i] = p
            q_new = [None] * len(parts)
            for b in batches:
                products = self._each(lambda m, p: m.transpose(-2, -1) @ p, [ms[i] for i in b], [ps[i] for i in b])
                for i, q in zip(b, products):
                    q_new[i] = q
            q_all = torch.cat([q.reshape(-1) for q in q_new])
            self._all_reduce_factors(q_all, "the all-reduce of Q", world)
            q_all.div_(world)
            at = 0
            for i, (_, _, rows, cols, r) in enumerate(parts):
                q_new[i] = q_all[at:at + cols * r].view(cols, r)
                at += cols * r
            approx = [None] * len(parts)
            for b in batches:
                products = self._each(lambda p, q: p @ q.transpose(-2, -1), [ps[i] for i in b], [q_new[i] for i in b])
                for i, a in zip(b, products):
                    approx[i] = a
            for (name, grad, rows, cols, r), m, a, q in zip(parts, ms, approx, q_new):
                grad.copy_(a.view_as(grad))
                self.q[name] = q.clone()
                if self.error_feedback == "ef":
                    self.residuals[name] = m - a
        factor_elements = sum((rows + cols) * r for _, _, rows, cols, r in parts)
        self.last_stats = {"step": step, "compressed": len(parts), "batches": len(batches),
                           "elements_sent": sum(g.numel() for g in exact) + factor_elements,
                           "factor_bytes": factor_elements * _FACTOR_TYPES[self.factors].itemsize}
        return buffer


# No `from __future__ import annotations` here: DDP checks that the hook's annotations are the
# dist.GradBucket and Future[torch.Tensor] types themselves, not their names.
def powersgd_hook(state: PowerSGDState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook: register with ddp.register_comm_hook(state, powersgd_hook). The
    collectives run on the calling thread (backward's), one bucket after another."""
    fut: torch.futures.Future = torch.futures.Future()
    try:
        fut.set_result(state._reduce(bucket))
    except Exception as e:
        fut.set_exception(e)
    # DDP reads the Future from C++, which sees a set_exception as a value; re-raising in a callback makes it
    # an error that backward() raises with this message (as gradcomp's ddp_hook does).
    return fut.then(_value_or_raise)
