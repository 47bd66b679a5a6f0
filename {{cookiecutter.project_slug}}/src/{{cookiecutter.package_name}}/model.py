"""The LightningModule: loss and metrics around whichever network it is given.

Nothing here names a device: Lightning places the module and batches, torchmetrics syncs ranks.
"""

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

Batch = tuple[Tensor, Tensor]


class Classifier(L.LightningModule):
    """Trains `network` with cross-entropy; logs accuracy (train) and loss and accuracy (val, test).

    The network is injected (`model.network.class_path` in the config), so another architecture
    is a new class and two YAML lines; the optimizer and LR scheduler are settings too
    (`--optimizer=SGD --optimizer.lr=0.1`). `image_shape` and `num_classes` come from the data.
    """

    def __init__(
        self,
        network: nn.Module,
        image_shape: tuple[int, int, int] = (1, 8, 8),
        num_classes: int = 10,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__()
        if not 0 <= label_smoothing < 1:
            raise ValueError(f"--model.label_smoothing must lie in [0, 1), got {label_smoothing}.")
        self.save_hyperparameters()  # from the CLI: the network's class_path and settings
        self.network = network
        self.loss_fn = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
        # One metric object per stage, synced across ranks; no input checks on the per-step one
        # (they cost time every step; the loss already refuses bad targets).
        self.train_acc = MulticlassAccuracy(num_classes, average="micro", validate_args=False)
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()
        # Lets Lightning draw the model graph in TensorBoard and summarise layer shapes.
        self.example_input_array = torch.zeros(1, *image_shape)

    def forward(self, images: Tensor) -> Tensor:
        return self.network(images)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        images, targets = batch
        logits = self(images)
        loss = self.loss_fn(logits, targets)
        self.train_acc.update(logits, targets)
        return loss  # logged as train/loss by the kit's fit guard (configs/default.yaml)

    def on_train_epoch_end(self) -> None:
        self.log("train/acc", self.train_acc)  # a metric object: computed over the epoch and ranks

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, self.val_acc, self.val_loss)

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val", self.val_acc, self.val_loss)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, self.test_acc, self.test_loss)

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test", self.test_acc, self.test_loss)

    def predict_step(self, batch: Batch | list[Tensor], batch_idx: int) -> dict[str, Tensor]:
        # Images with labels (the test split), or images alone (a --data.predict_path file).
        probabilities = self(batch[0]).softmax(dim=-1)
        confidence, predicted = probabilities.max(dim=-1)
        columns = {"predicted": predicted, "confidence": confidence}
        return columns if len(batch) == 1 else {**columns, "target": batch[1]}

    def _evaluate(self, batch: Batch, accuracy: MulticlassAccuracy, mean_loss: MeanMetric) -> None:
        images, targets = batch
        logits = self(images)
        accuracy.update(logits, targets)
        mean_loss.update(self.loss_fn(logits, targets), weight=targets.numel())

    def _log_epoch(self, stage: str, accuracy: MulticlassAccuracy, mean_loss: MeanMetric) -> None:
        # Metric objects, logged once per epoch: computed over all DDP ranks, then reset.
        self.log(f"{stage}/acc", accuracy, prog_bar=True)
        self.log(f"{stage}/loss", mean_loss)
