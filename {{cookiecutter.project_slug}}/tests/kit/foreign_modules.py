"""LightningModules shaped unlike the kit's fixtures, written the way public examples write them.

Each holds a piece of the README's "Bring your own LightningModule" contract up to the light:
- `GAN` (after Lightning's basic GAN example): manual optimization of two optimizers from its
  own `configure_optimizers`, images without labels, a `forward` that takes latent noise (and
  says so in `example_input_array`), no `test_step`.
- `AutoEncoder` (after Lightning's LitAutoEncoder): `training_step` flattens the images, so
  `forward` takes what no batch holds; no `example_input_array`, no `predict_step`.
- `TextClassifier` (after Lightning's Hugging Face examples): a tiny `transformers` BERT built
  from a config (nothing downloaded), dict batches, a `forward` returning the model's output object.
- `StepScheduled`: its own `configure_optimizers` returning a scheduler dict stepped every batch.
Their DataModules are `KitDataModule`s, as the README asks of one's own data.
"""

import math
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from torch import Tensor, nn
from torch.utils.data import Dataset, TensorDataset

from kit_fixtures import CLASSES, Blobs, NamedTensors
from kit_testing import PROJECT_ROOT

IMAGE = (1, 8, 8)
TOKENS, VOCABULARY = 8, 16


class BlobImages(Blobs):
    """The blobs as 1x8x8 images, for the image models."""

    model_links = ()

    def __init__(self, batch_size: int | str = 16, seed: int = 0) -> None:
        super().__init__(batch_size, seed, shape=IMAGE)  # type: ignore[arg-type]


class UnlabelledImages(BlobImages):
    """The images alone, as a GAN's data arrives: each batch a one-tensor tuple."""

    def dataset(self, points: Tensor, labels: Tensor) -> Dataset:
        return TensorDataset(points)


class GAN(L.LightningModule):
    """A generator and a discriminator, each stepped by hand with its own optimizer."""

    def __init__(self, latent_dim: int = 8, lr: float = 2e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        pixels = math.prod(IMAGE)
        self.generator = nn.Sequential(nn.Linear(latent_dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, pixels))
        self.discriminator = nn.Sequential(
            nn.Flatten(), nn.Linear(pixels, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1)
        )
        self.example_input_array = torch.zeros(2, latent_dim)

    def forward(self, z: Tensor) -> Tensor:
        return self.generator(z).view(z.size(0), *IMAGE)

    def adversarial_loss(self, scores: Tensor, real: bool) -> Tensor:
        target = torch.ones_like(scores) if real else torch.zeros_like(scores)
        return nn.functional.binary_cross_entropy_with_logits(scores, target)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        (images,) = batch
        generator_optimizer, discriminator_optimizer = self.optimizers()  # type: ignore[misc]
        z = torch.randn(len(images), self.hparams.latent_dim, device=self.device)

        self.toggle_optimizer(generator_optimizer)
        generator_loss = self.adversarial_loss(self.discriminator(self(z)), real=True)
        self.manual_backward(generator_loss)
        generator_optimizer.step()
        generator_optimizer.zero_grad()
        self.untoggle_optimizer(generator_optimizer)

        self.toggle_optimizer(discriminator_optimizer)
        fake = self(z).detach()
        real_loss = self.adversarial_loss(self.discriminator(images), real=True)
        discriminator_loss = (real_loss + self.adversarial_loss(self.discriminator(fake), real=False)) / 2
        self.manual_backward(discriminator_loss)
        discriminator_optimizer.step()
        discriminator_optimizer.zero_grad()
        self.untoggle_optimizer(discriminator_optimizer)
        self.log_dict({"train/g_loss": generator_loss, "train/d_loss": discriminator_loss})

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (images,) = batch
        self.log("val/loss", self.adversarial_loss(self.discriminator(images), real=True))

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor:
        """One generated image per input image, flattened."""
        (images,) = batch
        return self(torch.randn(len(images), self.hparams.latent_dim, device=self.device)).flatten(1)

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        lr = self.hparams.lr
        return [
            torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(0.5, 0.999)),
            torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(0.5, 0.999)),
        ]


