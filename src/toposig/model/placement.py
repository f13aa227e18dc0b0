"""Where a model runs and in what precision: ``--device`` and ``--dtype`` resolved once.

A :class:`Placement` is made once per run (:meth:`Placement.resolve`) or per in-memory
model (:meth:`Placement.of_model`) and answers every later question: is it CUDA, in
which torch dtype are the weights loaded, is the forward pass under bf16 autocast, how
many texts go into one batch.
"""

from __future__ import annotations

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
        if remote_gpus and (device == "auto" or device.startswith("cuda")):
            device = "cuda"  # each Ray task sees its own GPU as cuda; this driver may have none
        else:
            import torch

            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            elif device.startswith("cuda") and not torch.cuda.is_available():
                raise ValueError(f"--device {device} asked for, but CUDA is not available "
                                 "here")
        if dtype == "auto":
            dtype = AUTOCAST if device.startswith("cuda") else "float32"
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
        if dtype == AUTOCAST and device.startswith("cuda") and weights == "float32":
            return cls(device, AUTOCAST)
        return cls(device, weights)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

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
