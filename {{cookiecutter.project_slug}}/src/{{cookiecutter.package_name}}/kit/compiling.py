"""`--compile.enabled=true`: torch.compile the model for a run, off by default.

The model is compiled in place (`nn.Module.compile`), not wrapped (`torch.compile(module)`), so
its parameters keep their names: a checkpoint written by a compiled run loads into an
uncompiled model and the other way round, with no `_orig_mod.` prefixes to strip. Compiling is
a speed setting, not a hyperparameter: it lives outside the model's settings, so a checkpoint
does not carry it into `test` or a resumed `fit`.
"""

from typing import Literal

import lightning as L
from lightning.pytorch.callbacks import Callback


class CompileModel(Callback):
    """Compiles the LightningModule's forward (what `self(x)` runs) before the run starts.

    The first steps are slower while the compiler works (and again for each new input shape:
    a batch-size search or a short last batch); it pays where the model is large or the device
    fast. `mode` is torch.compile's: default, reduce-overhead (CUDA graphs, GPU) or max-autotune;
    `backend` too: inductor (generates kernels), or aot_eager to find out quickly whether a
    problem is the compiler's (it traces the graphs but runs them with PyTorch's own kernels).
    """

    def __init__(
        self,
        enabled: bool = False,
        mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "default",
        fullgraph: bool = False,
        dynamic: bool | None = None,
        backend: str = "inductor",
    ) -> None:
        self.enabled = enabled
        self.backend = backend
        self.mode = mode
        self.fullgraph = fullgraph
        self.dynamic = dynamic

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.enabled and stage != "fit":
            self._compile(pl_module)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After everything at fit's start that runs the model once: the batch-size search's trial
        # steps, the graph for TensorBoard and the model summary's FLOP count (a forward pass under
        # a counting mode, which would leave dynamo refusing to compile this forward at all).
        if self.enabled:
            self._compile(pl_module)

    def _compile(self, pl_module: L.LightningModule) -> None:
        # In place, so it also applies to a module the strategy has already wrapped (DDP).
        # torch.compile refuses a mode for a backend other than inductor.
        mode = self.mode if self.backend == "inductor" else None
        pl_module.compile(backend=self.backend, mode=mode, fullgraph=self.fullgraph, dynamic=self.dynamic)