class AutoEncoder(L.LightningModule):
    """Encodes flattened images to 3 numbers and decodes them back; `forward` is the encoder."""

    def __init__(self, code: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()
        pixels = math.prod(IMAGE)
        self.encoder = nn.Sequential(nn.Linear(pixels, 16), nn.ReLU(), nn.Linear(16, code))
        self.decoder = nn.Sequential(nn.Linear(code, 16), nn.ReLU(), nn.Linear(16, pixels))

    def forward(self, x: Tensor) -> Tensor:
        return self.encoder(x)

    def reconstruction_loss(self, batch: Any) -> Tensor:
        x, _ = batch
        x = x.view(x.size(0), -1)
        return nn.functional.mse_loss(self.decoder(self.encoder(x)), x)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self.reconstruction_loss(batch)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/loss", self.reconstruction_loss(batch))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test/loss", self.reconstruction_loss(batch))


class TokenSequences(Blobs):
    """Sequences of `TOKENS` token ids, Hugging Face style: dicts of `input_ids`,
    `attention_mask` and `labels`. A sequence's class is the token it repeats most."""

    model_links = ()

    def __init__(self, batch_size: int | str = 16, seed: int = 0) -> None:
        super().__init__(batch_size, seed)  # type: ignore[arg-type]

    def dataset(self, points: Tensor, labels: Tensor) -> Dataset:
        generator = torch.Generator().manual_seed(int(labels.sum()))
        input_ids = torch.randint(CLASSES, VOCABULARY, (len(labels), TOKENS), generator=generator)
        input_ids[:, : TOKENS // 2] = labels.unsqueeze(1)  # half the sequence is its class's token
        shuffled = torch.argsort(torch.rand(len(labels), TOKENS, generator=generator), dim=1)
        input_ids = input_ids.gather(1, shuffled)
        return NamedTensors(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=labels)


class TextClassifier(L.LightningModule):
    """A one-layer BERT for sequence classification, built from a config, as in the transformers docs."""

    def __init__(self, hidden_size: int = 16, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        from transformers import BertConfig, BertForSequenceClassification

        config = BertConfig(
            vocab_size=VOCABULARY,
            hidden_size=hidden_size,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=2 * hidden_size,
            max_position_embeddings=TOKENS,
            num_labels=CLASSES,
        )
        self.model = BertForSequenceClassification(config)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None
    ) -> Any:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self(**batch).loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        output = self(**batch)
        self.log("val/loss", output.loss)
        self.log("val/acc", (output.logits.argmax(-1) == batch["labels"]).float().mean())

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        output = self(**batch)
        self.log("test/acc", (output.logits.argmax(-1) == batch["labels"]).float().mean())

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        logits = self(batch["input_ids"], batch["attention_mask"]).logits
        return {"predicted": logits.argmax(-1)}


class StepScheduled(L.LightningModule):
    """An MLP classifier with its own SGD and a OneCycleLR stepped every batch."""

    def __init__(self, hidden: int = 16, max_lr: float = 0.1, total_steps: int = 1000) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layers = nn.Sequential(
            nn.Flatten(), nn.Linear(math.prod(IMAGE), hidden), nn.ReLU(), nn.Linear(hidden, CLASSES)
        )
        self.example_input_array = torch.zeros(1, *IMAGE)

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val/loss", nn.functional.cross_entropy(logits, y))
        self.log("val/acc", (logits.argmax(-1) == y).float().mean())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test/acc", (self(x).argmax(-1) == y).float().mean())

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, _ = batch
        return self(x).softmax(-1)

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.max_lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, self.hparams.max_lr, self.hparams.total_steps
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


# By name, for `python -m kit_fixtures --fixture=NAME`.
FOREIGN: dict[str, tuple[type[L.LightningModule], type[Blobs]]] = {
    "gan": (GAN, UnlabelledImages),
    "autoencoder": (AutoEncoder, BlobImages),
    "text": (TextClassifier, TokenSequences),
    "step_scheduled": (StepScheduled, BlobImages),
}


def default_config_for_any_module(folder: Path) -> Path:
    """configs/default.yaml without the example's `model:` and `data:` sections, written into
    `folder`: what the README tells a user to delete when bringing their own module (the
    callbacks, optimizer and scheduler stay). The best checkpoint watches `val/loss`, which
    every module here logs."""
    config = yaml.safe_load((PROJECT_ROOT / "configs" / "default.yaml").read_text())
    del config["model"], config["data"]
    config["checkpoint"] = {"monitor": "val/loss"}
    path = folder / "default.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
