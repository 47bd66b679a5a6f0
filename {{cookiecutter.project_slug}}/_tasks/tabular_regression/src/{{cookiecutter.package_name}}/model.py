"""The LightningModule: loss and metrics around whichever network it is given.

Nothing here names a device: Lightning places the module and batches, torchmetrics syncs ranks.
"""

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import MeanAbsoluteError, MeanSquaredError, MetricCollection, R2Score

Batch = tuple[Tensor, Tensor]


class Regressor(L.LightningModule):
    """Trains `network` with mean squared error; logs MSE, MAE and R² for val and test.

    Inputs and outputs are in the data's own units: `forward` standardises the features with the
    training split's mean and standard deviation and maps the network's output back to target
    units, so exported and served models take raw rows and answer real values. Those statistics
    are buffers, saved in every checkpoint; `setup` fills them from the data before `fit` trains.
    The network is injected (`model.network.class_path`), the optimizer and LR scheduler are
    settings too (`--optimizer=SGD --optimizer.lr=0.1`); `num_features` comes from the data.
    """

    def __init__(self, network: nn.Module, num_features: int = 10) -> None:
        super().__init__()
        self.save_hyperparameters()  # from the CLI: the network's class_path and settings
        self.network = network
        self.register_buffer("feature_mean", torch.zeros(num_features))
        self.register_buffer("feature_std", torch.ones(num_features))
        self.register_buffer("target_mean", torch.tensor(0.0))
        self.register_buffer("target_std", torch.tensor(1.0))
        # One set of metrics per stage, synced across ranks, in target units.
        metrics = MetricCollection({"mse": MeanSquaredError(), "mae": MeanAbsoluteError(), "r2": R2Score()})
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")
        # Lets Lightning draw the model graph in TensorBoard and summarise layer shapes.
        self.example_input_array = torch.zeros(1, num_features)

    def setup(self, stage: str) -> None:
        # Before fit trains, the data's statistics; a checkpoint loaded afterwards (resume,
        # test --ckpt_path) brings the ones it was trained with.
        if stage == "fit" and hasattr(self.trainer.datamodule, "standardization"):
            for name, value in self.trainer.datamodule.standardization().items():
                getattr(self, name).copy_(value)

    def forward(self, features: Tensor) -> Tensor:
        """Predicted targets (batch,) in the data's units for raw feature rows (batch, features)."""
        return self._standardized_forward(features) * self.target_std + self.target_mean

    def _standardized_forward(self, features: Tensor) -> Tensor:
        return self.network((features - self.feature_mean) / self.feature_std)

    def loss(self, batch: Batch) -> Tensor:
        """MSE on the standardised scale: the same learning rate suits any target's units."""
        features, targets = batch
        standardized_targets = (targets - self.target_mean) / self.target_std
        return nn.functional.mse_loss(self._standardized_forward(features), standardized_targets)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        return self.loss(batch)  # logged as train/loss by the kit's fit guard (configs/default.yaml)

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        features, targets = batch
        self.val_metrics.update(self(features), targets)

    def on_validation_epoch_end(self) -> None:
        # Metric objects, logged once per epoch: computed over all DDP ranks, then reset.
        self.log_dict(self.val_metrics)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        features, targets = batch
        self.test_metrics.update(self(features), targets)

    def on_test_epoch_end(self) -> None:
        self.log_dict(self.test_metrics)

    def predict_step(self, batch: Batch | list[Tensor], batch_idx: int) -> dict[str, Tensor]:
        # Rows with targets (the test split), or rows alone (a --data.predict_path file).
        columns = {"predicted": self(batch[0])}
        return columns if len(batch) == 1 else {**columns, "target": batch[1]}
