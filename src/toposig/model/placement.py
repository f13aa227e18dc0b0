"""Where a model runs and in what precision: ``--device`` and ``--dtype`` resolved once.

A :class:`Placement` is made once per run (:meth:`Placement.resolve`) or per in-memory
model (:meth:`Placement.of_model`) and answers every later question: is it CUDA, in
which torch dtype are the weights loaded, is the forward pass under bf16 autocast, how
many texts go into one batch, what the device is called, and freeing its cached memory.
No other module reads a device from its name (:func:`is_cuda_device`).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

from toposig.config import AUTOCAST, CPU_BATCH_SIZE


@dataclass(frozen=True)
class Placement:
    """A resolved device and precision.

    Attributes:
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:<i>"``.
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or ``"bf16-autocast"``
            (weights in float32, matrix products in bfloat16 under ``torch.autocast``).
    """

    device: str = "cpu"
    dtype: str = "float32"

    @classmethod
    def resolve(cls, device: str = "auto", dtype: str = "auto",
                remote_gpus: bool = False) -> Placement:
        """``--device`` and ``--dtype`` as given: ``auto`` is CUDA when this machine has
        it (or when the checkpoints run on remote GPU workers, ``remote_gpus``), and
        ``bf16-autocast`` on CUDA, ``float32`` elsewhere.

        Raises:
            ValueError: a CUDA device asked for where there is none.
        """
        if remote_gpus and (device == "auto" or is_cuda_device(device)):
            device = "cuda"  # each Ray task sees its own GPU as cuda; this driver may have none
        else:
            import torch

            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            elif is_cuda_device(device) and not torch.cuda.is_available():
                raise ValueError(f"--device {device} asked for, but CUDA is not available "
                                 "here")
        if dtype == "auto":
            dtype = AUTOCAST if is_cuda_device(device) else "float32"
        return cls(device, dtype)

    @classmethod
    def of_model(cls, model, dtype: str = "auto") -> Placement:
        """Where an in-memory model already is, in the precision of its weights; with
        ``dtype="bf16-autocast"``, a float32 model on CUDA runs its forward pass under
        bf16 autocast (any other ``dtype`` setting leaves the precision as it is).

        Raises:
            ValueError: no floating-point parameter, or parameters on several devices or
                in several precisions.
        """
        places = {(str(p.device), str(p.dtype).removeprefix("torch."))
                  for p in model.parameters() if p.is_floating_point()}
        if len(places) != 1:
            raise ValueError(
                "the model has no floating-point parameters" if not places else
                "the model's parameters are on several devices or in several precisions ("
                + ", ".join(sorted(f"{d} {t}" for d, t in places)) + "): measure it on one "
                "device in one precision")
        device, weights = places.pop()
        if dtype == AUTOCAST and is_cuda_device(device) and weights == "float32":
            return cls(device, AUTOCAST)
        return cls(device, weights)

    @property
    def is_cuda(self) -> bool:
        return is_cuda_device(self.device)

    def description(self) -> str:
        """The device by name: the GPU's (``NVIDIA H100 80GB HBM3``), or the CPU's."""
        if self.is_cuda:
            import torch

            try:
                return torch.cuda.get_device_name(torch.device(self.device))
            except (AssertionError, RuntimeError):  # the GPUs are Ray workers' elsewhere
                return "CUDA device (remote workers)"
        return f"{platform.processor() or platform.machine()} CPU"

    def free_memory(self) -> None:
        """Return the device's cached memory (CUDA's caching allocator; nothing on a CPU)."""
        free_device_memory(self.device)

    @property
    def cuda_device(self) -> str | None:
        """The device for passes that run on a GPU when there is one (``None``: the CPU)."""
        return self.device if self.is_cuda else None

    @property
    def autocast_bf16(self) -> bool:
        """The forward pass runs its matrix products in bfloat16 under autocast."""
        return self.dtype == AUTOCAST

    @property
    def weight_dtype(self):
        """The torch dtype the model's weights are loaded in."""
        import torch

        return torch.float32 if self.autocast_bf16 else getattr(torch, self.dtype)

    def batch_size(self, requested: int | str, n_texts: int) -> int:
        """Texts per forward batch: ``requested``, or for ``auto`` every text in one batch
        on a GPU (the forward pass halves it on out-of-memory errors) and
        :data:`~toposig.config.CPU_BATCH_SIZE` elsewhere."""
        if requested != "auto":
            return int(requested)
        return max(n_texts, 1) if self.is_cuda else CPU_BATCH_SIZE


def is_cuda_device(device: object) -> bool:
    """Whether ``device`` (a name such as ``cuda:1``, or a ``torch.device``) is a GPU."""
    return str(device).startswith("cuda")


def free_device_memory(device: object) -> None:
    """Return CUDA's cached memory on ``device``; nothing on a CPU."""
    if is_cuda_device(device):
        import torch

        torch.cuda.empty_cache()
