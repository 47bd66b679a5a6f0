import pytest
import torch

from {{ cookiecutter.package_name }}.model import Regressor
from {{ cookiecutter.package_name }}.network import MLP


def fixed_batch(size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows in large units and a target around 150 that depends on them linearly."""
    generator = torch.Generator().manual_seed(0)
    features = 50 + 10 * torch.randn(size, 10, generator=generator)
    return features, 150 + 3 * (features[:, 0] - 50) - 2 * (features[:, 1] - 50)


def trained_on(batch, steps: int) -> Regressor:
    torch.manual_seed(0)
    model = Regressor(MLP(10, dropout=0.0))
    features, targets = batch
    statistics = {
        "feature_mean": features.mean(dim=0),
        "feature_std": features.std(dim=0),
        "target_mean": targets.mean(),
        "target_std": targets.std(),
    }
    for name, value in statistics.items():
        getattr(model, name).copy_(value)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        optimizer.zero_grad()
        model.loss(batch).backward()
        optimizer.step()
    return model


def test_training_steps_lower_the_loss_and_predictions_come_in_target_units():
    batch = fixed_batch()
    model = trained_on(batch, 100)
    with torch.no_grad():
        before = trained_on(batch, 0).loss(batch).item()
        after = model.loss(batch).item()
        predicted = model(batch[0])
    assert after < before * 0.2
    assert predicted.shape == (64,)
    assert (predicted - batch[1]).abs().mean() < 0.2 * batch[1].std()  # in the target's units


def test_the_standardization_is_saved_with_the_weights():
    model = trained_on(fixed_batch(), 1)
    reloaded = Regressor(MLP(10))
    reloaded.load_state_dict(model.state_dict())
    assert float(reloaded.target_mean) == pytest.approx(float(model.target_mean))
    assert torch.equal(reloaded.feature_std, model.feature_std)


def test_predict_step_returns_values_and_targets():
    model = Regressor(MLP(10)).eval()
    features, targets = fixed_batch(6)
    output = model.predict_step((features, targets), 0)
    assert output["predicted"].shape == (6,) and torch.equal(output["target"], targets)
    assert set(model.predict_step([features], 0)) == {"predicted"}
