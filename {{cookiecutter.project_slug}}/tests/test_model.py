import torch

from {{ cookiecutter.package_name }}.model import Classifier
from {{ cookiecutter.package_name }}.network import ConvNet


def fixed_batch(size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.rand(size, 1, 8, 8, generator=generator), torch.randint(0, 10, (size,), generator=generator)


def test_training_steps_lower_the_loss_on_a_fixed_batch():
    torch.manual_seed(0)
    model = Classifier(ConvNet((1, 8, 8), 10, dropout=0.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    batch = fixed_batch()
    # Train mode throughout (no dropout): BatchNorm normalises with the batch's own statistics,
    # so before and after are measured the same way.
    with torch.no_grad():
        before = model.loss_fn(model(batch[0]), batch[1]).item()
    for _ in range(10):
        optimizer.zero_grad()
        model.loss_fn(model(batch[0]), batch[1]).backward()
        optimizer.step()
    with torch.no_grad():
        after = model.loss_fn(model(batch[0]), batch[1]).item()
    assert after < before * 0.9


def test_predict_step_returns_classes_confidences_and_targets():
    model = Classifier(ConvNet((1, 8, 8), 10)).eval()
    images, targets = fixed_batch(6)
    output = model.predict_step((images, targets), 0)
    assert output["predicted"].shape == (6,)
    assert ((output["confidence"] > 0) & (output["confidence"] <= 1)).all()
    assert torch.equal(output["target"], targets)
